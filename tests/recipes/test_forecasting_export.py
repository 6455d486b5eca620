"""recipes/forecasting/export.py on a panel of several series: the string-free model
that LiteRT and ONNX get is the trained model with the series id replaced by its
row, and series.txt lists the ids in the rows' order. (The formats themselves, in
their own runtimes: tests/export/test_export_recipes.py.)"""

from __future__ import annotations

import keras
import numpy as np
import pytest
from rnnkit_recipes.forecasting.export import SERIES_FILE, export_plan, index_model
from rnnkit_recipes.forecasting.recipe import ForecastingRecipe

from rnnkit import config as config_lib
from rnnkit.models.forecaster import build_forecaster

IDS = ["H413", "H7", "H100", "H2"]


def _panel_model():
    keras.utils.set_random_seed(3)
    return build_forecaster(
        input_length=8,
        horizon=4,
        quantiles=(0.1, 0.5, 0.9),
        time_features=2,
        series_ids=IDS,
        embedding_dim=3,
        units=6,
        segment_length=4,
    )


def _inputs(series):
    rng = np.random.default_rng(0)
    count = len(series)
    return {
        "past_target": rng.normal(50.0, 10.0, (count, 8)).astype("float32"),
        "past_observed": np.ones((count, 8), "float32"),
        "past_time": rng.uniform(-1, 1, (count, 8, 2)).astype("float32"),
        "future_time": rng.uniform(-1, 1, (count, 4, 2)).astype("float32"),
        "series": np.array(series, dtype=object),
    }


def test_the_index_model_is_the_model_with_the_lookup_done_by_the_client():
    model = _panel_model()
    # Every id twice (same window, another id: only the embedding row differs), and
    # one never seen.
    series = [*IDS, *IDS[::-1], "unseen"]
    inputs = _inputs(series)
    expected = np.asarray(model(inputs))
    recipe = ForecastingRecipe()
    config = config_lib.resolve(recipe.Config, None, {"data.frequency": "h"})
    plan = export_plan(model, config, "onnx")
    listed = plan.files[SERIES_FILE].splitlines()
    assert sorted(listed) == sorted(IDS)
    row = {series_id: line + 1 for line, series_id in enumerate(listed)}
    indices = np.array([row.get(s, 0) for s in series], "int32")
    (artefact,) = plan.artefacts
    assert [t.name for t in artefact.inputs if t.dtype == "int32"] == ["series_index"]
    given = {k: v for k, v in inputs.items() if k != "series"}
    actual = np.asarray(artefact.model({**given, "series_index": indices})["quantiles"])
    np.testing.assert_allclose(actual, expected, rtol=1e-6, atol=1e-5)
    # The ids matter: two windows that differ only in their id differ.
    assert not np.allclose(expected[0], expected[7])
    # The same weights, shared: the index model holds no variable of its own.
    cloned = index_model(model)
    assert {id(v) for v in cloned.weights} <= {id(v) for v in model.weights}
    assert plan.notes["periods"] == [24.0, 168.0]  # a day and a week of hours
    assert "series" not in plan.refused


def test_a_saved_model_takes_the_ids_and_declares_no_file():
    model = _panel_model()
    recipe = ForecastingRecipe()
    config = config_lib.resolve(recipe.Config, None, {"data.frequency": "h"})
    plan = export_plan(model, config, "saved_model")
    (endpoint,) = plan.endpoints
    assert ("series", "string") in [(t.name, t.dtype) for t in endpoint.inputs]
    assert not plan.artefacts and not plan.files
    inputs = _inputs(IDS)
    np.testing.assert_allclose(
        np.asarray(endpoint.function(inputs)["quantiles"]),
        np.asarray(model(inputs)),
        rtol=1e-6,
    )


def test_the_calendar_periods_come_from_the_model_not_the_data():
    """export.json's periods are the ones the model recorded at training: the run's
    data file need not be there (nor be read) when it is exported."""
    model = build_forecaster(
        input_length=8, horizon=4, time_periods=(24.0, 168.0), units=4,
        segment_length=4,
    )  # fmt: skip
    recipe = ForecastingRecipe()
    config = config_lib.resolve(
        recipe.Config, None, {"data.path": "/nowhere/panel.csv", "data.frequency": None}
    )
    plan = export_plan(model, config, "saved_model")
    assert plan.notes["periods"] == [24.0, 168.0]


@pytest.mark.parametrize("format", ["tflite", "onnx"])
def test_the_segment_decoder_and_last_value_scaling_convert(format):
    """ETTh1's model (SegRNN's segment decoder, each window minus its last observed
    value) converts with LiteRT's builtin ops and to ONNX and gives the Keras
    model's quantiles, windows whose last values are missing included."""
    pytest.importorskip("ai_edge_litert")
    pytest.importorskip("onnxruntime")
    pytest.importorskip("tf2onnx")
    from rnnkit.export import portable
    from rnnkit.export.runtimes import run_onnx, run_tflite

    keras.utils.set_random_seed(5)
    model = build_forecaster(
        input_length=8, horizon=8, quantiles=(0.1, 0.5, 0.9), time_features=2,
        series_ids=IDS, embedding_dim=3, units=6, segment_length=4,
        decoder="segments", scaling="last", dropout=0.5,
    )  # fmt: skip
    recipe = ForecastingRecipe()
    config = config_lib.resolve(recipe.Config, None, {"data.frequency": "h"})
    (artefact,) = export_plan(model, config, format).artefacts
    data = portable.convert(artefact, format)
    inputs = _inputs(IDS)
    inputs["future_time"] = np.concatenate([inputs["future_time"]] * 2, axis=1)
    inputs["past_observed"][1, -2:] = 0.0  # the last two values missing
    inputs["past_observed"][2, 3] = 0.0  # a gap
    inputs["past_target"][inputs["past_observed"] == 0] = 0.0
    expected = np.asarray(model(inputs))
    given = {k: v for k, v in inputs.items() if k != "series"}
    given["series_index"] = np.arange(1, len(IDS) + 1, dtype="int32")
    (actual,) = (run_tflite if format == "tflite" else run_onnx)(data, given)
    np.testing.assert_allclose(actual, expected, rtol=1e-5, atol=1e-4)
