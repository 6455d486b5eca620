"""A recipe's epoch time and test figures under each dtype policy, in one process.

Trains the recipe (its default config unless `--config`) once per precision and
repeat, in ABBA order (float32, mixed_bfloat16, mixed_bfloat16, float32, ...) so that
load on a shared machine hits every policy alike, with `train.patience=0` so that
every run trains the same number of epochs. Reported per precision: the median
seconds of an epoch after the first (the first includes tracing and XLA's
compilation), the first epoch's seconds, and the test figures of the model row
(from the same seed they differ only by the policy's rounding).

    python benchmarks/precision.py stock
    python benchmarks/precision.py stock --epochs 10 --repeats 2
    python benchmarks/precision.py language_model --set data.limit=200000 --epochs 3
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import tempfile
from pathlib import Path

from timing import cpu_line, epoch_timer

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("recipe", help="Recipe name, e.g. stock.")
    parser.add_argument("--config", help="TOML config (default: the recipe's own).")
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=2, help="Runs per precision.")
    parser.add_argument("--precisions", default="float32,mixed_bfloat16")
    parser.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE", dest="assignments"
    )
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    os.chdir(ROOT)  # the configs' data paths are relative to the repository root

    import keras

    from rnnkit import config as config_lib
    from rnnkit import registry
    from rnnkit.training import runner

    recipe = registry.load(args.recipe)
    overrides = config_lib.parse_assignments(recipe.Config, args.assignments)
    overrides.update({"train.epochs": args.epochs, "train.patience": 0})
    precisions = args.precisions.split(",")
    order = []
    for repeat in range(args.repeats):
        order += precisions if repeat % 2 == 0 else precisions[::-1]
    print(f"CPU: {cpu_line()}; keras {keras.__version__}, {keras.backend.backend()}")
    print(f"{args.recipe}: {args.epochs} epochs, runs in order {', '.join(order)}")
    results = {precision: [] for precision in precisions}
    with tempfile.TemporaryDirectory() as runs:
        for index, precision in enumerate(order):
            config = config_lib.resolve(
                recipe.Config,
                args.config,
                {**overrides, "train.precision": precision},
            )
            timer = epoch_timer()
            result = runner.run(
                recipe,
                config,
                Path(runs) / f"{index}-{precision}",
                verbose=0,
                callbacks=[timer],
            )
            results[precision].append((timer.seconds, result.metrics["test"]["model"]))
            print(
                f"  run {index + 1} {precision}: epochs "
                + " ".join(f"{s:.1f}" for s in timer.seconds)
                + " s",
                flush=True,
            )
    reference = precisions[0]
    reference_epoch = statistics.median(
        s for seconds, _ in results[reference] for s in seconds[1:]
    )
    for precision, runs_of in results.items():
        later = [s for seconds, _ in runs_of for s in seconds[1:]]
        epoch = statistics.median(later)
        first = statistics.median(seconds[0] for seconds, _ in runs_of)
        metrics = runs_of[0][1]
        print(
            f"{precision:15} epoch {epoch:6.2f} s (x{reference_epoch / epoch:.2f} the "
            f"speed of {reference}), first epoch {first:6.2f} s | test: "
            + ", ".join(f"{k} {v:.4g}" for k, v in metrics.items())
        )


if __name__ == "__main__":
    main()
