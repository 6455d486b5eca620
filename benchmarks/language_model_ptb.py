"""Penn Treebank benchmark of the language-model recipe: the "small" configuration of
Zaremba, Sutskever & Vinyals (2014) (2 x 200 LSTM, 20 streams x 20 steps of truncated
BPTT, SGD with their schedule, global clip norm, 13 epochs; see
recipes/language_model/configs/ptb_small.toml).

Target (issue 12): test perplexity <= 114.5, their non-regularised small model.
Prints the test table (model, unigram, add-k bigram), the training time per epoch and
in all, the CPU, and whether the target is met. The data are the local copies in
../shared/data/language_model.

    python benchmarks/language_model_ptb.py                          # the full run
    python benchmarks/language_model_ptb.py --resume RUN_DIR         # continue it
    python benchmarks/language_model_ptb.py --epochs 1 --set data.limit=100000
    python benchmarks/language_model_ptb.py \
        --config recipes/language_model/configs/ptb_medium.toml

`--architectures rnn,transformer` trains the LSTM of ptb_small.toml and the
Transformer of ptb_transformer.toml on the same data (the first architecture's data
section is applied to the others) and prints, side by side: test perplexity,
parameters, the epochs trained, the epoch whose weights were tested (the best
validation loss with early stopping, else the last) and the training minutes to it,
and tokens generated per second by sampling (the LSTM one stream step by step, the
Transformer through its key/value cache).

    python benchmarks/language_model_ptb.py --architectures rnn,transformer
    python benchmarks/language_model_ptb.py --architectures rnn,transformer \
        --epochs 1 --set data.limit=100000                   # reduced check
"""

from __future__ import annotations

import argparse
import logging
import os
import time
from pathlib import Path

from timing import cpu_line, epoch_timer

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

ROOT = Path(__file__).resolve().parents[1]
TARGET_PERPLEXITY = 114.5
ARCHITECTURES = {
    "rnn": "recipes/language_model/configs/ptb_small.toml",
    "transformer": "recipes/language_model/configs/ptb_transformer.toml",
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--config", help="One architecture's config (default: ARCHITECTURES' own)."
    )
    parser.add_argument(
        "--architectures",
        default="rnn",
        help="Comma-separated: rnn, transformer (several: side by side).",
    )
    parser.add_argument("--epochs", type=int, help="Override train.epochs.")
    parser.add_argument("--run-dir", help="Run directory (default: runs/...).")
    parser.add_argument(
        "--resume",
        metavar="RUN_DIR",
        help="Continue an interrupted run from its last finished epoch (its own "
        "config.toml; the other options are ignored).",
    )
    parser.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE", dest="assignments"
    )
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    # The config's data paths are relative to the repository root.
    os.chdir(ROOT)

    from rnnkit_recipes.language_model.recipe import LanguageModelRecipe

    from rnnkit import config as config_lib
    from rnnkit.metrics import format_table
    from rnnkit.training import runner

    recipe = LanguageModelRecipe()
    overrides = config_lib.parse_assignments(recipe.Config, args.assignments)
    if args.epochs is not None:
        overrides["train.epochs"] = args.epochs
    architectures = [name for name in args.architectures.split(",") if name]
    if not architectures or set(architectures) - set(ARCHITECTURES):
        raise SystemExit(f"--architectures: choose from {list(ARCHITECTURES)}")
    if len(architectures) > 1:
        if args.config or args.resume or args.run_dir:
            raise SystemExit(
                "--config, --resume and --run-dir name one run; drop them with "
                "several --architectures"
            )
        compare(recipe, architectures, overrides)
        return
    config_path = args.config or str(ROOT / ARCHITECTURES[architectures[0]])
    config = config_lib.resolve(recipe.Config, config_path, overrides)
    if args.resume:
        config = runner.prepare_resume(recipe, Path(args.resume))

    timer = epoch_timer()
    started = time.perf_counter()
    result = runner.run(
        recipe,
        config,
        args.resume or args.run_dir,
        resume=bool(args.resume),
        verbose=2,
        callbacks=[timer],
    )
    total = time.perf_counter() - started
    training = sum(timer.seconds)
    table = result.metrics["test"]
    perplexity = table["model"]["perplexity"]

    print()
    print(format_table(table))
    print()
    print(f"run directory:     {result.run_dir}")
    print(f"CPU:               {cpu_line()}")
    print(f"epochs:            {len(timer.seconds)} (this process)")
    print("seconds per epoch: " + ", ".join(f"{s:.0f}" for s in timer.seconds))
    print(f"training seconds:  {training:.0f} (whole run {total:.0f})")
    if config.data.limit or config.train.epochs < 13:
        print("reduced run: the target applies to the full configuration only")
        return
    met = perplexity <= TARGET_PERPLEXITY
    print(
        f"target: test perplexity {perplexity:.2f} <= {TARGET_PERPLEXITY}: "
        + ("MET" if met else "NOT MET")
    )


def compare(recipe, architectures, overrides) -> None:
    """Each architecture trained once on the same data; the side-by-side table."""
    import csv

    from rnnkit import config as config_lib
    from rnnkit.metrics import format_table
    from rnnkit.training import runner

    configs = {
        name: config_lib.resolve(
            recipe.Config, str(ROOT / ARCHITECTURES[name]), overrides
        )
        for name in architectures
    }
    data_section = {
        key: value
        for key, value in configs[architectures[0]].flat().items()
        if key.startswith("data.")
    }
    rows = {}
    for name, config in configs.items():
        config = config.with_values(data_section)
        timer = epoch_timer()
        result = runner.run(recipe, config, verbose=2, callbacks=[timer])
        print(f"\n== {name} ==  ({result.run_dir})")
        print(format_table(result.metrics["test"]))
        with (Path(result.run_dir) / "history.csv").open() as handle:
            losses = [float(row["val_loss"]) for row in csv.DictReader(handle)]
        # The model tested: with early stopping the best epoch's weights (restored),
        # without it (the LSTM's fixed schedule) the last epoch's.
        best = losses.index(min(losses)) if config.train.patience > 0 else None
        model = runner.load_model(Path(result.run_dir) / "model.keras")
        sample = config.with_values({"evaluation.length": 20, "evaluation.seed": 1})
        recipe.predict(model, ["the"], sample)  # compiles
        length = 200
        sample = sample.with_values({"evaluation.length": length})
        started = time.perf_counter()
        recipe.predict(model, ["the"], sample)
        rows[name] = {
            "test perplexity": result.metrics["test"]["model"]["perplexity"],
            "parameters": model.count_params(),
            "epochs trained": len(timer.seconds),
            "tested epoch": len(timer.seconds) if best is None else best + 1,
            "min to tested": sum(timer.seconds[: None if best is None else best + 1])
            / 60,
            "sampled tokens/s": length / (time.perf_counter() - started),
        }
    print(f"\nside by side (one run each; CPU: {cpu_line()}):")
    print(f"  {'':<18}" + "".join(f"{name:>14}" for name in rows))
    for key in next(iter(rows.values())):
        cells = [rows[name][key] for name in rows]
        spec = (
            ",.0f" if key in ("parameters", "epochs trained", "tested epoch") else ".2f"
        )
        print(f"  {key:<18}" + "".join(f"{format(c, spec):>14}" for c in cells))


if __name__ == "__main__":
    main()
