"""Exported recipe models against Keras: file size, latency, throughput, and (with
`--metrics`) the recipe's test metric under LiteRT quantization, in one run.

For each recipe run (trained here unless `--runs` gives run directories) the run is
exported with `rnnkit.export.export` as a SavedModel, as LiteRT at each quantization
(none, dynamic, float16) and as ONNX. Each LiteRT / ONNX artefact of the recipe (the
forecaster; the classifier from token ids; the language model's one step; the
translation encoder and one decoder step; the captioning model's, where its recipe
has an `export_plan`) is then called on the same inputs by:

- Keras `predict` and a direct call `model(inputs)` of the same computation (the
  artefact's Keras model, the one the converters trace);
- the SavedModel's signature with the same inputs, loaded with `tf.saved_model.load`;
- `ai_edge_litert`'s interpreter (its signature runner, `num_threads` = the cores);
- onnxruntime's `CPUExecutionProvider` (default threads).

Latency is the median wall time of one call at batch 1, throughput the sequences per
second of the median call at batch 64, each after three warm-up calls and taken in
interleaved rounds (every runtime once per round), so that load on the machine hits
all alike. Ratios are speeds over Keras `predict`'s and over the direct call's
(> 1: faster than Keras). Inputs: seeded random floats, token ids 1-19, masks all true,
at the artefact's fixed sizes (free sizes other than the batch: 32). `--repeats`
rounds at batch 1 and `--batch-repeats` at batch 64, or fewer (at least 3) once the
rounds of one model have taken `--budget` seconds.

`--metrics` adds each recipe's test metric computed through its LiteRT files at each
quantization and through the same Keras computation, with the same client code
(greedy decoding for translation): stock RMSE of the forecast closes, sentiment
accuracy (`--metric-limit` evenly spaced test reviews), language-model perplexity
(state carried through `evaluation.batch_size` contiguous streams, one token at a
time), translation BLEU (greedy, `--metric-limit` test pairs).

The runs trained here are the recipes' default architectures, trained briefly (see
TRAINING): the sizes people deploy, not their accuracy. With `--metrics`, those
whose metric would mean nothing after it train longer (METRIC_TRAINING).

    python benchmarks/export.py                          # all recipes, < 10 min
    python benchmarks/export.py --recipes stock sentiment --metrics
    python benchmarks/export.py --runs runs/stock/2026-... --repeats 50
    python benchmarks/export.py --out runs/export_bench  # keep the runs and exports
    python benchmarks/export.py --metrics --train-only --out runs/export_bench
    python benchmarks/export.py --metrics --runs runs/export_bench/runs/*
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
from timing import cpu_line  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SHARED = "../shared/data"  # relative to the repository root, as in the configs
# Each recipe's default architecture (its default config, or the offline config of
# the same model), trained briefly on the local copies of the data.
TRAINING = {
    "stock": ("recipes/stock/configs/default.toml", {"train.epochs": 1}),
    "sentiment": (
        "recipes/sentiment/configs/imdb.toml",
        {"data.limit": 1000, "train.epochs": 1, "evaluation.baselines": False},
    ),
    "language_model": (
        "recipes/language_model/configs/default.toml",
        {"train.epochs": 1},
    ),
    "translation": (
        "recipes/translation/configs/default.toml",
        {
            "data.path": f"{SHARED}/translation/spa-eng.zip",
            "data.limit": 20000,
            "train.epochs": 1,
            "evaluation.beam_width": 1,
            "evaluation.heatmaps": 0,
        },
    ),
    "captioning": (
        "recipes/captioning/configs/flickr8k_mobilenet.toml",
        {
            "data.limit": 100,
            "train.epochs": 1,
            "evaluation.beam_width": 1,
            "evaluation.overlays": 0,
        },
    ),
}
# With `--metrics`, the runs whose metric means nothing after the brief training
# (a sentiment classifier at chance, a translator near 0 BLEU, captions of one word)
# train longer, on the same architecture: a change under quantization is then a
# change of a model that works.
METRIC_TRAINING = {
    "sentiment": {"data.limit": 5000, "train.epochs": 2},
    "translation": {"data.limit": 40000, "train.epochs": 3},
    "captioning": {"data.limit": 1000, "train.epochs": 3},
}
FORMATS = (
    ("saved_model", "none"),
    ("tflite", "none"),
    ("tflite", "dynamic"),
    ("tflite", "float16"),
    ("onnx", "none"),
)
BATCH, WARMUP = 64, 3


def exports_declared(name: str) -> bool:
    """Whether the recipe has an `export_plan` (captioning may not, yet)."""
    from rnnkit import registry
    from rnnkit.recipe import Recipe

    return type(registry.load(name)).export_plan is not Recipe.export_plan


def recipe_of_run(run_dir: Path) -> str:
    import json

    from rnnkit.training.run_dir import RUN_FILE

    return json.loads((run_dir / RUN_FILE).read_text(encoding="utf-8"))["recipe"]


def train(name: str, folder: Path, seed: int, metrics: bool) -> Path:
    from rnnkit import config as config_lib
    from rnnkit import registry
    from rnnkit.training import runner

    recipe = registry.load(name)
    config_file, overrides = TRAINING[name]
    if metrics:
        overrides = {**overrides, **METRIC_TRAINING.get(name, {})}
    config = config_lib.resolve(
        recipe.Config, ROOT / config_file, {**overrides, "train.seed": seed}
    )
    run_dir = folder / "runs" / name
    started = time.perf_counter()
    runner.run(recipe, config, run_dir, verbose=0)
    settings = " ".join(f"--set {k}={v}" for k, v in overrides.items())
    print(
        f"trained {name}: rnnkit run {name} --config {config_file} {settings} "
        f"--set train.seed={seed} ({time.perf_counter() - started:.0f} s)",
        flush=True,
    )
    return run_dir


def folder_size(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def export_all(run_dir: Path, folder: Path) -> dict[tuple[str, str], Path | str]:
    """{(format, quantize): the export's folder, or why it failed}."""
    from rnnkit.export import ExportError, export

    outputs = {}
    for format, quantize in FORMATS:
        started = time.perf_counter()
        try:
            result = export(
                run_dir,
                format=format,
                output=folder / f"{format}_{quantize}",
                quantize=quantize,
                force=True,
            )
        except ExportError as error:
            outputs[format, quantize] = str(error).splitlines()[0]
            print(f"  {format} {quantize} not exported: {outputs[format, quantize]}")
            continue
        outputs[format, quantize] = result.output
        print(
            f"  exported {format} {quantize} ({time.perf_counter() - started:.0f} s)",
            flush=True,
        )
    return outputs


def timing_inputs(artefact, batch: int, seed: int) -> dict:
    """Inputs of `artefact` at `batch` (see the module docstring)."""
    generator = np.random.default_rng(seed)
    inputs = {}
    for tensor in artefact.inputs:
        shape = [
            (batch if axis == 0 else 32) if size is None else size
            for axis, size in enumerate(tensor.shape)
        ]
        kind = np.dtype(tensor.dtype).kind
        if kind == "f":
            value = 0.5 * generator.standard_normal(shape)
        elif kind == "b":
            value = np.ones(shape, bool)
        else:
            value = generator.integers(1, 20, shape)
        inputs[tensor.name] = value.astype(tensor.dtype)
    return inputs


def keras_callables(artefact) -> dict:
    model = artefact.model

    def predict(inputs):
        batch = len(next(iter(inputs.values())))
        return model.predict(inputs, batch_size=batch, verbose=0)

    def call(inputs):
        return {k: np.asarray(v) for k, v in model(inputs).items()}

    return {"Keras predict": predict, "Keras model(x)": call}


def litert_callable(path: Path):
    from ai_edge_litert.interpreter import Interpreter

    interpreter = Interpreter(model_path=str(path), num_threads=os.cpu_count())
    runner = interpreter.get_signature_runner()
    return lambda inputs: runner(**inputs)


def onnx_callable(path: Path):
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.log_severity_level = 3
    session = onnxruntime.InferenceSession(
        str(path), options, providers=["CPUExecutionProvider"]
    )
    names = [output.name for output in session.get_outputs()]
    return lambda inputs: dict(zip(names, session.run(names, inputs), strict=True))


def saved_model_callable(path: Path, artefact):
    """The SavedModel signature taking the artefact's inputs."""
    import tensorflow as tf

    try:
        import tensorflow_text  # noqa: F401 - the translation text ops
    except ImportError:
        pass
    loaded = tf.saved_model.load(str(path))
    # By names and dtypes: captioning's `caption` takes encoded images named "image"
    # too, its `encode` the pixels.
    wanted = {(t.name, t.dtype) for t in artefact.inputs}
    for name, function in loaded.signatures.items():
        specs = function.structured_input_signature[1]
        names = {(key, spec.dtype.name) for key, spec in specs.items()}
        if name != "serving_default" and names == wanted:

            def call(inputs, function=function, loaded=loaded):
                outputs = function(**{k: tf.constant(v) for k, v in inputs.items()})
                return {k: v.numpy() for k, v in outputs.items()}

            return name, call
    return None, None


def runtimes(artefact, files: dict) -> tuple[list, list[str]]:
    """[(label, callable, file size)] of the runtimes of one artefact, and the
    labels of the exports that failed."""
    found, failed = [], []
    saved_model = files["saved_model", "none"]
    if isinstance(saved_model, Path):
        signature, call = saved_model_callable(saved_model, artefact)
        if call is not None:
            found.append((f"SavedModel `{signature}`", call, folder_size(saved_model)))
    else:
        failed.append("SavedModel")
    for format, quantize in FORMATS[1:]:
        label = "ONNX Runtime" if format == "onnx" else f"LiteRT {quantize}"
        folder = files[format, quantize]
        if not isinstance(folder, Path):
            failed.append(label)
            continue
        path = folder / f"{artefact.name}.{'onnx' if format == 'onnx' else 'tflite'}"
        make = onnx_callable if format == "onnx" else litert_callable
        found.append((label, make(path), folder_size(path)))
    return found, failed


def measure(
    callables: dict, inputs: dict, repeats: int, budget: float
) -> dict[str, float]:
    """Median seconds of one call of each callable, in interleaved rounds: `repeats`
    rounds, or fewer (at least 3) once the rounds have taken `budget` seconds."""
    for function in callables.values():
        for _ in range(WARMUP):
            started = time.perf_counter()
            function(inputs)
            if time.perf_counter() - started > 1.0:  # slow enough to be warm
                break
    seconds = {label: [] for label in callables}
    started = time.perf_counter()
    for index in range(repeats):
        if index >= 3 and time.perf_counter() - started > budget:
            break
        for label, function in callables.items():
            call_started = time.perf_counter()
            function(inputs)
            seconds[label].append(time.perf_counter() - call_started)
    return {label: statistics.median(values) for label, values in seconds.items()}


def kib(size: int) -> str:
    return f"{size / 1024:,.0f} KiB" if size < 10 * 2**20 else f"{size / 2**20:.1f} MiB"


def speed_table(name, run_dir, files, args) -> list[str]:
    from rnnkit import registry
    from rnnkit.training import runner

    recipe, config, model = runner.load_run(run_dir, registry.load)
    plan = recipe.export_plan(model, config, "tflite")
    keras_size = folder_size(run_dir / "model.keras")
    rows = []
    for artefact in plan.artefacts:
        found, failed = runtimes(artefact, files)
        callables = {**keras_callables(artefact), **{r[0]: r[1] for r in found}}
        sizes = {"Keras predict": keras_size, "Keras model(x)": keras_size}
        sizes.update({r[0]: r[2] for r in found})
        single = measure(
            callables,
            timing_inputs(artefact, 1, args.seed),
            args.repeats,
            args.budget,
        )
        batched = measure(
            callables,
            timing_inputs(artefact, BATCH, args.seed),
            args.batch_repeats,
            args.budget,
        )
        for label in callables:
            rows.append(
                f"| {name} `{artefact.name}` | {label} | {kib(sizes[label])} "
                f"| {single[label] * 1e3:.2f} "
                f"| {single['Keras predict'] / single[label]:.1f} "
                f"| {single['Keras model(x)'] / single[label]:.2f} "
                f"| {BATCH / batched[label]:,.0f} "
                f"| {batched['Keras predict'] / batched[label]:.2f} "
                f"| {batched['Keras model(x)'] / batched[label]:.2f} |"
            )
        for label in failed:
            rows.append(
                f"| {name} `{artefact.name}` | {label} | not exported (below) "
                "| | | | | | |"
            )
        print(f"  timed {name} {artefact.name}", flush=True)
    return rows


# -- The test metric through the LiteRT files ------------------------------------------


def in_batches(call, inputs: dict, size: int = 64) -> dict:
    total = len(next(iter(inputs.values())))
    parts = [
        call({k: v[start : start + size] for k, v in inputs.items()})
        for start in range(0, total, size)
    ]
    return {k: np.concatenate([np.asarray(p[k]) for p in parts]) for k in parts[0]}


def stock_metric(calls, data, plan, config, model, limit):
    split = data.splits["test"]
    closes = data.prices["close"].to_numpy()
    horizon = model.output_shape[-1]
    inputs = {
        "window": split.inputs.astype("float32"),
        "last_close": closes[split.anchors].astype("float32"),
    }
    actual = closes[split.anchors[:, None] + np.arange(1, horizon + 1)]
    predicted = in_batches(calls["model"], inputs)["close"].astype("float64")
    return "test RMSE (USD)", float(np.sqrt(np.mean((predicted - actual) ** 2)))


def sentiment_metric(calls, data, plan, config, model, limit):
    from rnnkit.export.clients import sentiment_token_ids

    test = data.text.test
    # Evenly spaced reviews: the file lists the positive ones first.
    rows = np.unique(np.linspace(0, len(test) - 1, min(limit, len(test))).astype(int))
    texts, labels = test.texts[rows], test.labels[rows]
    vectorizer = model.get_layer("vectorizer")
    truncate = model.get_layer("truncate")
    ids = sentiment_token_ids(
        list(texts),
        vectorizer.get_vocabulary(),
        truncate.max_length,
        truncate.keep,
        config.data.lowercase,
    )
    probabilities = in_batches(calls["model"], {"token_ids": ids})["probabilities"]
    accuracy = float(np.mean(probabilities.argmax(-1) == labels))
    return f"test accuracy ({len(rows)} reviews)", accuracy


def language_model_metric(calls, data, plan, config, model, limit):
    data = data.with_vocabulary(model.tokens)
    ids = data.test_ids
    streams = config.evaluation.batch_size
    length = (len(ids) - 1) // streams
    inputs = ids[: streams * length].reshape(streams, length)
    targets = ids[1 : streams * length + 1].reshape(streams, length)
    (artefact,) = plan.artefacts
    state = {
        t.name: np.zeros((streams, t.shape[1]), "float32") for t in artefact.inputs[1:]
    }
    nats = 0.0
    for t in range(length):
        outputs = calls["step"]({"token": inputs[:, t].astype("int32"), **state})
        logits = np.asarray(outputs["logits"], "float64")
        logits -= logits.max(-1, keepdims=True)
        log_z = np.log(np.exp(logits).sum(-1))
        nats += float(np.sum(log_z - logits[np.arange(streams), targets[:, t]]))
        state = {k: np.asarray(outputs["next_" + k]) for k in state}
    perplexity = float(np.exp(nats / targets.size))
    return f"test perplexity ({targets.size} tokens)", perplexity


def translation_metric(calls, data, plan, config, model, limit):
    import sacrebleu
    from rnnkit_recipes.translation.decode import (
        bleu_reference,
        detokenized,
        search_options,
        source_tokens,
    )

    from rnnkit.data.parallel_text import UNK_ID
    from rnnkit.export.clients import greedy_decode

    pairs = data.test_pairs[:limit]
    length = config.data.max_length or 50
    options = search_options(config)
    hypotheses = []
    for start in range(0, len(pairs), 64):
        batch = pairs[start : start + 64]
        source_ids = np.zeros((len(batch), length), "int32")
        longest = 1
        for row, (source, _) in enumerate(batch):
            ids = data.source_vocabulary.encode(
                source_tokens(source, data.text_options)
            )
            ids = ids[:length] or [UNK_ID]
            source_ids[row, : len(ids)] = ids
            longest = max(longest, len(ids))
        tokens = greedy_decode(
            calls["encoder"],
            calls["decoder_step"],
            {"source_ids": source_ids},
            start_id=options["start_id"],
            end_id=options["end_id"],
            max_steps=int(options["max_length_ratio"] * longest)
            + options["max_length_offset"],
            suppress_ids=options["suppress_ids"],
        )
        hypotheses += [detokenized(data.target_vocabulary, row) for row in tokens]
    references = [bleu_reference(target, data) for _, target in pairs]
    bleu = sacrebleu.metrics.BLEU(lowercase=data.text_options.lowercase)
    score = bleu.corpus_score(hypotheses, [references]).score
    return f"test BLEU, greedy ({len(pairs)} pairs)", score


def captioning_metric(calls, data, plan, config, model, limit):
    from rnnkit_recipes.captioning.baselines import bleu_scores
    from rnnkit_recipes.captioning.decode import search_options, words

    from rnnkit.export.clients import greedy_decode

    test = data.splits["test"]
    rows = range(min(limit, len(test.names)))
    # The recipe's own pixels of each test image (decoded and squashed by Pillow),
    # the encoder's float32 input.
    pixels = np.stack([data.test_images[i] for i in rows]).astype("float32")
    options = search_options(config)
    hypotheses = []
    for start in range(0, len(pixels), 64):
        tokens = greedy_decode(
            calls["encoder"],
            calls["decoder_step"],
            {"image": pixels[start : start + 64]},
            start_id=options["start_id"],
            end_id=options["end_id"],
            max_steps=options["max_length"],
            suppress_ids=options["suppress_ids"],
        )
        hypotheses += [" ".join(words(model, row)) for row in tokens]
    references = [[" ".join(c) for c in test.captions[i]] for i in rows]
    score = bleu_scores(hypotheses, references)["bleu4"]
    return f"test BLEU-4, greedy ({len(hypotheses)} images)", score


METRICS = {
    "stock": stock_metric,
    "sentiment": sentiment_metric,
    "language_model": language_model_metric,
    "translation": translation_metric,
    "captioning": captioning_metric,
}


def metric_row(name, run_dir, files, limit) -> str:
    from rnnkit import registry
    from rnnkit.training import runner

    recipe, config, model = runner.load_run(run_dir, registry.load)
    if name not in METRICS:
        return f"| {name} | (no metric in this benchmark yet) | | | | |"
    plan = recipe.export_plan(model, config, "tflite")
    # Read once: each runtime's metric is computed on the same test data.
    data = recipe.load_data(config)
    case = (data, plan, config, model, limit)
    keras_calls = {a.name: keras_callables(a)["Keras model(x)"] for a in plan.artefacts}
    label, reference = METRICS[name](keras_calls, *case)
    cells = [f"{reference:.4g}"]
    for quantize in ("none", "dynamic", "float16"):
        if not isinstance(files["tflite", quantize], Path):
            cells.append("not exported")
            continue
        calls = {
            a.name: litert_callable(files["tflite", quantize] / f"{a.name}.tflite")
            for a in plan.artefacts
        }
        _, value = METRICS[name](calls, *case)
        cells.append(f"{value:.4g} ({value - reference:+.2g})")
        print(f"  {name} {label}: LiteRT {quantize} {value:.4g}", flush=True)
    return f"| {name} | {label} | {' | '.join(cells)} |"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--recipes",
        nargs="+",
        default=list(TRAINING),
        choices=list(TRAINING),
        help="Recipes to train and benchmark (those without export_plan are skipped).",
    )
    parser.add_argument(
        "--runs", nargs="+", default=[], help="Run directories to use instead."
    )
    parser.add_argument(
        "--out", default="", help="Folder for the runs and exports (default: temp)."
    )
    parser.add_argument("--repeats", type=int, default=20, help="Rounds at batch 1.")
    parser.add_argument(
        "--batch-repeats", type=int, default=5, help=f"Rounds at batch {BATCH}."
    )
    parser.add_argument(
        "--budget",
        type=float,
        default=10.0,
        help="Seconds of rounds per model and batch size, past 3 rounds.",
    )
    parser.add_argument(
        "--metrics",
        action="store_true",
        help="Also the test metric through LiteRT at each quantization.",
    )
    parser.add_argument(
        "--metric-limit",
        type=int,
        default=200,
        help="Sentiment test reviews and translation test pairs scored.",
    )
    parser.add_argument(
        "--train-only",
        action="store_true",
        help="Train the runs into --out and stop (benchmark them later with --runs).",
    )
    parser.add_argument("--seed", type=int, default=1337)
    args = parser.parse_args()
    if args.train_only and not args.out:
        parser.error("--train-only needs --out, the folder to keep the runs in")

    import keras

    keras.utils.set_random_seed(args.seed)
    os.chdir(ROOT)  # the configs' data paths are relative to the repository root
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(args.out or scratch).resolve()
        if args.runs:
            runs = {recipe_of_run(Path(r)): Path(r).resolve() for r in args.runs}
        else:
            runs = {}
            for name in args.recipes:
                if not exports_declared(name):
                    print(f"skipped {name}: its recipe declares no export_plan")
                    continue
                runs[name] = train(name, folder, args.seed, args.metrics)
        if args.train_only:
            print(f"trained into {folder / 'runs'}; benchmark them with --runs")
            return
        speed, metrics, failures = [], [], []
        for name, run_dir in runs.items():
            files = export_all(run_dir, folder / "exports" / name)
            failures += [
                f"- {name} {format} {quantize}: {why}"
                for (format, quantize), why in files.items()
                if isinstance(why, str)
            ]
            speed += speed_table(name, run_dir, files, args)
            if args.metrics:
                metrics.append(metric_row(name, run_dir, files, args.metric_limit))
    print(f"\nCPU: {cpu_line()}; {time.perf_counter() - started:.0f} s in all")
    print(
        "\n| model | runtime | file | batch 1 ms | x predict | x model(x) "
        f"| batch {BATCH} seq/s | x predict | x model(x) |"
    )
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    print("\n".join(speed))
    if failures:
        print("\nNot exported:\n" + "\n".join(failures))
    if metrics:
        print("\n| recipe | metric | Keras | LiteRT none | LiteRT dynamic | float16 |")
        print("| --- | --- | ---: | ---: | ---: | ---: |")
        print("\n".join(metrics))


if __name__ == "__main__":
    main()
