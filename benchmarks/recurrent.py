"""Speed of rnnkit's recurrent layers next to the Keras built-ins, in one process.

For each configuration both implementations get the same model around the layer
(layer -> Dense(1)), the same weights and the same batch; their timings are taken
in interleaved rounds (rnnkit, keras, rnnkit, keras, ...) so that load on the
machine hits both alike. Reported: sequences per second (median over rounds) for a
training step (forward + backward + Adam update, `train_on_batch`) and for
inference (`predict_on_batch`), and the ratio rnnkit / keras (> 1: rnnkit faster),
then the path (`execution_path`) each rnnkit call took.

The header names the CPU and the fp32 matmul peak measured through the backend
(`keras.ops.matmul` of 2048 and 4096 squares, best of 3); each row then gives the
GFLOP/s of rnnkit's training step, counting 3x the forward recurrent matmuls
(T x 2 (input + hidden) x gates x hidden per sequence; gates = 4 for the LSTM, 3 for
the GRU), and its fraction of that peak. `--torch` adds `torch.nn.LSTM`/`GRU` with
the same sizes and threads (batch first, a Linear(1) head on the last output, Adam)
as a third column, interleaved in the same rounds. `--uncompiled` adds rnnkit's layer
with `jit_compile=False` (the plain TensorFlow loop, as for a sequence length that
is not static; on the PyTorch backend `use_cudnn=False`, the layer's own loop instead
of PyTorch's kernel) on a line of its own under each row, interleaved in the same
rounds; `--shards 1,4` likewise adds it with `batch_shards=1` (the whole batch in
one loop, not one loop per core) and with 4. `--bidirectional` wraps every layer in
`keras.layers.Bidirectional`. `--precision mixed_bfloat16` (or mixed_float16) builds
rnnkit's and Keras' layers under that dtype policy (the Dense head in float32) and
adds both in float32 on a line under each row, interleaved in the same rounds: the
row's ratio is then rnnkit over Keras under the policy, the line's ratios each
layer's speed under the policy over its own float32 speed; `--float32-layer` adds
rnnkit's layer with `dtype="float32"` inside the mixed model.

    python benchmarks/recurrent.py                 # the issue's four configurations
    python benchmarks/recurrent.py --rounds 3 --configs 100x256
    python benchmarks/recurrent.py --torch         # and torch.nn.LSTM/GRU beside them
    python benchmarks/recurrent.py --uncompiled    # and rnnkit without XLA
    python benchmarks/recurrent.py --shards 1      # and rnnkit in one loop
    python benchmarks/recurrent.py --batch 16 --shards 1   # at another batch size
    python benchmarks/recurrent.py --torch --batch 1,64    # one table per batch size
    python benchmarks/recurrent.py --precision mixed_bfloat16  # and against float32
    python benchmarks/recurrent.py --calibrated   # as `rnnkit calibrate` chose here
    KERAS_BACKEND=jax python benchmarks/recurrent.py   # on another backend
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402
from timing import cpu_line, torch_as_tensorflow  # noqa: E402

import rnnkit.layers  # noqa: E402

BATCH, FEATURES = 64, 64
GATES = {"LSTM": 4, "GRU": 3, "SimpleRNN": 1}


def matmul_peak(sizes=(2048, 4096), repeats=3) -> float:
    """Best fp32 matmul GFLOP/s through the backend over `sizes` squares."""
    best = 0.0
    for n in sizes:
        a = keras.ops.convert_to_tensor(
            np.random.default_rng(0).standard_normal((n, n), dtype=np.float32)
        )
        keras.ops.convert_to_numpy(keras.ops.matmul(a, a))  # warm up
        for _ in range(repeats):
            start = time.perf_counter()
            keras.ops.convert_to_numpy(keras.ops.matmul(a, a))
            best = max(best, 2 * n**3 / (time.perf_counter() - start) / 1e9)
    return best


def training_gflop(family, steps_in_time, units) -> float:
    """GFLOP of one training step's recurrent matmuls (3x the forward pass)."""
    forward = steps_in_time * 2 * (FEATURES + units) * GATES[family] * units * BATCH
    return 3 * forward / 1e9


