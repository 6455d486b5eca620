"""rnnkit.tuning.search and `rnnkit tune`: Keras Tuner over a recipe's search space."""

from __future__ import annotations

import csv

import pytest
from click.testing import CliRunner
from rnnkit_recipes.stock.recipe import StockConfig, StockRecipe

from rnnkit import config as config_lib
from rnnkit import tuning
from rnnkit.cli import main
from rnnkit.errors import ConfigError, TrainingError
from tests.cli_support import error_line, invoke
from tests.stock_support import SMOKE_CONFIG, smoke_config


def test_two_trials_on_real_data_write_best_config_and_trials(tmp_path):
    tune_dir = tmp_path / "tuning"
    result = CliRunner().invoke(
        main,
        [
            "tune",
            "stock",
            "--tuner",
            "random",
            "--max-trials",
            "2",
            "--config",
            str(SMOKE_CONFIG),
            "--epochs",
            "1",
            "--tune-dir",
            str(tune_dir),
        ],
        catch_exceptions=False,
    )
    assert result.exit_code == 0, result.output
    assert "2 trial(s) completed" in result.output

    with (tune_dir / "trials.csv").open() as handle:
        rows = list(csv.DictReader(handle))
    assert len(rows) == 2
    assert {row["status"] for row in rows} == {"COMPLETED"}
    assert all(float(row["val_loss"]) > 0 for row in rows)
    assert {
        "cell_type",
        "units",
        "layers",
        "window",
        "dropout",
        "learning_rate",
    } <= set(rows[0])

    # best.toml is a complete config that `rnnkit run stock --config` accepts, and it
    # holds the best trial's values on top of the fixed ones.
    best = config_lib.load_toml(StockConfig, tune_dir / "best.toml")
    best_row = min(rows, key=lambda row: float(row["val_loss"]))
    assert best.model.units == int(best_row["units"])
    assert best.data.window == int(best_row["window"])
    assert best.data.start == "2014-11-01" and best.train.epochs == 1

    # Running the same search again resumes it: nothing new is trained.
    again = tuning.tune(
        StockRecipe(),
        smoke_config({"train.epochs": 1}),
        max_trials=2,
        directory=tune_dir,
        verbose=0,
    )
    assert again.completed == 2
    assert again.best_config == best

    # Resumed with other fixed settings, it refuses, naming them, and best.toml is
    # left as the search made it (issue 57, point 6).
    written = (tune_dir / "best.toml").read_text()
    refused = invoke(
        "tune", "stock", "--max-trials", "2", "--config", str(SMOKE_CONFIG),
        "--epochs", "30", "--tune-dir", str(tune_dir),
    )  # fmt: skip
    line = error_line(refused)
    assert "other fixed settings (train.epochs 1 -> 30)" in line, line
    assert "--overwrite" in line
    assert (tune_dir / "best.toml").read_text() == written


@pytest.mark.parametrize("tuner", ["hyperband", "bayesian"])
def test_other_tuners_run(tmp_path, tuner):
    result = tuning.tune(
        StockRecipe(),
        smoke_config({"train.epochs": 2, "model.units": 4}),
        tuner=tuner,
        max_trials=1,
        directory=tmp_path,
        verbose=0,
    )
    assert result.completed == 1
    assert result.best_config_path.is_file()


class BrokenRecipe(StockRecipe):
    """Its training split has one target fewer than inputs, so every fit fails."""

    def load_data(self, config):
        data = super().load_data(config)
        inputs, targets = data.train
        data.train = (inputs, targets[:-1])
        return data


def test_no_completed_trial_fails_loudly(tmp_path):
    message = "no tuning trial completed.*different numbers of examples"
    with pytest.raises(TrainingError, match=message):
        tuning.tune(
            BrokenRecipe(), smoke_config(), max_trials=2, directory=tmp_path, verbose=0
        )
    assert not (tmp_path / "best.toml").exists()


@pytest.mark.parametrize("strategy", ["mirrored", "multiworker"])
def test_tuning_refuses_a_strategy_of_several_devices(strategy):
    result = invoke(
        "tune", "stock", "--config", str(SMOKE_CONFIG), "--max-trials", "1",
        "--set", f"train.strategy={strategy}",
    )  # fmt: skip
    assert f"train.strategy={strategy}: tuning trains each trial on one device" in (
        error_line(result)
    )


def test_a_config_that_cannot_work_fails_before_the_search(tmp_path):
    """The recipe's own check (here: a backtest the recipe cannot do) runs first."""
    from rnnkit_recipes.sentiment.recipe import SentimentRecipe

    recipe = SentimentRecipe()
    config = recipe.Config().with_values({"evaluation.folds": 2})
    with pytest.raises(ConfigError, match="evaluation.folds"):
        tuning.tune(recipe, config, max_trials=1, directory=tmp_path / "tuning")
    assert not (tmp_path / "tuning").exists()
