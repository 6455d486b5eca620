"""Multi30k German->English quality benchmark of the translation recipe.

Trains the attentive GRU encoder-decoder of
recipes/translation/configs/multi30k_de_en.toml on the 29,000 training pairs (early
stopping on val), then translates test2016 (1,000 sentences) with greedy and beam
search and scores them with sacreBLEU.

Target (issue 6): sacreBLEU >= 28 with beam search (published reference: a
bidirectional-GRU encoder with Bahdanau attention, 28.3 BLEU on this test set; about
20.6 without attention). `--ablation` also trains the plain encoder-decoder
(model.attention=none) with the same settings. Prints the test tables, the
sacreBLEU signature (logged by the recipe), the hardware, the training time per
epoch and in all, and whether the target is met. The data are the local copies in
../shared/data/translation.

    python benchmarks/translation_multi30k.py               # the full benchmark
    python benchmarks/translation_multi30k.py --ablation    # ... and without attention
    python benchmarks/translation_multi30k.py --limit 3000 --epochs 1  # reduced check
"""

from __future__ import annotations

import argparse
import logging
import os
import platform
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

ROOT = Path(__file__).resolve().parents[1]
TARGET_BLEU = 28.0
FULL_TRAINING_PAIRS = 29000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--config",
        default=str(ROOT / "recipes/translation/configs/multi30k_de_en.toml"),
    )
    parser.add_argument(
        "--limit", type=int, default=0, help="Pairs per split (0: all 29,000)."
    )
    parser.add_argument("--epochs", type=int, help="Override train.epochs.")
    parser.add_argument(
        "--ablation", action="store_true", help="Also train with model.attention=none."
    )
    parser.add_argument("--runs-root", default="runs", help="Parent of the run dirs.")
    parser.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE", dest="assignments"
    )
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    # The config's data paths are relative to the repository root.
    os.chdir(ROOT)

    from rnnkit_recipes.translation.recipe import TranslationRecipe

    from rnnkit import config as config_lib

    recipe = TranslationRecipe()
    overrides = config_lib.parse_assignments(recipe.Config, args.assignments)
    overrides["data.limit"] = args.limit
    if args.epochs is not None:
        overrides["train.epochs"] = args.epochs
    config = config_lib.resolve(recipe.Config, args.config, overrides)

    variants = {f"attention={config.model.attention}": config}
    if args.ablation and config.model.attention != "none":
        variants["attention=none"] = config.with_values({"model.attention": "none"})
    results = {
        name: train(recipe, variant, args.runs_root)
        for name, variant in variants.items()
    }

    print()
    print(f"hardware:       {hardware()}")
    print(f"training pairs: {args.limit or FULL_TRAINING_PAIRS} (data.limit)")
    for name, (table, seconds, run_dir) in results.items():
        report(name, table, seconds, run_dir, args.limit)


def epoch_timer():
    """A callback timing each training epoch (validation included, as fit runs it)."""
    import keras

    class EpochTimer(keras.callbacks.Callback):
        def on_train_begin(self, logs=None):
            self.seconds = []

        def on_epoch_begin(self, epoch, logs=None):
            self.started = time.perf_counter()

        def on_epoch_end(self, epoch, logs=None):
            self.seconds.append(time.perf_counter() - self.started)

    return EpochTimer()


def train(recipe, config, runs_root: str):
    from rnnkit import runner

    timer = epoch_timer()
    result = runner.run(
        recipe, config, runs_root=runs_root, verbose=2, callbacks=[timer]
    )
    return result.metrics["test"], timer.seconds, result.run_dir


def report(name, table, seconds, run_dir, limit) -> None:
    from rnnkit.metrics import format_table

    print(f"\n== {name} ==  ({run_dir})")
    print(format_table(table))
    print(
        "seconds per epoch: " + ", ".join(f"{s:.0f}" for s in seconds)
        + f"  (total {sum(seconds) / 60:.1f} min over {len(seconds)} epochs)"
    )  # fmt: skip
    if limit:
        per_full_epoch = sum(seconds) / len(seconds) * FULL_TRAINING_PAIRS / limit
        print(
            f"estimated epoch on all {FULL_TRAINING_PAIRS} pairs: "
            f"{per_full_epoch / 60:.1f} min (linear in the pairs)"
        )
        print("reduced run: the BLEU target applies to the full data only")
        return
    bleu = table["model"]["bleu"]
    verdict = "MET" if bleu >= TARGET_BLEU else "NOT MET"
    print(f"target: beam-search BLEU {bleu:.2f} >= {TARGET_BLEU}: {verdict}")


def hardware() -> str:
    import keras

    devices = "CPU"
    if keras.backend.backend() == "tensorflow":
        import tensorflow as tf

        gpus = tf.config.list_physical_devices("GPU")
        devices = f"{len(gpus)} GPU" if gpus else "CPU only"
    return (
        f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
        f"{devices}, Keras {keras.__version__} ({keras.backend.backend()})"
    )


if __name__ == "__main__":
    main()
