"""The forecaster's likelihoods against scipy, its sampled paths against their
distributions, and the autoregressive decoder's forecast against its own teacher-forced
pass (each step's parameters are those the true previous value would give)."""

from __future__ import annotations

import keras
import numpy as np
import pytest
from keras import ops
from scipy import stats

from rnnkit.losses import NegativeLogLikelihood, negative_log_likelihood
from rnnkit.models.forecaster import build_forecaster
from rnnkit.models.likelihoods import (
    PathQuantiles,
    distribution_parameters,
    sample,
)

pytestmark = pytest.mark.skipif(
    keras.config.backend() != "tensorflow", reason="the forecasting recipe's backend"
)

RNG = np.random.default_rng(0)
Y = RNG.normal(3.0, 2.0, (4, 5)).astype("float32")
CENTRE = RNG.normal(3.0, 1.0, (4, 5)).astype("float32")
SPREAD = RNG.uniform(0.5, 3.0, (4, 5)).astype("float32")
FREEDOM = RNG.uniform(2.5, 30.0, (4, 5)).astype("float32")
COUNTS = RNG.poisson(7.0, (4, 5)).astype("float32")
MEANS = RNG.uniform(1.0, 20.0, (4, 5)).astype("float32")
ALPHA = RNG.uniform(0.05, 2.0, (4, 5)).astype("float32")


def _scipy_log_density(likelihood):
    if likelihood == "gaussian":
        return Y, np.stack([CENTRE, SPREAD], -1), stats.norm.logpdf(Y, CENTRE, SPREAD)
    if likelihood == "student_t":
        expected = stats.t.logpdf(Y, FREEDOM, CENTRE, SPREAD)
        return Y, np.stack([CENTRE, SPREAD, FREEDOM], -1), expected
    r = 1.0 / ALPHA  # scipy's n, p: p = r / (r + mean)
    expected = stats.nbinom.logpmf(COUNTS, r, r / (r + MEANS))
    return COUNTS, np.stack([MEANS, ALPHA], -1), expected


@pytest.mark.parametrize("likelihood", ["gaussian", "student_t", "negative_binomial"])
def test_negative_log_likelihood_is_scipys(likelihood):
    y, parameters, expected = _scipy_log_density(likelihood)
    found = ops.convert_to_numpy(negative_log_likelihood(y, parameters, likelihood))
    np.testing.assert_allclose(found, -expected, rtol=2e-5, atol=2e-5)
    weights = (RNG.uniform(size=y.shape) > 0.3).astype("float32")
    loss = NegativeLogLikelihood(likelihood)(y, parameters, sample_weight=weights)
    assert float(loss) == pytest.approx(
        float(np.sum(-expected * weights) / y.size), rel=1e-5
    )


@pytest.mark.parametrize("likelihood", ["gaussian", "student_t", "negative_binomial"])
def test_the_gradients_of_the_likelihood_are_scipys_by_central_differences(
    likelihood,
):
    """d(-log p)/d(parameter) by TensorFlow against central differences of scipy's
    log density in float64."""
    import tensorflow as tf

    y, parameters, _ = _scipy_log_density(likelihood)
    parameters = parameters[:1, :3]
    y = y[:1, :3]
    variable = tf.Variable(parameters)
    with tf.GradientTape() as tape:
        total = tf.reduce_sum(negative_log_likelihood(y, variable, likelihood))
    found = tape.gradient(total, variable).numpy()

    def scipy_nll(p):
        p = p.astype("float64")
        if likelihood == "gaussian":
            return -stats.norm.logpdf(y, p[..., 0], p[..., 1]).sum()
        if likelihood == "student_t":
            return -stats.t.logpdf(y, p[..., 2], p[..., 0], p[..., 1]).sum()
        r = 1.0 / p[..., 1]
        return -stats.nbinom.logpmf(y, r, r / (r + p[..., 0])).sum()

    expected = np.zeros_like(found, dtype="float64")
    step = 1e-6
    for index in np.ndindex(parameters.shape):
        up, down = parameters.astype("float64"), parameters.astype("float64")
        up[index] += step
        down[index] -= step
        expected[index] = (scipy_nll(up) - scipy_nll(down)) / (2 * step)
    np.testing.assert_allclose(found, expected, rtol=1e-3, atol=1e-4)


