"""Flickr8k quality benchmark of the captioning recipe (issue 11).

Trains the from-scratch CPU configuration of recipes/captioning/configs/flickr8k.toml
(small CNN + LSTM decoder with Bahdanau attention) on the 3,552 training images of the
shared Flickr8k copy (early stopping on the 1,000 dev images), captions the 1,000 test
images with greedy and beam search (width 3) and scores them with sacreBLEU, BLEU-1..4
against all five references. The recipe scores the consensus-caption and
nearest-neighbour baselines on the same images. `--ablation` also trains the
attention-free decoder (model.attention=none) with the same settings. Prints the test
tables, the hardware (CPU model), the training time, and whether the model beats both
baselines on BLEU-4.

Reference: Show, Attend and Tell (Xu et al. 2015) report BLEU-4 19.5 on Flickr8k with
soft attention, an ImageNet-trained VGG encoder and all 6,000 training images; this
configuration trains its CNN from scratch on 3,552 images, so expect far less.

    python benchmarks/captioning_flickr8k.py --ablation
    python benchmarks/captioning_flickr8k.py --limit 200 --epochs 1   # reduced check
"""

from __future__ import annotations

import argparse
import logging
import os
import time
from pathlib import Path

from timing import epoch_timer, hardware

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--config", default=str(ROOT / "recipes/captioning/configs/flickr8k.toml")
    )
    parser.add_argument(
        "--limit", type=int, default=0, help="Images per split (0: all available)."
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
    # The config's data path is relative to the repository root.
    os.chdir(ROOT)

    from rnnkit_recipes.captioning.recipe import CaptioningRecipe

    from rnnkit import config as config_lib

    recipe = CaptioningRecipe()
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
    print(f"hardware: {hardware()}")
    for name, (table, seconds, wall, run_dir) in results.items():
        report(name, table, seconds, wall, run_dir)


def train(recipe, config, runs_root: str):
    from rnnkit.training import runner

    timer = epoch_timer()
    started = time.perf_counter()
    result = runner.run(
        recipe, config, runs_root=runs_root, verbose=2, callbacks=[timer]
    )
    wall = time.perf_counter() - started
    return result.metrics["test"], timer.seconds, wall, result.run_dir


def report(name, table, seconds, wall, run_dir) -> None:
    from rnnkit.metrics import format_table

    print(f"\n== {name} ==  ({run_dir})")
    print(format_table(table))
    print(
        "seconds per epoch: " + ", ".join(f"{s:.0f}" for s in seconds)
        + f"  (training {sum(seconds) / 60:.1f} min over {len(seconds)} epochs; "
        f"whole run with data, evaluation and plots {wall / 60:.1f} min)"
    )  # fmt: skip
    model = table["model"]["bleu4"]
    for baseline in ("consensus", "nearest_neighbour"):
        other = table[baseline]["bleu4"]
        verdict = "beats" if model > other else "DOES NOT beat"
        print(f"beam BLEU-4 {model:.2f} {verdict} {baseline} ({other:.2f})")


if __name__ == "__main__":
    main()
