"""Flickr8k quality benchmark of the captioning recipe (issues 11 and 29).

One run (the default): trains a configuration (default
recipes/captioning/configs/flickr8k.toml, the small CNN trained from scratch with an
LSTM decoder with Bahdanau attention) on the official 6,000 training images of the
shared Flickr8k copy (early stopping on the 1,000 dev images), captions the 1,000 test
images with greedy and beam search (width 3) and scores them with sacreBLEU,
BLEU-1..4 against all five references. The recipe scores the consensus-caption and
nearest-neighbour baselines on the same images. `--ablation` also trains the
attention-free decoder (model.attention=none) with the same settings. Prints the test
tables, the hardware (CPU model), the training time, and whether the model beats both
baselines on BLEU-4.

`--select` runs the protocol of benchmarks/selection.py for each system (frozen
ImageNet MobileNet v1 0.75 features, configs/flickr8k_mobilenet.toml, or the small CNN
from scratch, configs/flickr8k.toml; each with the attention decoder and with the
attention-free one): every candidate of a system trains with the first seed and is
scored on the dev split (beam-search BLEU-4 of the epoch early stopping kept, by the
dev loss); the best trains again with the other seeds. Prints, per system, the dev
ranking, the test figures per seed and their mean and standard deviation, then one
table of all systems and the baselines. Candidates beyond the four defaults (the
attention model's variants: the regulariser at Xu et al.'s weight 1 instead of the
config's 0.1, no regulariser, no gate, a smaller learning rate) are chosen with
`--candidates`. `benchmarks/ledgers/captioning/` holds the runs of the MobileNet and
small-CNN systems recorded so far (a folder per system, as in RUNS); to add to it,
copy its folders into RUNS before running `--select` (a seed with no record trains
afresh).

Reference: Show, Attend and Tell (Xu et al. 2015) report BLEU-4 19.5 on Flickr8k with
soft attention and an ImageNet VGG encoder; Karpathy & Fei-Fei (2015) 16.0.

    python benchmarks/captioning_flickr8k.py --ablation
    python benchmarks/captioning_flickr8k.py --limit 200 --epochs 1   # reduced check
    python benchmarks/captioning_flickr8k.py --select --seeds 1337,1,2 --out RUNS
    python benchmarks/captioning_flickr8k.py --select --limit 200 --epochs 1 \\
        --seeds 1337,1 --out runs/captioning_check                    # reduced check
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
CONFIGS = ROOT / "recipes" / "captioning" / "configs"
MOBILENET = str(CONFIGS / "flickr8k_mobilenet.toml")
SMALL_CNN = str(CONFIGS / "flickr8k.toml")
# name: (system, config file, overrides). The first candidate of each system is the
# default one; the others are chosen with --candidates.
CANDIDATES = {
    "mobilenet_attention": ("mobilenet_attention", MOBILENET, {}),
    "mobilenet_mean": ("mobilenet_mean", MOBILENET, {"model.attention": "none"}),
    "small_cnn_attention": ("small_cnn_attention", SMALL_CNN, {}),
    "small_cnn_mean": ("small_cnn_mean", SMALL_CNN, {"model.attention": "none"}),
    "mobilenet_attention_no_penalty": (
        "mobilenet_attention",
        MOBILENET,
        {"model.attention_penalty": 0.0},
    ),
    "mobilenet_attention_penalty1": (
        "mobilenet_attention",
        MOBILENET,
        {"model.attention_penalty": 1.0},
    ),
    "mobilenet_attention_no_gate": (
        "mobilenet_attention",
        MOBILENET,
        {"model.gating": False},
    ),
    "mobilenet_attention_lr3e-4": (
        "mobilenet_attention",
        MOBILENET,
        {"train.learning_rate": 3e-4},
    ),
}
DEFAULT_CANDIDATES = (
    "mobilenet_attention",
    "mobilenet_mean",
    "small_cnn_attention",
    "small_cnn_mean",
)
BLEU = ("bleu1", "bleu2", "bleu3", "bleu4")


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
        "--select",
        action="store_true",
        help="Select per system on dev, then the choice per seed (see above).",
    )
    parser.add_argument(
        "--candidates",
        default=",".join(DEFAULT_CANDIDATES),
        help=f"Comma-separated CANDIDATES (with --select): {', '.join(CANDIDATES)}.",
    )
    parser.add_argument(
        "--seeds", default="1337,1,2", help="Seeds (with --select); the first selects."
    )
    parser.add_argument(
        "--out", default="runs/captioning_selection", help="Folder (with --select)."
    )
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
    if args.select:
        select(recipe, overrides, args)
        return
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


def dev_scores(recipe, config, run_dir: Path) -> dict[str, float]:
    """Beam-search BLEU-1..4 on the dev split of the model a run saved (the epoch
    early stopping kept)."""
    import keras
    from rnnkit_recipes.captioning.baselines import bleu_scores
    from rnnkit_recipes.captioning.decode import caption_texts

    model = keras.saving.load_model(run_dir / "model.keras")
    dev = recipe.load_data(config).splits["validation"]
    references = [[" ".join(c) for c in per_image] for per_image in dev.captions]
    beam = caption_texts(model, dev.inputs, config, config.evaluation.beam_width)
    return bleu_scores(beam, references)


def select(recipe, overrides, args) -> None:
    """The --select protocol, one selection per system: see the module docstring."""
    from selection import (
        chosen_runs,
        interrupted_run,
        kept_epoch,
        mean_std,
        parse_candidates,
        parse_seeds,
        print_means,
        print_validation,
        select_then_seeds,
        train_resumable,
    )
    from timing import cpu_line

    from rnnkit import config as config_lib

    chosen = parse_candidates(args.candidates, CANDIDATES)
    seeds = parse_seeds(args.seeds)
    systems: dict[str, dict] = {}
    for name, (system, config_file, candidate) in chosen.items():
        systems.setdefault(system, {})[name] = {"config": config_file, **candidate}

    def configure(candidate, seed):
        settings = dict(candidate)
        config_file = settings.pop("config")
        return config_lib.resolve(
            recipe.Config,
            config_file,
            {**overrides, **settings, "train.seed": seed},
        )

    def train(name, candidate, seed, run_dir):
        config = configure(candidate, seed)
        result, seconds = train_resumable(recipe, config, run_dir)
        kept = kept_epoch(result.history)
        table = result.metrics["test"]
        test = dict(table["model"])
        for baseline in ("consensus", "nearest_neighbour"):
            test.update({f"{baseline}_{k}": v for k, v in table[baseline].items()})
        dev = dev_scores(recipe, config, Path(run_dir))
        return {
            "validation": {**dev, "loss": kept["val_loss"]},
            "validation_crossentropy": kept.get("val_crossentropy"),
            "test": test,
            "epochs": len(seconds),
            "kept_epoch": int(kept["epoch"]) if "epoch" in kept else None,
            "seconds_per_epoch": sum(seconds) / max(len(seconds), 1),
            "training_minutes": sum(seconds) / 60,
        }

    summary = {}
    for system, candidates in systems.items():
        ledger = select_then_seeds(
            candidates,
            train,
            seeds,
            Path(args.out) / system,
            criterion="bleu4",
            resumable=lambda name, candidate, seed, run_dir: interrupted_run(
                recipe, configure(candidate, seed), run_dir
            ),
            settings={
                "overrides": overrides,
                "configs": {
                    name: configure(c, seeds[0]).to_dict()
                    for name, c in candidates.items()
                },
            },
        )
        rows = chosen_runs(ledger)
        summary[system] = rows
        print(f"\n== {system} ==")
        print(f"dev beam BLEU-4 (seed {seeds[0]}; the epoch early stopping kept):")
        print_validation(ledger, width=32, digits=2)
        print(f"{ledger['chosen']}, test split, per seed:")
        print(
            "  seed   dev B4  B1     B2     B3     B4     B4 greedy  epochs  s/epoch"
            "  CPU"
        )
        for seed, record in rows:
            test = record["test"]
            print(
                f"  {seed:<5} {record['validation']['bleu4']:6.2f}  "
                + " ".join(f"{test[k]:6.2f}" for k in BLEU)
                + f" {test['bleu4_greedy']:9.2f}  {record['epochs']:6d}  "
                f"{record['seconds_per_epoch']:7.0f}  "
                + " then ".join(record.get("cpus", ["not recorded"]))
            )
        print_means(rows, (*BLEU, "bleu4_greedy"), digits=2)

    print("\nTest split, mean +- standard deviation over the seeds (sacreBLEU):")
    print("| system | BLEU-1 | BLEU-2 | BLEU-3 | BLEU-4 | BLEU-4 greedy | seeds |")
    print("| --- | --- | --- | --- | --- | --- | --- |")

    def cell(records, key):
        mean, std = mean_std([r["test"][key] for _, r in records])
        return f"{mean:.2f} +- {std:.2f}"

    every = [record for rows in summary.values() for record in rows]
    for system, rows in summary.items():
        cells = " | ".join(cell(rows, k) for k in (*BLEU, "bleu4_greedy"))
        print(f"| {system} | {cells} | {len(rows)} |")
    for system, rows in summary.items():
        cells = " | ".join(cell(rows, f"nearest_neighbour_{k}") for k in BLEU)
        print(f"| nearest neighbour ({system} features) | {cells} | - | {len(rows)} |")
    cells = " | ".join(cell(every[:1], f"consensus_{k}") for k in BLEU)
    print(f"| consensus caption | {cells} | - | - |")
    print(f"CPU: {cpu_line()}")


if __name__ == "__main__":
    main()
