"""The global forecaster's scaling layers against numpy, and the model's shapes,
inputs, training step and safe-mode reload."""

from __future__ import annotations

import keras
import numpy as np
import pytest

from rnnkit.losses import QuantileLoss
from rnnkit.models.forecaster import (
    QuantileOutput,
    SegmentDecoder,
    WindowScaler,
    build_forecaster,
)


def numpy_statistics(values, observed, mode, minimum_scale=1e-3):
    """Per row: the observed values' mean and standard deviation (standard), the last
    observed value and that deviation (last), 0 and their mean absolute value
    (mean_abs), or 0 and 1; the floor is minimum_scale times one plus the mean
    absolute value."""
    locations, scales = [], []
    for row, seen in zip(values, observed.astype(bool), strict=True):
        kept = row[seen]
        mean_abs = np.abs(kept).mean() if kept.size else 0.0
        floor = minimum_scale * (mean_abs + 1.0)
        if mode in ("standard", "last"):
            location = kept.mean() if kept.size else 0.0
            scale = max(kept.std() if kept.size else 0.0, floor)
            if mode == "last":
                location = kept[-1] if kept.size else 0.0
        elif mode == "mean_abs":
            location, scale = 0.0, max(mean_abs, floor)
        else:
            location, scale = 0.0, 1.0
        locations.append(location)
        scales.append(scale)
    return np.array(locations)[:, None], np.array(scales)[:, None]


@pytest.mark.parametrize("mode", ["standard", "last", "mean_abs", "none"])
def test_window_scaler_matches_numpy_and_ignores_missing_values(mode):
    rng = np.random.default_rng(0)
    values = rng.normal(50, 10, (4, 12)).astype("float32")
    observed = np.ones_like(values)
    observed[1, :5] = 0.0  # a short series' padding
    observed[2, 7] = 0.0  # a gap
    observed[0, -2:] = 0.0  # the last values missing
    values[observed == 0] = 1e6  # whatever sits there must not count
    values[3] = 7.0  # a constant window: the floor, not a division by zero
    scaled, location, scale = WindowScaler(mode)([values, observed])
    expected_location, expected_scale = numpy_statistics(
        values.astype("float64"), observed, mode
    )
    np.testing.assert_allclose(location, expected_location, rtol=1e-5)
    np.testing.assert_allclose(scale, expected_scale, rtol=1e-5)
    expected = (values - expected_location) / expected_scale * observed
    np.testing.assert_allclose(scaled, expected, rtol=1e-4, atol=1e-4)
    assert np.all(np.isfinite(scaled))


def test_quantile_output_unscales_and_sorts():
    forecast = np.array([[[1.0, -1.0, 0.0]]], "float32")  # crossed quantiles
    location = np.array([[10.0]], "float32")
    scale = np.array([[2.0]], "float32")
    result = QuantileOutput()([forecast, location, scale])
    np.testing.assert_allclose(result, [[[8.0, 10.0, 12.0]]])


def inputs(batch=5, length=48, horizon=12, features=4, covariates=2):
    rng = np.random.default_rng(1)
    return {
        "past_target": rng.uniform(100, 200, (batch, length)).astype("float32"),
        "past_observed": np.ones((batch, length), "float32"),
        "past_covariates": rng.normal(size=(batch, length, covariates)).astype(
            "float32"
        ),
        "past_time": rng.uniform(-1, 1, (batch, length, features)).astype("float32"),
        "future_time": rng.uniform(-1, 1, (batch, horizon, features)).astype("float32"),
        "series": np.array(["a", "b", "c", "a", "unseen"], dtype=object),
    }


@pytest.mark.parametrize("decoder", ["direct", "recurrent", "segments"])
def test_forecaster_trains_reloads_and_forecasts_sorted_quantiles(decoder, tmp_path):
    keras.utils.set_random_seed(0)
    model = build_forecaster(
        input_length=48, horizon=12, quantiles=(0.1, 0.5, 0.9), past_covariates=2,
        covariate_mean=[0.0, 0.0], covariate_variance=[1.0, 1.0],
        time_periods=(24.0, 168.0), series_ids=["a", "b", "c"], embedding_dim=3,
        cell_type="lstm", units=8, segment_length=12, decoder=decoder,
    )  # fmt: skip
    x = inputs()
    before = model.predict(x, verbose=0)
    assert before.shape == (5, 12, 3)
    assert np.all(np.diff(before, axis=-1) >= 0)
    model.compile(keras.optimizers.Adam(0.01), QuantileLoss((0.1, 0.5, 0.9)))
    y = x["past_target"][:, -12:]
    losses = model.fit(x, y, epochs=5, verbose=0).history["loss"]
    assert losses[-1] < losses[0]
    path = tmp_path / "forecaster.keras"
    model.save(path)
    again = keras.saving.load_model(path, safe_mode=True)
    np.testing.assert_allclose(
        again.predict(x, verbose=0), model.predict(x, verbose=0), rtol=1e-5, atol=1e-4
    )
    # The saved model says how its calendar inputs were made.
    assert again.get_layer("calendar").periods == (24.0, 168.0)


