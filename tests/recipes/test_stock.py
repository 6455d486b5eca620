"""The stock recipe: honest splits, baselines, multi-step forecasts, backtest, seeds."""

from __future__ import annotations

import json

import keras
import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner
from rnnkit_recipes.stock.baselines import moving_average
from rnnkit_recipes.stock.data import FEATURES
from rnnkit_recipes.stock.recipe import StockRecipe, forecast_table

from rnnkit.cli import main
from rnnkit.training import runner
from tests.stock_support import (
    SMOKE_CONFIG,
    smoke_config,
    write_msft_csv,
    write_sp500_slice,
)

recipe = StockRecipe()


@pytest.fixture(scope="module")
def smoke_data():
    return recipe.load_data(smoke_config())


def test_splits_are_chronological_without_overlap(smoke_data):
    splits = smoke_data.splits
    horizon = splits["train"].targets.shape[1]
    last_train_day = splits["train"].anchors.max() + horizon
    assert last_train_day < splits["validation"].anchors.min() + 1
    assert (
        splits["validation"].anchors.max() + horizon < splits["test"].anchors.min() + 1
    )
    # The test examples forecast the last 15% of the days.
    days = len(smoke_data.prices)
    assert splits["test"].anchors.min() + 1 == round(days * 0.85)
    assert splits["test"].anchors.max() + horizon == days - 1
    assert smoke_data.features.shape == (days, len(FEATURES))


def test_targets_are_next_day_log_returns(smoke_data):
    split = smoke_data.splits["test"]
    closes = smoke_data.prices["close"].to_numpy()
    expected = 100 * np.log(closes[split.anchors + 1] / closes[split.anchors])
    np.testing.assert_allclose(split.targets[:, 0], expected, rtol=1e-5, atol=1e-5)
    # The last input row of each example is its anchor day.
    np.testing.assert_array_equal(
        split.inputs[:, -1, :], smoke_data.features[split.anchors]
    )


def test_scaler_sees_only_the_training_split(smoke_data):
    config = smoke_config()
    model = recipe.build_model(config, smoke_data)
    normalize = model.get_layer("normalize")
    train_inputs = smoke_data.splits["train"].inputs.reshape(-1, len(FEATURES))
    np.testing.assert_allclose(
        np.ravel(normalize.mean), train_inputs.mean(axis=0), rtol=1e-4, atol=1e-5
    )
    every_input = np.concatenate([s.inputs for s in smoke_data.splits.values()])
    assert not np.allclose(
        np.ravel(normalize.mean), every_input.reshape(-1, 3).mean(axis=0), atol=1e-4
    )


def zero_return_model(window: int, horizon: int) -> keras.Model:
    """A model that always forecasts 'no change': exactly the persistence forecast."""
    return keras.Sequential(
        [
            keras.Input((window, len(FEATURES))),
            keras.layers.Flatten(),
            keras.layers.Dense(horizon, kernel_initializer="zeros"),
        ]
    )


def test_persistence_equivalent_model_scores_exactly_like_persistence(smoke_data):
    table = forecast_table(zero_return_model(10, 1), smoke_data, 5, batch_size=64)
    assert table["model"]["mae"] == pytest.approx(table["persistence"]["mae"])
    assert table["model"]["relative_mae"] == pytest.approx(1.0)
    # A forecast of no change never has the right direction on a day that moved.
    assert table["model"]["directional_accuracy"] == 0.0
    split = smoke_data.splits["test"]
    closes = smoke_data.prices["close"].to_numpy()
    actual_mae = np.mean(np.abs(closes[split.anchors + 1] - closes[split.anchors]))
    assert table["persistence"]["mae"] == pytest.approx(actual_mae)
    # MASE scales by the naive one-step error inside the training span only.
    train_end = smoke_data.splits["train"].anchors.max() + 1
    naive_mae = np.mean(np.abs(np.diff(closes[: train_end + 1])))
    assert table["persistence"]["mase"] == pytest.approx(actual_mae / naive_mae)
    assert table["model"]["mase"] == pytest.approx(table["persistence"]["mase"])
    up = np.mean(closes[split.anchors + 1] > closes[split.anchors])
    moved = np.mean(closes[split.anchors + 1] != closes[split.anchors])
    assert table["always_up"]["directional_accuracy"] == pytest.approx(up / moved)