def torch_model(family, units):
    """torch.nn.LSTM/GRU -> Linear(1) on the last output, Adam: the keras model;
    subnormals flushed to zero, as TensorFlow does (`timing.torch_as_tensorflow`)."""
    import torch

    torch_as_tensorflow()

    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.rnn = getattr(torch.nn, family)(FEATURES, units, batch_first=True)
            self.head = torch.nn.Linear(units, 1)

        def forward(self, x):
            outputs, _ = self.rnn(x)
            return self.head(outputs[:, -1])

    model = Model().to(torch_device())
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)

    def train(x, y):
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        return loss.item()  # waits for the GPU, as train_on_batch does

    def infer(x):
        with torch.inference_mode():
            return model(x).cpu()  # the results on the host, as predict_on_batch

    return train, infer


def torch_device():
    """Where torch.nn's models run: the GPU when PyTorch sees one (as Keras' PyTorch
    backend places its own), else the CPU."""
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def accelerator_line() -> str:
    """The GPU the backend computes on, or "none"."""
    backend = keras.backend.backend()
    if backend == "torch":
        import torch

        return torch.cuda.get_device_name() if torch.cuda.is_available() else "none"
    if backend == "jax":
        import jax

        gpus = [d for d in jax.devices() if d.platform == "gpu"]
        return gpus[0].device_kind if gpus else "none"
    import tensorflow as tf

    gpus = tf.config.list_physical_devices("GPU")
    return (
        tf.config.experimental.get_device_details(gpus[0]).get("device_name", "GPU")
        if gpus
        else "none"
    )


def build(make_layer, bidirectional=False, precision="float32"):
    """layer -> Dense(1) under the dtype policy `precision` (the head in float32)."""
    previous = keras.config.dtype_policy()
    keras.config.set_dtype_policy(precision)
    try:
        layer = make_layer()
        if bidirectional:
            layer = keras.layers.Bidirectional(layer)
        model = keras.Sequential(
            [
                keras.Input((None, FEATURES)),
                layer,
                keras.layers.Dense(1, dtype="float32"),
            ]
        )
        model.compile(optimizer="adam", loss="mse")
    finally:
        keras.config.set_dtype_policy(previous)
    return model


def time_call(function, steps):
    start = time.perf_counter()
    for _ in range(steps):
        function()
    return (time.perf_counter() - start) / steps


def without_fusion():
    """`--uncompiled`'s layer options: TensorFlow's plain loop (no XLA), or on the
    PyTorch backend the layer's own loop instead of PyTorch's kernel."""
    if keras.backend.backend() == "torch":
        return {"use_cudnn": False}
    return {"jit_compile": False}


def variants(args):
    """The extra rnnkit lines asked for: (label, layer options)."""
    chosen = []
    if args.uncompiled:
        chosen.append(("uncompiled", without_fusion()))
    for count in args.shards:
        chosen.append((f"shards={count}", {"batch_shards": count}))
    if args.float32_layer:
        chosen.append(("float32 layer", {"dtype": "float32"}))
    return chosen


def recurrent_layer(model):
    """The model's recurrent layer (the forward one of a Bidirectional)."""
    layer = model.layers[0]
    return getattr(layer, "forward_layer", layer)


def run_config(
    family,
    steps_in_time,
    units,
    rounds,
    steps_per_round,
    with_torch,
    extra=(),
    bidirectional=False,
    precision="float32",
):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((BATCH, steps_in_time, FEATURES), dtype=np.float32)
    y = rng.standard_normal((BATCH, 1), dtype=np.float32)
    keras_layer = getattr(keras.layers, family)
    rnnkit_layer = getattr(rnnkit.layers, family)
    builtin = build(lambda: keras_layer(units), bidirectional, precision)
    ours = build(lambda: rnnkit_layer(units), bidirectional, precision)
    ours.set_weights(builtin.get_weights())
    models = [("rnnkit", ours), ("keras", builtin)]
    for label, options in extra:
        variant = build(
            lambda options=options: rnnkit_layer(units, **options),
            bidirectional,
            precision,
        )
        variant.set_weights(builtin.get_weights())
        models.append((label, variant))
    if precision != "float32":
        for name, make_layer in (("rnnkit", rnnkit_layer), ("keras", keras_layer)):
            reference = build(lambda make=make_layer: make(units), bidirectional)
            reference.set_weights(builtin.get_weights())
            models.append((f"{name} float32", reference))
    # name -> (training step, inference step)
    steps = {
        name: (
            lambda m=model: m.train_on_batch(x, y),
            lambda m=model: m.predict_on_batch(x),
        )
        for name, model in models
    }
    if with_torch:
        import torch

        train, infer = torch_model(family, units)
        tx = torch.from_numpy(x).to(torch_device())
        ty = torch.from_numpy(y).to(torch_device())
        steps["torch"] = (lambda: train(tx, ty), lambda: infer(tx))
    # Trace and warm up every one; a layer sets `execution_path` when a step is traced.
    # The first call's time is the tracing (and XLA's compilation) plus one step.
    paths, first_calls = {}, {}
    for name, (train_step, infer_step) in steps.items():
        first_calls[name, "train"] = time_call(train_step, 1)
        if name == "rnnkit":
            paths["training"] = recurrent_layer(ours).execution_path
        first_calls[name, "infer"] = time_call(infer_step, 1)
        if name == "rnnkit":
            paths["inference"] = recurrent_layer(ours).execution_path
    timings = {(name, kind): [] for name in steps for kind in ("train", "infer")}
    for _ in range(rounds):
        for name, (train_step, infer_step) in steps.items():
            timings[name, "train"].append(time_call(train_step, steps_per_round))
            timings[name, "infer"].append(time_call(infer_step, steps_per_round))
    rates = {key: BATCH / statistics.median(values) for key, values in timings.items()}
    return rates, paths, first_calls