@pytest.mark.parametrize("likelihood", ["gaussian", "student_t"])
def test_parameters_in_the_data_units_cost_the_log_scale_and_nothing_else(likelihood):
    """-log p of a value under the data-unit distribution is -log p of its scaled
    value under the scaled one plus log(scale): the same gradient for every window."""
    raw = RNG.normal(size=(4, 5, 3 if likelihood == "student_t" else 2))
    location = RNG.normal(100.0, 10.0, (4, 1)).astype("float32")
    scale = RNG.uniform(1.0, 50.0, (4, 1)).astype("float32")
    y = location + scale * Y
    data = distribution_parameters(raw, location, scale, likelihood)
    zero, one = np.zeros_like(location), np.ones_like(scale)
    unit = distribution_parameters(raw, zero, one, likelihood)
    found = ops.convert_to_numpy(negative_log_likelihood(y, data, likelihood))
    scaled = ops.convert_to_numpy(
        negative_log_likelihood((y - location) / scale, unit, likelihood)
    )
    np.testing.assert_allclose(found, scaled + np.log(scale), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize(
    "likelihood, parameters, reference",
    [
        ("gaussian", [5.0, 2.0], stats.norm(5.0, 2.0)),
        ("student_t", [5.0, 2.0, 4.0], stats.t(4.0, 5.0, 2.0)),
        ("negative_binomial", [6.0, 0.5], stats.nbinom(2.0, 2.0 / 8.0)),
    ],
)
def test_samples_follow_their_distribution(likelihood, parameters, reference):
    draws = ops.convert_to_numpy(
        sample(np.tile(np.float32(parameters), (40_000, 1)), likelihood, seed=11)
    )
    assert stats.kstest(draws, reference.cdf).statistic < 0.02 or (
        likelihood == "negative_binomial"  # discrete: compare the moments instead
        and abs(draws.mean() - reference.mean()) < 0.1
        and abs(draws.var() / reference.var() - 1) < 0.05
    )
    again = ops.convert_to_numpy(
        sample(np.tile(np.float32(parameters), (40_000, 1)), likelihood, seed=11)
    )
    np.testing.assert_array_equal(draws, again)  # fixed seeds: reproducible


def test_path_quantiles_are_numpys_linear_quantiles():
    paths = RNG.normal(size=(3, 50, 4)).astype("float32")
    levels = (0.05, 0.5, 0.9)
    found = ops.convert_to_numpy(PathQuantiles(levels)(paths))
    expected = np.transpose(np.quantile(paths, levels, axis=1), (1, 2, 0))
    np.testing.assert_allclose(found, expected, rtol=1e-5, atol=1e-6)


def _inputs(batch, length, horizon):
    return {
        "past_target": RNG.normal(10.0, 2.0, (batch, length)).astype("float32"),
        "past_observed": (RNG.uniform(size=(batch, length)) > 0.1).astype("float32"),
        "past_time": RNG.normal(size=(batch, length, 2)).astype("float32"),
        "future_time": RNG.normal(size=(batch, horizon, 2)).astype("float32"),
    }


@pytest.mark.parametrize("cell_type", ["gru", "lstm"])
def test_the_autoregressive_median_forecast_is_its_teacher_forced_pass(cell_type):
    """Fed its own median forecast as the true future, the teacher-forced model
    gives back the same quantiles: each step read the median of the step before."""
    batch, length, horizon = 4, 12, 5
    training, forecaster = build_forecaster(
        input_length=length, horizon=horizon, time_periods=(24,), units=6,
        segment_length=3, decoder="autoregressive", cell_type=cell_type,
        return_training_model=True,
    )  # fmt: skip
    x = _inputs(batch, length, horizon)
    forecast = forecaster.predict(x, verbose=0)
    teacher = training.predict(
        {
            **x,
            "future_target": forecast[..., 1],
            "future_observed": np.ones((batch, horizon), "float32"),
        },  # fmt: skip
        verbose=0,
    )
    np.testing.assert_allclose(teacher, forecast, rtol=1e-5, atol=1e-4)
    # ...and a different past value changes the forecast after it, not before
    other = training.predict(
        {
            **x,
            "future_target": forecast[..., 1] + np.eye(horizon, dtype="float32")[2] * 5,
            "future_observed": np.ones((batch, horizon), "float32"),
        },  # fmt: skip
        verbose=0,
    )
    np.testing.assert_allclose(other[:, :3], forecast[:, :3], rtol=1e-5, atol=1e-4)
    assert np.abs(other[:, 3:] - forecast[:, 3:]).max() > 1e-3


def test_each_sampled_step_is_drawn_from_the_teacher_forced_parameters():
    """The paths' draws, standardised by the parameters the teacher-forced model
    gives for the same path, are the fixed-seed noise of their step: sampling
    step h read the path's own draw at h - 1."""
    likelihood, batch, length, horizon, samples, seed = "gaussian", 3, 12, 4, 5, 21
    training, forecaster = build_forecaster(
        input_length=length, horizon=horizon, time_periods=(24,), units=6,
        segment_length=3, decoder="autoregressive", likelihood=likelihood,
        samples=samples, seed=seed, scaling="mean_abs", return_training_model=True,
    )  # fmt: skip
    x = _inputs(batch, length, horizon)
    paths = keras.Model(
        forecaster.inputs, forecaster.get_layer("quantiles").input
    ).predict(x, verbose=0)  # (batch, samples, horizon)
    assert paths.shape == (batch, samples, horizon)
    rows = {key: np.repeat(value, samples, axis=0) for key, value in x.items()}
    parameters = training.predict(
        {
            **rows,
            "future_target": paths.reshape(-1, horizon),
            "future_observed": np.ones((batch * samples, horizon), "float32"),
        },  # fmt: skip
        verbose=0,
    )
    for step in range(horizon):
        shape = (batch * samples,)
        z = ops.convert_to_numpy(keras.random.normal(shape, seed=seed + 2 * step))
        p = parameters[:, step]
        draws = paths.reshape(-1, horizon)[:, step]
        np.testing.assert_allclose((draws - p[:, 0]) / p[:, 1], z, atol=2e-3)
    again = forecaster.predict(x, verbose=0)
    np.testing.assert_array_equal(again, forecaster.predict(x, verbose=0))


def test_a_sampled_forecaster_reloads_to_the_same_forecast(tmp_path):
    forecaster = build_forecaster(
        input_length=12, horizon=4, time_periods=(24,), units=6, segment_length=3,
        decoder="autoregressive", likelihood="negative_binomial", scaling="mean_abs",
        cell_type="lstm", samples=20,
    )  # fmt: skip
    x = _inputs(3, 12, 4)
    x["past_target"] = np.abs(x["past_target"]).round()
    forecaster.save(tmp_path / "m.keras")
    reloaded = keras.saving.load_model(tmp_path / "m.keras", safe_mode=True)
    forecast = forecaster.predict(x, verbose=0)
    np.testing.assert_array_equal(forecast, reloaded.predict(x, verbose=0))
    assert np.all(forecast >= 0)  # counts


@pytest.mark.parametrize(
    "arguments, message",
    [
        ({"likelihood": "poisson"}, "Argument `likelihood` must be one of"),
        ({"likelihood": "negative_binomial"}, "must be 'mean_abs' or 'none'"),
        ({"decoder": "autoregressive", "dropout": 0.1}, "no dropout"),
        ({"samples": 0}, "Argument `samples` must be a positive integer"),
    ],
)
def test_bad_arguments_name_themselves(arguments, message):
    with pytest.raises(ValueError, match=message):
        build_forecaster(input_length=12, horizon=4, segment_length=3, **arguments)
