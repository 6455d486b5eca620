"""IMDB from scratch vs language-model pre-training (ULMFiT-style), in one benchmark.

1. Trains a word-level GRU language model on the 25,000 IMDB training reviews (the
   text only; never the test reviews) with
   recipes/language_model/configs/imdb_reviews.toml.
2. Trains the sentiment recipe's IMDB model (recipes/sentiment/configs/imdb.toml)
   from scratch, and again initialised from that language model
   (`model.pretrained`), with the fine-tuning options of each variant.
3. Prints one table: test accuracy, F1 and ROC AUC per variant, the minutes each
   took (the pre-trained variants also carry the language model's minutes), and the
   tf-idf uni+bigram logistic regression's line (fitted on the same training texts).

    python benchmarks/sentiment_pretraining.py               # the full benchmark
    python benchmarks/sentiment_pretraining.py --variants scratch,discriminative
    python benchmarks/sentiment_pretraining.py --lm-run RUN_DIR   # reuse an LM run
    python benchmarks/sentiment_pretraining.py --seed 2            # another seed
    python benchmarks/sentiment_pretraining.py \\
        --config recipes/sentiment/configs/sst2.toml \\
        --lm-config recipes/language_model/configs/sst2_phrases.toml \\
        --variants scratch,discriminative                    # SST-2
    python benchmarks/sentiment_pretraining.py --limit 500 --lm-limit 100000 \\
        --epochs 1                                           # a reduced check

Variants: `scratch` (the recipe as it is), `scratch_layerwise` (the control: not
initialised, with the learning rates of `discriminative`), `pretrained` (initialised,
trained as scratch), `discriminative` (initialised, learning rate divided by 2.6 per
layer group going down from 1e-3 x 2.6^2 at the output, so the word vectors keep 1e-3),
`ulmfit` (initialised, discriminative and gradual unfreezing); and each of ULMFiT's
other parts added to `discriminative` alone, then together: `backward` (the backward
directions from a language model of the reversed text, trained here too unless
`--lm-backward-run` names one), `slanted` (the slanted triangular learning rate instead
of cosine decay), `concat` (concat pooling: final states, maximum and mean), and
`backward_slanted_concat`. Compare them on the validation column (val_accuracy):
that is what a configuration is chosen on; the test columns are reported, not chosen
from.

    python benchmarks/sentiment_pretraining.py --variants discriminative,backward,\
slanted,concat,backward_slanted_concat                     # the ablation
"""

from __future__ import annotations

import argparse
import logging
import os
import time
from pathlib import Path

from selection import kept_epoch
from timing import cpu_line, epoch_timer

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