def main():
    global BATCH
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--families", default="LSTM,GRU")
    parser.add_argument(
        "--configs", default="100x256,200x512", help="comma-separated SEQxHIDDEN"
    )
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps-per-round", type=int, default=2)
    parser.add_argument(
        "--torch", action="store_true", help="Add torch.nn.LSTM/GRU as a third column."
    )
    parser.add_argument(
        "--uncompiled",
        action="store_true",
        help="Add rnnkit's layer with jit_compile=False (PyTorch backend: "
        "use_cudnn=False, its own loop) on a line under each row.",
    )
    parser.add_argument(
        "--batch",
        default=str(BATCH),
        help=f"Batch size, or several comma-separated, one table each in the same run "
        f"(default {BATCH}).",
    )
    parser.add_argument(
        "--bidirectional",
        action="store_true",
        help="Wrap every layer in keras.layers.Bidirectional (not with --torch).",
    )
    parser.add_argument(
        "--shards",
        type=lambda text: [int(count) for count in text.split(",")],
        default=[],
        help="Comma-separated counts: add rnnkit's layer with batch_shards=N (1: "
        "one loop for the whole batch) on a line under each row for each.",
    )
    parser.add_argument(
        "--float32-layer",
        action="store_true",
        help="With --precision: add rnnkit's layer with dtype='float32' in the mixed "
        "model (its loop in float32, between bfloat16/float16 neighbours) on a line "
        "under each row.",
    )
    parser.add_argument(
        "--precision",
        choices=("float32", "mixed_bfloat16", "mixed_float16"),
        default="float32",
        help="Dtype policy of the compared layers; a mixed one adds rnnkit and Keras "
        "in float32 on a line under each row (ratios: policy over float32).",
    )
    parser.add_argument(
        "--calibrated",
        action="store_true",
        help="Load this machine's `rnnkit calibrate` measurements first, so that "
        "rnnkit's layers follow them as they do in `rnnkit run` (without it the "
        "defaults decide).",
    )
    args = parser.parse_args()
    try:
        batches = [int(batch) for batch in args.batch.split(",")]
    except ValueError:
        parser.error(f"--batch {args.batch}: give batch sizes such as 64 or 1,64")
    if args.bidirectional and args.torch:
        parser.error("--bidirectional compares Keras models only: drop --torch")
    if args.torch:
        import torch

        torch.set_num_threads(os.cpu_count())
    peak = matmul_peak()
    print(f"CPU: {cpu_line()}; GPU: {accelerator_line()}")
    if args.calibrated:
        from rnnkit.layers import calibration

        found = calibration.load()
        print(
            f"calibrated: {len(found)} measurements of this machine loaded "
            f"({calibration.cache_file()})"
            if found
            else "calibrated: this machine has no measurements (run rnnkit "
            "calibrate first); the defaults decide"
        )
    path_notes = set()
    for BATCH in batches:  # the module's BATCH, which run_config reads
        print(
            f"keras {keras.__version__}, backend {keras.backend.backend()}, "
            f"fp32 matmul peak {peak:.0f} GFLOP/s, batch {BATCH}, input {FEATURES}, "
            f"{args.rounds} interleaved rounds x {args.steps_per_round} steps, "
            f"dtype policy {args.precision}"
            + (f", torch {__import__('torch').__version__}" if args.torch else "")
        )
        header = (
            f"{'layer':5} {'seq':>4} {'hidden':>6} | {'train seq/s rnnkit':>18} "
            f"{'keras':>8} {'ratio':>6} {'GFLOP/s':>8} {'of peak':>7} | "
            f"{'infer seq/s rnnkit':>18} {'keras':>8} {'ratio':>6}"
            + (f" | {'torch train':>11} {'ratio':>6} {'torch infer':>11} {'ratio':>6}"
               if args.torch else "")
        )  # fmt: skip
        print(header)
        print("-" * len(header))
        for family in args.families.split(","):
            for config in args.configs.split(","):
                steps_in_time, units = (int(v) for v in config.split("x"))
                rates, paths, first_calls = run_config(
                    family,
                    steps_in_time,
                    units,
                    args.rounds,
                    args.steps_per_round,
                    args.torch,
                    variants(args),
                    args.bidirectional,
                    args.precision,
                )
                train = rates["rnnkit", "train"] / rates["keras", "train"]
                infer = rates["rnnkit", "infer"] / rates["keras", "infer"]
                gflops = training_gflop(family, steps_in_time, units) * (
                    rates["rnnkit", "train"] / BATCH
                )
                if args.bidirectional:
                    gflops *= 2
                line = (
                    f"{family:5} {steps_in_time:>4} {units:>6} | "
                    f"{rates['rnnkit', 'train']:>18.1f} "
                    f"{rates['keras', 'train']:>8.1f} "
                    f"{train:>5.2f}x {gflops:>8.1f} {gflops / peak:>7.0%} | "
                    f"{rates['rnnkit', 'infer']:>18.1f} "
                    f"{rates['keras', 'infer']:>8.1f} {infer:>5.2f}x"
                )
                if args.torch:
                    line += (
                        f" | {rates['torch', 'train']:>11.1f} "
                        f"{rates['rnnkit', 'train'] / rates['torch', 'train']:>5.2f}x "
                        f"{rates['torch', 'infer']:>11.1f} "
                        f"{rates['rnnkit', 'infer'] / rates['torch', 'infer']:>5.2f}x"
                    )
                print(line, flush=True)
                for name, options in variants(args):
                    label = ", ".join(f"{k}={v}" for k, v in options.items())
                    print(
                        f"{'  ' + label:18}| "
                        f"{rates[name, 'train']:>18.1f} {'':>8} "
                        f"{rates[name, 'train'] / rates['keras', 'train']:>5.2f}x "
                        f"{'':>8} {'':>7} | {rates[name, 'infer']:>18.1f} {'':>8} "
                        f"{rates[name, 'infer'] / rates['keras', 'infer']:>5.2f}x",
                        flush=True,
                    )
                if args.precision != "float32":
                    speedups = ", ".join(
                        f"{name} {kind} "
                        f"{rates[name, kind] / rates[f'{name} float32', kind]:.2f}x"
                        for name in ("rnnkit", "keras")
                        for kind in ("train", "infer")
                    )
                    print(
                        f"{'  float32':18}| "
                        f"{rates['rnnkit float32', 'train']:>18.1f} "
                        f"{rates['keras float32', 'train']:>8.1f} | "
                        f"{rates['rnnkit float32', 'infer']:>18.1f} "
                        f"{rates['keras float32', 'infer']:>8.1f} | "
                        f"{args.precision} over float32: {speedups}",
                        flush=True,
                    )
                path_notes.update((BATCH, kind, path) for kind, path in paths.items())
                print(
                    "  first call (tracing, compilation, one step), "
                    "training / inference: "
                    + ", ".join(
                        f"{name} {first_calls[name, 'train']:.2f} / "
                        f"{first_calls[name, 'infer']:.2f} s"
                        for name in dict.fromkeys(name for name, _ in first_calls)
                    ),
                    flush=True,
                )
    for batch, kind, path in sorted(path_notes):
        print(
            f"rnnkit {kind}"
            + (f", batch {batch}" if len(batches) > 1 else "")
            + f": {path}"
        )
    print("ratio: rnnkit sequences/s over the other's (above 1: rnnkit faster)")


if __name__ == "__main__":
    main()
