"""The forecasting recipe with a parametric likelihood and the autoregressive decoder:
the windows that teach it, what it refuses, what it exports, and a run on real data
with a backtest fold (the forecaster, not the teacher-forced model, is what each
fold and the run evaluate)."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from rnnkit_recipes.forecasting import data as fdata
from rnnkit_recipes.forecasting import panel as fpanel
from rnnkit_recipes.forecasting.export import export_plan
from rnnkit_recipes.forecasting.recipe import ForecastingRecipe

from rnnkit.errors import ConfigError, DataError
from rnnkit.export import ExportError
from tests.recipes.test_forecasting import SMOKE, smoke

recipe = ForecastingRecipe()
DEEPAR = {"model.likelihood": "student_t", "model.decoder": "autoregressive"}


def _hourly_panel(tmp_path, values):
    times = pd.date_range("2024-01-01", periods=len(values), freq="h")
    path = tmp_path / "panel.csv"
    pd.DataFrame({"id": "a", "time": times.astype(str), "target": values}).to_csv(
        path, index=False
    )
    return path


def test_teacher_windows_carry_the_true_future_and_likelihood_weights_are_seen(
    tmp_path,
):
    values = np.arange(40, dtype=float) * 3.0 + 5.0
    values[30] = np.nan
    grid = fdata.to_grid(fpanel.read_long(_hourly_panel(tmp_path, values)), 0, 0)
    rows = np.array([[0, 20], [0, 26]])
    args = (grid, 8, 6, (), None, "mean_abs")
    quantile = fdata.Windows(*args)
    teacher = fdata.Windows(*args, likelihood="gaussian", teacher=True)
    plain, targets, weights = quantile.arrays(rows)
    assert "future_target" not in plain
    batch, same_targets, likelihood_weights = (
        t if isinstance(t, dict) else t.numpy() for t in teacher.batch(rows, True)
    )
    np.testing.assert_array_equal(same_targets, targets)
    np.testing.assert_array_equal(batch["future_target"].numpy(), targets)
    seen = ~np.isnan(values[rows[:, 1][:, None] + np.arange(6)])
    np.testing.assert_array_equal(batch["future_observed"].numpy(), seen)
    np.testing.assert_array_equal(likelihood_weights, seen.astype("float32"))
    # the quantile windows' weights are one over the scale; the likelihood's not
    assert np.all(weights[seen] < 1.0)
    # evaluation arrays hold the forecaster's inputs only
    assert set(teacher.arrays(rows)[0]) == set(plain)


@pytest.mark.parametrize(
    "values, message",
    [
        (
            {"model.likelihood": "negative_binomial"},
            "negative_binomial scales each window by a pure scale .* set "
            "model.scaling=mean_abs",
        ),
        (
            {"model.likelihood": "gaussian", "model.weighting": "series"},
            "model.weighting=series weights the pinball loss",
        ),
        (
            {"model.decoder": "autoregressive", "model.architecture": "linear"},
            "model.decoder=autoregressive is a recurrent decoder",
        ),
        (
            {"model.decoder": "autoregressive", "model.dropout": 0.1},
            "the autoregressive decoder does not have; set model.dropout=0",
        ),
    ],
)
def test_configurations_that_cannot_work_are_refused_in_one_line(values, message):
    with pytest.raises(ConfigError, match=message):
        recipe.check_config(smoke(**values))


def test_the_config_offers_what_the_forecaster_builds():
    """The config's choices are written out (the launcher reads them without
    importing Keras); they must stay the forecaster's."""
    import dataclasses

    from rnnkit_recipes.forecasting.config import ForecastingModelConfig

    from rnnkit.losses import LIKELIHOODS
    from rnnkit.models.forecaster import DECODERS

    choices = {
        f.name: f.metadata.get("choices")
        for f in dataclasses.fields(ForecastingModelConfig)
    }
    assert choices["likelihood"] == LIKELIHOODS
    assert choices["decoder"] == DECODERS


def test_counts_must_not_be_negative(tmp_path):
    values = np.abs(np.sin(np.arange(400) / 5.0)) * 10
    values[7] = -1.5
    config = smoke(**{
        "data.path": str(_hourly_panel(tmp_path, values)), "data.horizon": 12,
        "data.input_length": 48, "data.seasonality": 24,
        "model.likelihood": "negative_binomial", "model.scaling": "mean_abs",
    })  # fmt: skip
    with pytest.raises(DataError, match=r"negative values \(the least -1.5\)"):
        recipe.load_data(config)


def test_the_forecaster_is_what_is_saved_and_a_sampled_one_exports_to_saved_model():
    config = smoke(**DEEPAR, **{"data.horizon": 12})
    data = recipe.load_data(config)
    training = recipe.build_model(config, data)
    forecaster = recipe.inference_model(training)
    assert "future_target" in [t.name for t in training.inputs]
    assert "future_target" not in [t.name for t in forecaster.inputs]
    assert forecaster.output_shape == (None, 12, 5)
    assert {id(v) for v in forecaster.weights} <= {id(v) for v in training.weights}
    plan = export_plan(forecaster, config, "saved_model")
    x = next(iter(data.test))[0]
    np.testing.assert_allclose(
        np.asarray(plan.endpoints[0].function(x)["quantiles"]),
        forecaster.predict(x, verbose=0),
        rtol=1e-5,
    )
    with pytest.raises(ExportError, match="student_t forecasts the quantiles of"):
        export_plan(forecaster, config, "onnx")


@pytest.mark.slow
def test_a_deepar_run_with_a_backtest_fold_beats_naive(tmp_path):
    """The run's table and its fold's (the mean of one fold is that fold's)."""
    from tests.cli_support import invoke

    run_dir = tmp_path / "run"
    result = invoke(
        "run", "forecasting", "--config", str(SMOKE), "--run-dir", str(run_dir),
        "--set", "model.likelihood=student_t", "--set", "model.decoder=autoregressive",
        "--set", "data.horizon=12", "--set", "data.test_windows=4",
        "--set", "evaluation.folds=1", "--set", "train.epochs=1",
        # Fewer sampled paths than the default: each forecast step samples every
        # path, and the run forecasts the test span, its fold and their benchmarks.
        "--set", "model.samples=50",
    )  # fmt: skip
    assert result.exit_code == 0, result.output[-3000:]
    metrics = json.loads((run_dir / "metrics.json").read_text())
    test = metrics["test"]
    assert test["model"]["smape"] < test["naive"]["smape"]
    assert 0.5 < test["model"]["coverage_95"] <= 1.0
    (fold,) = metrics["backtest"]["folds"]
    assert fold["model"]["smape"] < fold["naive"]["smape"]
    assert {"model", "seasonal_naive", "naive2"} <= set(fold)
    assert fold["naive2"]["owa"] == pytest.approx(1.0)
    mean = metrics["backtest"]["mean"]["model"]["smape"]
    assert mean == pytest.approx(fold["model"]["smape"])
    # a fold's benchmarks are its own windows', not the test span's
    assert fold["seasonal_naive"] != test["seasonal_naive"]