ROOT = Path(__file__).resolve().parents[1]
# ULMFiT chooses the output layer's learning rate and divides it by 2.6 per layer group
# going down. Here the word vectors (the lowest of the IMDB model's three groups) keep
# the from-scratch rate of configs/imdb.toml (1e-3), so the output layer trains at
# 1e-3 x 2.6^2: with 1e-3 at the top instead, the word vectors crawled at 1.5e-4 and
# the classifier ended at 0.8302 (0.7173 with gradual unfreezing), below scratch.
LAYERWISE = {"train.discriminative_lr": 2.6, "train.learning_rate": 1e-3 * 2.6**2}
DISCRIMINATIVE = {"pretrained": True, **LAYERWISE}
VARIANTS = {
    "scratch": {},
    "scratch_layerwise": dict(LAYERWISE),
    "pretrained": {"pretrained": True},
    "discriminative": DISCRIMINATIVE,
    "ulmfit": {**DISCRIMINATIVE, "train.gradual_unfreezing": True},
    # Each of these adds one thing to `discriminative` (an ablation on validation):
    "backward": {**DISCRIMINATIVE, "backward": True},
    "slanted": {**DISCRIMINATIVE, "train.schedule": "slanted_triangular"},
    "concat": {**DISCRIMINATIVE, "model.pooling": "concat"},
    # and all three together.
    "backward_slanted_concat": {
        **DISCRIMINATIVE,
        "backward": True,
        "train.schedule": "slanted_triangular",
        "model.pooling": "concat",
    },
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--variants",
        default="scratch,pretrained,discriminative",
        help=f"Comma-separated, of: {', '.join(VARIANTS)}.",
    )
    parser.add_argument(
        "--lm-config",
        default=str(ROOT / "recipes/language_model/configs/imdb_reviews.toml"),
    )
    parser.add_argument("--lm-run", help="Reuse this language_model run directory.")
    parser.add_argument(
        "--lm-backward-run",
        help="Reuse this backward (data.reverse) language_model run directory, for "
        "the variants that start the backward directions from one.",
    )
    parser.add_argument(
        "--lm-limit", type=int, default=0, help="Tokens of the LM's text (0: all)."
    )
    parser.add_argument(
        "--config", default=str(ROOT / "recipes/sentiment/configs/imdb.toml")
    )
    parser.add_argument(
        "--limit", type=int, default=0, help="Reviews per split (0: all 25,000)."
    )
    parser.add_argument("--epochs", type=int, help="Override train.epochs (both).")
    parser.add_argument(
        "--seed",
        type=int,
        help="train.seed of every run (the language model's and the classifiers'; "
        "the classifiers' validation split too). Default: the configs' seed.",
    )
    parser.add_argument(
        "--out", default="runs/sentiment_pretraining", help="Folder for the runs."
    )
    parser.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE", dest="assignments",
        help="Override for the sentiment runs.",
    )  # fmt: skip
    args = parser.parse_args()
    variants = [name.strip() for name in args.variants.split(",") if name.strip()]
    unknown = sorted(set(variants) - set(VARIANTS))
    if unknown:
        parser.error(f"unknown variant(s) {unknown}; choose from {list(VARIANTS)}")
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    os.chdir(ROOT)  # the configs' data paths are relative to the repository root

    from rnnkit_recipes.language_model.recipe import LanguageModelRecipe
    from rnnkit_recipes.sentiment.recipe import SentimentRecipe

    from rnnkit import config as config_lib
    from rnnkit.metrics import format_table
    from rnnkit.training import runner

    out = Path(args.out)
    stamp = time.strftime("%Y%m%d-%H%M%S")

    def language_model(reuse: str | None, reverse: bool) -> tuple[Path, str, float]:
        """The run directory of the (forward or backward) language model, trained
        here unless `reuse` names one; with its summary line and minutes."""
        if reuse:
            return Path(reuse), "reused", 0.0
        recipe = LanguageModelRecipe()
        overrides = {"data.limit": args.lm_limit, "data.reverse": reverse}
        if args.epochs is not None:
            overrides["train.epochs"] = args.epochs
        if args.seed is not None:
            overrides["train.seed"] = args.seed
        config = config_lib.resolve(recipe.Config, args.lm_config, overrides)
        timer = epoch_timer()
        started = time.perf_counter()
        name = "lm_backward" if reverse else "lm"
        result = runner.run(
            recipe, config, out / f"{name}-{stamp}", verbose=2, callbacks=[timer]
        )
        minutes = (time.perf_counter() - started) / 60
        model_row = result.metrics["test"]["model"]
        line = (
            f"test perplexity {model_row['perplexity']:.1f} (unigram "
            f"{result.metrics['test']['unigram']['perplexity']:.1f}), "
            f"{len(timer.seconds)} epoch(s) of "
            + ", ".join(f"{s:.0f}" for s in timer.seconds)
            + f" s, whole run {minutes:.1f} min"
        )
        return result.run_dir, line, minutes

    needs_lm = any(VARIANTS[name].get("pretrained") for name in variants)
    needs_backward = any(VARIANTS[name].get("backward") for name in variants)
    lm_run, lm_line, lm_minutes = (
        language_model(args.lm_run, reverse=False) if needs_lm else (None, "-", 0.0)
    )
    backward_run, backward_line, backward_minutes = (
        language_model(args.lm_backward_run, reverse=True)
        if needs_backward
        else (None, "-", 0.0)
    )

    recipe = SentimentRecipe()
    rows, minutes, epochs, baselines = {}, {}, {}, None
    for name in variants:
        overrides = config_lib.parse_assignments(recipe.Config, args.assignments)
        overrides["data.limit"] = args.limit
        if args.epochs is not None:
            overrides["train.epochs"] = args.epochs
        if args.seed is not None:
            overrides["train.seed"] = args.seed
        settings = dict(VARIANTS[name])
        if settings.pop("pretrained", False):
            overrides["model.pretrained"] = str(lm_run)
        if settings.pop("backward", False):
            overrides["model.pretrained_backward"] = str(backward_run)
        overrides.update(settings)
        # The baselines are fitted once, in the first run.
        overrides["evaluation.baselines"] = baselines is None
        config = config_lib.resolve(recipe.Config, args.config, overrides)
        timer = epoch_timer()
        started = time.perf_counter()
        result = runner.run(
            recipe, config, out / f"{name}-{stamp}", verbose=2, callbacks=[timer]
        )
        table = result.metrics["test"]
        # Validation accuracy of the epoch early stopping kept: what the rates were
        # chosen on (the test figures are reported, never compared to choose).
        kept = kept_epoch(result.history)
        rows[name] = {**table["model"], "val_accuracy": kept["val_accuracy"]}
        minutes[name] = (time.perf_counter() - started) / 60
        epochs[name] = ", ".join(f"{s:.0f}" for s in timer.seconds)
        if baselines is None:
            baselines = {k: v for k, v in table.items() if k != "model"}

    table = {
        name: {
            **{
                k: row[k]
                for k in ("val_accuracy", "accuracy", "f1", "roc_auc")
                if k in row
            },
            "minutes": minutes[name]
            + (lm_minutes if VARIANTS[name].get("pretrained") else 0.0)
            + (backward_minutes if VARIANTS[name].get("backward") else 0.0),
        }
        for name, row in rows.items()
    }
    for name, row in (baselines or {}).items():
        table[name] = {k: row[k] for k in ("accuracy", "f1", "roc_auc") if k in row}
    print()
    print(format_table(table))
    print()
    print(f"language model:    {lm_run}: {lm_line}")
    if needs_backward:
        print(f"backward LM:       {backward_run}: {backward_line}")
    for name in rows:
        print(
            f"{name + ':':<18} {minutes[name]:.1f} min; "
            f"seconds per epoch {epochs[name]}"
        )
    print("minutes of the pre-trained variants include their language models'")
    print(f"reviews:           {args.limit or 'all'} per split (limit)")
    print(f"seed:              {args.seed if args.seed is not None else 'configs'}")
    print(f"CPU:               {cpu_line()}")
    summary = out / f"summary-{stamp}.json"
    runner.write_json(
        summary,
        {
            "table": table,
            "language_model": str(lm_run),
            "lm": lm_line,
            "backward_language_model": str(backward_run),
            "backward_lm": backward_line,
            "seed": args.seed,
        },
    )
    print(f"summary:           {summary}")
    if baselines and "tfidf_bigrams" in baselines:
        line = baselines["tfidf_bigrams"]["accuracy"]
        for name, row in rows.items():
            side = "above" if row["accuracy"] > line else "below"
            print(
                f"{name}: {row['accuracy']:.4f} vs tf-idf bigrams {line:.4f} ({side})"
            )


if __name__ == "__main__":
    main()
