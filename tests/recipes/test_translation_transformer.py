"""The translation recipe with `model.architecture = "transformer"`, end to end through
the `rnnkit` launcher on real Multi30k pairs: the first 300 of the smoke config's
pairs, a one-block Transformer, the noam learning-rate schedule."""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest
from rnnkit_recipes.translation.recipe import TranslationConfig, TranslationRecipe

from rnnkit import config as config_lib
from rnnkit.training import runner
from tests.cli_support import error_line, invoke
from tests.recipes.test_translation import MULTI30K, SMOKE_CONFIG, TRANSLATION_DATA
from tests.shared_data import require
from tests.shared_once import made_once
from tests.transformer_support import assert_search_space_sets_its_fields


def _train(folder):
    run_dir = folder / "translation_transformer"
    result = invoke(
        "run", "translation", "--config", str(SMOKE_CONFIG),
        "--set", f"data.path={MULTI30K}", "--run-dir", str(run_dir),
        "--set", "model.architecture=transformer", "--set", "train.epochs=3",
        "--set", "data.limit=300",
        "--set", "train.lr_schedule=noam", "--set", "train.warmup_steps=20",
        "--set", "train.learning_rate=0.003",
        "--set", "evaluation.heatmap_heads=each",
    )  # fmt: skip
    assert result.exit_code == 0, result.output[-3000:]


@pytest.fixture(scope="module")
def transformer_run(tmp_path_factory):
    """Trained once in the session (the module's tests may run on several
    workers); read-only."""
    require(TRANSLATION_DATA / "multi30k_train.de.gz")
    folder = made_once(tmp_path_factory, "translation-transformer", _train)
    return folder / "translation_transformer"


def test_the_transformer_trains_and_evaluates_beside_the_baselines(transformer_run):
    run_dir = transformer_run
    with (run_dir / "history.csv").open() as handle:
        history = list(csv.DictReader(handle))
    losses = [float(row["loss"]) for row in history]
    assert len(losses) == 3 and losses[-1] < losses[0] - 1.0, losses
    table = json.loads((run_dir / "metrics.json").read_text())["test"]
    assert {"bleu", "chrf", "bleu_greedy", "val_perplexity"} <= set(table["model"])
    perplexities = table["model"]["val_perplexity"], table["unigram"]["val_perplexity"]
    assert perplexities[0] < perplexities[1], perplexities
    config = config_lib.load_toml(TranslationConfig, run_dir / "config.toml")
    assert config.model.architecture == "transformer"
    assert config.train.lr_schedule == "noam"


def test_heatmaps_of_the_mean_and_of_every_head(transformer_run):
    plots = transformer_run / "plots"
    assert (plots / "attention_1.png").read_bytes()[:4] == b"\x89PNG"
    heads = sorted(p.name for p in (plots / "attention_1_heads").iterdir())
    assert heads == [f"head_{h}.png" for h in (1, 2, 3, 4)]


def test_the_saved_transformer_predicts_n_best_lists(transformer_run):
    run_dir = transformer_run
    config = config_lib.load_toml(TranslationConfig, run_dir / "config.toml")
    config = config.with_values({"evaluation.beam_width": 3, "evaluation.n_best": 3})
    model = runner.load_model(run_dir / "model.keras")
    assert type(model).__name__ == "TransformerEncoderDecoder"
    lines = TranslationRecipe().predict(model, ["Ein Hund rennt."], config)
    assert lines[0] == "Ein Hund rennt." and len(lines) == 4
    scores = [float(line.split("]")[0].split("[")[1]) for line in lines[1:]]
    assert scores == sorted(scores, reverse=True) and np.all(np.isfinite(scores))
    result = invoke("predict", str(run_dir), "--beam", "2", "Eine Frau liest.")
    assert result.exit_code == 0, result.output[-2000:]


def test_search_space_of_the_transformer():
    base = TranslationConfig().with_values({"model.architecture": "transformer"})
    names = assert_search_space_sets_its_fields(TranslationRecipe(), base)
    assert {"model_dim", "num_heads", "feedforward_dim", "encoder_layers",
            "warmup_steps"} <= names  # fmt: skip
    assert "cell_type" not in names


def test_heads_that_do_not_divide_model_dim_are_a_one_line_error(tmp_path):
    result = invoke(
        "run", "translation", "--config", str(SMOKE_CONFIG),
        "--run-dir", str(tmp_path / "run"), "--set", "model.architecture=transformer",
        "--set", "model.model_dim=30", "--set", "model.num_heads=4",
    )  # fmt: skip
    assert "model.num_heads=4 must divide model.model_dim=30" in error_line(result)
