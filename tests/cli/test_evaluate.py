"""`rnnkit evaluate RUN_DIR`."""

from __future__ import annotations

import json
import shutil

import pytest
from click.testing import CliRunner

from rnnkit import config as config_lib
from rnnkit.cli import main
from rnnkit.training import run_dir as run_dir_lib
from tests.cli_support import error_line, invoke
from tests.stock_support import msft_frame

# Where runs trained that this CPU machine cannot train on: the model still runs here.
ELSEWHERE = [
    {"train.strategy": "mirrored"},
    {"train.strategy": "multiworker"},
    {"train.device": "gpu"},
]


def trained_elsewhere(run_dir, values, tmp_path):
    """A copy of the run directory whose config.toml records `values`."""
    from rnnkit_recipes.stock.recipe import StockConfig

    copy = tmp_path / "elsewhere"
    shutil.copytree(run_dir, copy)
    config_file = copy / run_dir_lib.CONFIG_FILE
    config = config_lib.load_toml(StockConfig, config_file).with_values(values)
    header = run_dir_lib.config_header("stock")
    config_file.write_text(config_lib.to_toml(config, header), "utf-8")
    return copy


def test_evaluate_reloads_and_reproduces_the_metrics(smoke_run, tmp_path):
    run_dir, _ = smoke_run
    output = tmp_path / "evaluation.json"
    result = invoke("evaluate", str(run_dir), "--output", str(output))
    assert result.exit_code == 0, result.output
    recorded = json.loads((run_dir / "metrics.json").read_text())["test"]
    assert json.loads(output.read_text())["test"] == recorded


def test_evaluate_on_another_file(smoke_run, tmp_path):
    """--data reaches the recipe: the run's prices less their last 100 days put other
    days in the test split, so the figures differ from the run's own."""
    run_dir, _ = smoke_run
    prices = tmp_path / "msft.csv"
    msft_frame().iloc[:-100].to_csv(prices, index=False)
    output = tmp_path / "evaluation.json"
    result = invoke(
        "evaluate", str(run_dir), "--data", str(prices), "--output", str(output)
    )
    assert result.exit_code == 0, result.output
    recorded = json.loads((run_dir / "metrics.json").read_text())["test"]
    evaluated = json.loads(output.read_text())["test"]
    assert evaluated.keys() == recorded.keys() and "persistence" in evaluated
    for table in ("model", "persistence"):
        assert evaluated[table] != recorded[table], table


def test_a_recipe_without_a_scored_validation_split_refuses_it(
    smoke_run, tmp_path, monkeypatch
):
    """The stock recipe does not define evaluate_validation: one line, no output,
    and no data loaded for nothing."""
    from rnnkit_recipes.stock.recipe import StockRecipe

    def loading(*args):
        raise AssertionError("the data was loaded before the refusal")

    monkeypatch.setattr(StockRecipe, "load_data", loading)
    run_dir, _ = smoke_run
    output = tmp_path / "evaluation.json"
    result = invoke(
        "evaluate", str(run_dir), "--split", "validation", "--output", str(output)
    )
    assert result.exit_code == 1
    assert error_line(result) == (
        "Error: recipe 'stock' does not score its validation split; rnnkit evaluate "
        "--split validation takes runs of a recipe that defines it (forecasting, "
        "sentiment)"
    )
    assert not output.exists()


def test_evaluate_and_predict_need_a_completed_run(tmp_path):
    result = CliRunner().invoke(main, ["evaluate", str(tmp_path)])
    assert result.exit_code == 1
    assert "not a completed rnnkit run (no run.json)" in result.output


@pytest.mark.parametrize("values", ELSEWHERE, ids=lambda v: "-".join(v.values()))
def test_evaluate_runs_on_the_device_at_hand(smoke_run, tmp_path, values):
    run_dir, _ = smoke_run
    copy = trained_elsewhere(run_dir, values, tmp_path)
    output = tmp_path / "evaluation.json"
    result = invoke("evaluate", str(copy), "--output", str(output))
    assert result.exit_code == 0, result.output
    recorded = json.loads((run_dir / "metrics.json").read_text())["test"]
    assert json.loads(output.read_text())["test"] == recorded


def test_evaluate_refuses_another_window_or_horizon(smoke_run):
    """The model reads the window and forecasts the horizon it was trained for."""
    run_dir, _ = smoke_run
    for setting in ("data.window=20", "data.horizon=3"):
        result = CliRunner().invoke(main, ["evaluate", str(run_dir), "--set", setting])
        message = error_line(result)
        assert "data.window=10" in message and "data.horizon=1" in message
