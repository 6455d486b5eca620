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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--config", default=str(ROOT / "recipes/language_model/configs/ptb_small.toml")
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
    config = config_lib.resolve(recipe.Config, args.config, overrides)
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


if __name__ == "__main__":
    main()
