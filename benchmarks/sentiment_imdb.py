"""IMDB quality benchmark of the sentiment recipe: train on all 25,000 training reviews
(10% held out for early stopping), test on all 25,000 test reviews.

Target (issue 5): test accuracy >= 0.88 within 30 minutes of training on a 2-core CPU.
Prints the test table (model, majority class, unigram bag-of-words and uni+bigram
tf-idf logistic regressions), the training time per epoch and in all, whether the
target is met, and where the model stands against the tf-idf baseline. The data are the
local copies in ../shared/data/sentiment (see recipes/sentiment/configs/imdb.toml).

    python benchmarks/sentiment_imdb.py                         # the full benchmark
    python benchmarks/sentiment_imdb.py --limit 5000 --epochs 1 # a reduced check
    python benchmarks/sentiment_imdb.py --set model.cell_type=lstm
    python benchmarks/sentiment_imdb.py --baselines-only        # no RNN, ~2 minutes
"""

from __future__ import annotations

import argparse
import logging
import os
import time
from pathlib import Path

from timing import epoch_timer

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

ROOT = Path(__file__).resolve().parents[1]
TARGET_ACCURACY = 0.88
TARGET_TRAINING_SECONDS = 30 * 60


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--config", default=str(ROOT / "recipes/sentiment/configs/imdb.toml")
    )
    parser.add_argument(
        "--limit", type=int, default=0, help="Reviews per split (0: all 25,000)."
    )
    parser.add_argument("--epochs", type=int, help="Override train.epochs.")
    parser.add_argument(
        "--run-dir", help="Run directory (default: runs/sentiment/...)."
    )
    parser.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE", dest="assignments"
    )
    parser.add_argument(
        "--baselines-only",
        action="store_true",
        help="Fit and test the baselines on the same splits, without the RNN.",
    )
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    # The config's data paths are relative to the repository root.
    os.chdir(ROOT)

    from rnnkit_recipes.sentiment.recipe import SentimentRecipe

    from rnnkit import config as config_lib
    from rnnkit.metrics import format_table
    from rnnkit.training import runner

    recipe = SentimentRecipe()
    overrides = config_lib.parse_assignments(recipe.Config, args.assignments)
    overrides["data.limit"] = args.limit
    if args.epochs is not None:
        overrides["train.epochs"] = args.epochs
    config = config_lib.resolve(recipe.Config, args.config, overrides)
    if args.baselines_only:
        from rnnkit_recipes.sentiment.baselines import baseline_table

        started = time.perf_counter()
        data = recipe.load_data(config)
        loaded = time.perf_counter()
        table = baseline_table(data, config)
        print(format_table(table))
        print(
            f"seconds: {loaded - started:.0f} loading, "
            f"{time.perf_counter() - loaded:.0f} fitting and testing the baselines"
        )
        return

    timer = epoch_timer()
    started = time.perf_counter()
    result = runner.run(recipe, config, args.run_dir, verbose=2, callbacks=[timer])
    total = time.perf_counter() - started
    training = sum(timer.seconds)
    table = result.metrics["test"]
    accuracy = table["model"]["accuracy"]

    print()
    print(format_table(table))
    print()
    print(f"run directory:     {result.run_dir}")
    print(f"training reviews:  {args.limit or 'all'} per split (limit)")
    print(f"epochs:            {len(timer.seconds)}")
    print(
        "seconds per epoch: " + ", ".join(f"{seconds:.0f}" for seconds in timer.seconds)
    )
    print(f"training seconds:  {training:.0f} (whole run {total:.0f}, incl. loading,")
    print("                   vocabulary, test predictions and baselines)")
    if args.limit:
        print("reduced run: the target applies to the full data only")
        return
    linear = table["tfidf_bigrams"]["accuracy"]
    print(
        f"against tf-idf uni+bigram logistic regression: {accuracy:.4f} vs "
        f"{linear:.4f} ({'above' if accuracy > linear else 'below'} it)"
    )
    met = accuracy >= TARGET_ACCURACY and training <= TARGET_TRAINING_SECONDS
    print(
        f"target: accuracy {accuracy:.4f} >= {TARGET_ACCURACY} and training "
        f"{training / 60:.1f} min <= {TARGET_TRAINING_SECONDS // 60} min: "
        + ("MET" if met else "NOT MET")
    )


if __name__ == "__main__":
    main()
