"""Every recipe trains under a mixed policy from the command line (float16 or
bfloat16, each policy on several recipes), close to its float32 run from the same seed:
`--precision` (`train.precision`), the older `--mixed-precision` shortcut, and the
global dtype policy given back after a run."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import keras
import pytest

from rnnkit import config as config_lib
from tests.cli_support import error_line, invoke
from tests.smoke_runs import smoke_run

ROOT = Path(__file__).resolve().parents[2]

LOSS_TOLERANCE = 0.02  # relative, per epoch, training and validation loss
# recipe: (extra options, the metric compared, its tolerance (relative)): a test
# metric of metrics.json, or else a column of the last epoch in history.csv. The
# smoke configs, cut to one epoch where they train longer. Accuracy-like metrics of
# a smoke model near chance flip with one prediction, so a loss-like or ranking
# metric is compared; the training and validation losses of every epoch too. The
# captioning smoke model's captions are still word salad, whose BLEU moved by a
# fifth between two CPUs under mixed_bfloat16 (bfloat16 emulated where the CPU has
# no bfloat16 instructions): its validation cross-entropy (the recipe's objective,
# without the loss's attention penalty) is compared instead.
RECIPES = {
    "stock": ((), "mae", 0.01),
    "sentiment": (("--epochs", "1"), "roc_auc", 0.02),
    "language_model": (("--epochs", "1"), "perplexity", 0.01),
    # 200 of the smoke config's 500 pairs, greedy test decoding and no heatmap: less
    # work per run, the same checks (the compared figure is teacher-forced).
    "translation": (
        tuple(
            "--epochs 1 --set data.limit=200 --set evaluation.beam_width=1 "
            "--set evaluation.heatmaps=0".split()
        ),
        "val_perplexity",
        0.02,
    ),
    "captioning": ((), "val_crossentropy", 0.002),
}
SLOW = {"sentiment", "translation", "captioning"}  # 15-40 s per run
# One policy per recipe: the policies differ in the loss scaling (mixed_float16's,
# the same runner code for every recipe) and in float16's range, where attention's
# masks overflow first; each recipe's dtype plumbing through its model is what a run
# checks, and a second policy would only repeat it. float16 for translation (its
# attention masks) and stock (loss scaling over a training set of arrays), bfloat16
# for the others. Running both on every recipe took two minutes more of CI.
POLICY = {
    "stock": "mixed_float16",
    "sentiment": "mixed_bfloat16",
    "language_model": "mixed_bfloat16",
    "translation": "mixed_float16",
    "captioning": "mixed_bfloat16",
}
CASES = [
    pytest.param(name, POLICY[name], marks=[pytest.mark.slow] if name in SLOW else [])
    for name in RECIPES
]


def _run(name, run_dir, *options):
    extra, _, _ = RECIPES[name]
    smoke = ROOT / "recipes" / name / "configs" / "smoke.toml"
    result = invoke(
        "run", name, "--config", str(smoke), "--run-dir", str(run_dir), *extra, *options
    )
    assert result.exit_code == 0, result.output[-3000:]
    return _read(run_dir)


def _read(run_dir):
    with (run_dir / "history.csv").open() as rows:
        history = list(csv.DictReader(rows))
    metrics = json.loads((run_dir / "metrics.json").read_text())["test"]["model"]
    return history, metrics, json.loads((run_dir / "run.json").read_text())


@pytest.fixture(scope="module")
def float32_runs(tmp_path_factory):
    """The float32 run of a recipe: the docs' smoke run itself (tests/smoke_runs.py,
    made once in the session) where the recipe's options here add nothing to it,
    else a run of its own (one test, one policy, asks for it)."""

    def get(name):
        if not RECIPES[name][0]:
            run = smoke_run(tmp_path_factory, name)
            assert run.exit_code == 0, run.output[-3000:]
            return _read(run.run_dir)
        return _run(name, tmp_path_factory.mktemp(f"precision-{name}") / "float32")

    return get


@pytest.mark.parametrize(("name", "policy"), CASES)
def test_a_mixed_run_trains_close_to_the_float32_run(
    name, policy, float32_runs, tmp_path
):
    history, metrics, _ = float32_runs(name)
    mixed_history, mixed_metrics, run_json = _run(
        name, tmp_path / policy, "--precision", policy
    )
    assert keras.config.dtype_policy().name == "float32"  # given back after the run
    assert run_json["precision"] == policy
    assert len(mixed_history) == len(history)
    for row, mixed_row in zip(history, mixed_history, strict=True):
        for key in ("loss", "val_loss"):
            assert float(mixed_row[key]) == pytest.approx(
                float(row[key]), rel=LOSS_TOLERANCE
            ), (row["epoch"], key)
    _, metric, tolerance = RECIPES[name]
    assert _metric(mixed_metrics, mixed_history, metric) == pytest.approx(
        _metric(metrics, history, metric), rel=tolerance
    )


def _metric(metrics, history, name) -> float:
    return float(metrics[name] if name in metrics else history[-1][name])


def test_the_older_switch_is_mixed_float16_and_conflicts_are_one_line():
    smoke = str(ROOT / "recipes" / "stock" / "configs" / "smoke.toml")
    shown = invoke("run", "stock", "--config", smoke, "--mixed-precision", "--dry-run")
    assert shown.exit_code == 0, shown.output
    assert 'precision = "float32"' in shown.output
    assert "mixed_precision = true" in shown.output
    config = config_lib.TrainConfig(mixed_precision=True)
    assert config.dtype_policy() == "mixed_float16"
    both = invoke(
        "run", "stock", "--config", smoke, "--mixed-precision",
        "--precision", "mixed_bfloat16", "--dry-run",
    )  # fmt: skip
    assert "train.mixed_precision=true means train.precision=mixed_float16" in (
        error_line(both)
    )
    same = invoke(
        "run", "stock", "--config", smoke, "--mixed-precision",
        "--precision", "mixed_float16", "--dry-run",
    )  # fmt: skip
    assert same.exit_code == 0, same.output
    tune = invoke(
        "tune", "stock", "--config", smoke, "--precision", "mixed_bfloat16",
        "--dry-run",
    )  # fmt: skip
    assert tune.exit_code == 0, tune.output
    assert 'precision = "mixed_bfloat16"' in tune.output
    tune_both = invoke(
        "tune", "stock", "--config", smoke, "--mixed-precision",
        "--precision", "mixed_bfloat16", "--dry-run",
    )  # fmt: skip
    assert "train.precision=mixed_bfloat16" in error_line(tune_both)


def test_an_old_run_directorys_config_still_loads(tmp_path):
    """config.toml of a run written before train.precision: mixed_precision only."""
    from rnnkit_recipes.stock.recipe import StockConfig

    old = config_lib.to_toml(StockConfig()).replace('precision = "float32"\n', "", 1)
    assert "mixed_precision = false" in old and "\nprecision" not in old
    path = tmp_path / "config.toml"
    path.write_text(old)
    assert config_lib.load_toml(StockConfig, path).train.dtype_policy() == "float32"
    path.write_text(old.replace("mixed_precision = false", "mixed_precision = true"))
    assert (
        config_lib.load_toml(StockConfig, path).train.dtype_policy() == "mixed_float16"
    )