def test_forecaster_scales_with_its_input():
    """The scaling is inside the model: a series ten times larger gets forecasts ten
    times larger (standard scaling: location and scale both grow tenfold)."""
    model = build_forecaster(input_length=24, horizon=6, segment_length=6, units=4)
    x = inputs(length=24, horizon=6)
    small = {k: x[k] for k in ("past_target", "past_observed")}
    large = dict(small, past_target=small["past_target"] * 10.0)
    np.testing.assert_allclose(
        model.predict(large, verbose=0), 10.0 * model.predict(small, verbose=0),
        rtol=1e-4,
    )  # fmt: skip


@pytest.mark.parametrize(
    "arguments, message",
    [
        ({"segment_length": 5}, "must divide `input_length`"),
        ({"quantiles": (0.5, 1.5)}, "levels in \\(0, 1\\)"),
        ({"decoder": "attention"}, "must be one of"),
        ({"architecture": "mlp"}, "must be one of"),
        ({"past_covariates": 2}, "covariate_mean"),
        ({"horizon": 0}, "positive integer"),
        (
            {"decoder": "segments", "segment_length": 4, "horizon": 6},
            "divide `horizon`",
        ),
        ({"time_features": 2, "time_periods": (24.0, 168.0)}, "2 x len\\(time_periods"),
    ],
)
def test_forecaster_refuses_bad_arguments(arguments, message):
    with pytest.raises(ValueError, match=message):
        build_forecaster(**{"input_length": 24, "horizon": 6, **arguments})


def test_linear_architecture_is_one_linear_map_of_the_scaled_window():
    """architecture="linear": quantiles = sort(W (x - mean) / std + b) * std + mean,
    per window, with numpy's mean and standard deviation of the window."""
    model = build_forecaster(
        input_length=24, horizon=3, quantiles=(0.1, 0.5, 0.9), architecture="linear"
    )
    assert {tensor.name for tensor in model.inputs} == {"past_target", "past_observed"}
    x = inputs(length=24, horizon=3)
    x = {k: x[k] for k in ("past_target", "past_observed")}
    kernel, bias = model.get_layer("linear").get_weights()
    values = x["past_target"].astype("float64")
    mean = values.mean(1, keepdims=True)
    std = values.std(1, keepdims=True)
    grid = (((values - mean) / std) @ kernel + bias).reshape(-1, 3, 3)
    expected = np.sort(grid, axis=-1) * std[:, :, None] + mean[:, :, None]
    np.testing.assert_allclose(model.predict(x, verbose=0), expected, rtol=1e-4)


@pytest.mark.parametrize("cell_type", ["gru", "lstm"])
def test_segment_decoder_is_one_step_per_segment_from_the_encoder_state(cell_type):
    """Segment j's output is one step of the decoder's recurrent layer, started from
    the encoder's states, reading [position embedding j, segment j's features],
    whatever the other segments read."""
    rng = np.random.default_rng(3)
    batch, count, units, features = 4, 3, 5, 2
    decoder = SegmentDecoder(cell_type, units, count, position_dim=6)
    states = [
        rng.normal(size=(batch, units)).astype("float32")
        for _ in range(2 if cell_type == "lstm" else 1)
    ]
    steps = rng.normal(size=(batch, count, features)).astype("float32")
    result = keras.ops.convert_to_numpy(decoder(states, steps=steps))
    assert result.shape == (batch, count, units)
    positions = keras.ops.convert_to_numpy(decoder.positions)
    for j in range(count):
        read = np.concatenate(
            [np.repeat(positions[j][None], batch, 0), steps[:, j]], -1
        )
        one = decoder.recurrent(read[:, None, :], initial_state=states)
        np.testing.assert_allclose(result[:, j], one, rtol=1e-5, atol=1e-6)
    changed = steps.copy()
    changed[:, 0] += 1.0
    again = keras.ops.convert_to_numpy(decoder(states, steps=changed))
    np.testing.assert_allclose(again[:, 1:], result[:, 1:], rtol=1e-6)
    assert not np.allclose(again[:, 0], result[:, 0])
    without = SegmentDecoder(cell_type, units, count, position_dim=6)
    assert keras.ops.convert_to_numpy(without(states)).shape == (batch, count, units)