def test_moving_average_matches_pandas():
    closes = np.arange(1.0, 21.0) ** 1.5
    anchors = np.arange(2, 20)
    expected = pd.Series(closes).rolling(5, min_periods=1).mean().to_numpy()[anchors]
    np.testing.assert_allclose(moving_average(closes, anchors, 5), expected)


def test_multi_step_horizon(tmp_path):
    config = smoke_config({"data.horizon": 3, "train.epochs": 1})
    data = recipe.load_data(config)
    assert data.splits["train"].targets.shape[1] == 3
    model = recipe.build_model(config, data)
    assert model.output_shape == (None, 3)
    table = recipe.evaluate(model, data, config)
    assert set(table) == {"model", "persistence", "moving_average_5", "always_up"}
    prices = write_msft_csv(tmp_path / "msft.csv")
    lines = recipe.predict(model, [str(prices)], config)
    # Friday 2017-11-10 is the last day: the next three trading days follow.
    assert [line.split()[0] for line in lines[1:]] == [
        "2017-11-13",
        "2017-11-14",
        "2017-11-15",
    ]


def test_multi_ticker_file_through_the_recipe(tmp_path):
    path = write_sp500_slice(tmp_path / "sp500.csv")
    config = smoke_config(
        {"data.path": str(path), "data.ticker": "AAL", "data.start": None}
    )
    data = recipe.load_data(config)
    assert data.source == "sp500.csv (AAL)"
    assert len(data.prices) == 1258


def test_walk_forward_folds_expand(smoke_data):
    config = smoke_config({"evaluation.folds": 3})
    folds = list(recipe.backtest_folds(smoke_data, config))
    assert len(folds) == 3
    test_anchors = np.concatenate([f.splits["test"].anchors for f in folds])
    np.testing.assert_array_equal(test_anchors, smoke_data.splits["test"].anchors)
    sizes = [len(f.splits["train"].anchors) for f in folds]
    assert sizes == sorted(sizes) and sizes[0] < sizes[-1]
    for fold in folds:
        first_test_day = fold.splits["test"].anchors.min() + 1
        assert fold.splits["validation"].anchors.max() + 1 < first_test_day
        assert (
            fold.splits["train"].anchors.max() + 1
            <= fold.splits["validation"].anchors.min()
        )


def test_backtest_reports_each_fold_and_the_mean(tmp_path):
    config = smoke_config({"evaluation.folds": 2, "train.epochs": 1})
    result = runner.run(recipe, config, tmp_path / "run", verbose=0)
    backtest = result.metrics["backtest"]
    assert len(backtest["folds"]) == 2
    mean_mae = np.mean([fold["model"]["mae"] for fold in backtest["folds"]])
    assert backtest["mean"]["model"]["mae"] == pytest.approx(mean_mae)


def _cli_run(run_dir, *extra):
    result = CliRunner().invoke(
        main,
        [
            "run",
            "stock",
            "--config",
            str(SMOKE_CONFIG),
            "--run-dir",
            str(run_dir),
            *extra,
        ],
        catch_exceptions=False,
    )
    assert result.exit_code == 0, result.output
    return json.loads((run_dir / "metrics.json").read_text())


def test_same_seed_same_metrics_other_seed_other_metrics(tmp_path):
    first = _cli_run(tmp_path / "a", "--seed", "11")
    second = _cli_run(tmp_path / "b", "--seed", "11")
    other = _cli_run(tmp_path / "c", "--seed", "12")
    assert first == second
    assert first != other
    history_a = (tmp_path / "a" / "history.csv").read_text()
    assert history_a == (tmp_path / "b" / "history.csv").read_text()


def test_resume_through_the_cli(tmp_path):
    from tests.training.test_runner import InterruptAt

    run_dir = tmp_path / "run"
    config = smoke_config({"train.epochs": 3})
    with pytest.raises(KeyboardInterrupt):
        runner.run(recipe, config, run_dir, verbose=0, callbacks=[InterruptAt(1)])
    result = CliRunner().invoke(main, ["run", "stock", "--resume", str(run_dir)])
    assert result.exit_code == 0, result.output
    history = runner.read_history(run_dir / "history.csv")
    assert [row["epoch"] for row in history] == [1, 2, 3]
    assert json.loads((run_dir / "run.json").read_text())["resumed"] is True
