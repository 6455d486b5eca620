"""SparseLabelSmoothingCrossentropy against numpy and against Keras' own losses."""

from __future__ import annotations

import keras
import numpy as np
import pytest
import tensorflow as tf

from rnnkit.losses import SparseLabelSmoothingCrossentropy

PAD = 0


def batch(seed=0, batch_size=3, length=5, classes=7):
    rng = np.random.default_rng(seed)
    logits = rng.normal(0, 2, (batch_size, length, classes)).astype("float32")
    targets = rng.integers(1, classes, (batch_size, length))
    targets[0, 3:] = PAD  # right padding of different lengths
    targets[1, 1:] = PAD
    return targets, logits


def numpy_loss_and_grad(targets, logits, epsilon, ignore_class=PAD):
    """The equations: q = (1 - eps) one_hot + eps / K; loss = -sum q log p; mean."""
    classes = logits.shape[-1]
    shifted = logits - logits.max(-1, keepdims=True)
    log_p = shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))
    q = (1 - epsilon) * np.eye(classes)[targets] + epsilon / classes
    per_token = -(q * log_p).sum(-1)
    valid = (targets != ignore_class).astype("float64")
    loss = (per_token * valid).sum() / valid.sum()
    grad = (np.exp(log_p) - q) * valid[..., None] / valid.sum()
    return loss, grad


def value_and_grad(loss_fn, targets, logits):
    logits = tf.constant(logits)
    with tf.GradientTape() as tape:
        tape.watch(logits)
        value = loss_fn(targets, logits)
    return float(value), tape.gradient(value, logits).numpy()


@pytest.mark.parametrize("epsilon", [0.0, 0.1, 0.3])
def test_value_and_gradient_match_the_equations(epsilon):
    targets, logits = batch()
    loss = SparseLabelSmoothingCrossentropy(
        label_smoothing=epsilon, from_logits=True, ignore_class=PAD
    )
    value, grad = value_and_grad(loss, targets, logits)
    want, want_grad = numpy_loss_and_grad(targets, logits, epsilon)
    np.testing.assert_allclose(value, want, rtol=1e-5)
    np.testing.assert_allclose(grad, want_grad, atol=1e-6)
    assert np.all(grad[targets == PAD] == 0)  # padding gets no gradient


def test_without_smoothing_it_is_keras_sparse_crossentropy_with_ignore_class():
    targets, logits = batch(seed=1)
    ours = SparseLabelSmoothingCrossentropy(from_logits=True, ignore_class=PAD)
    theirs = keras.losses.SparseCategoricalCrossentropy(
        from_logits=True, ignore_class=PAD
    )
    value, grad = value_and_grad(ours, targets, logits)
    want, want_grad = value_and_grad(theirs, targets, logits)
    np.testing.assert_allclose(value, want, rtol=1e-6)
    np.testing.assert_allclose(grad, want_grad, atol=1e-7)


@pytest.mark.parametrize("from_logits", [True, False])
def test_without_padding_it_is_keras_categorical_crossentropy_with_smoothing(
    from_logits,
):
    rng = np.random.default_rng(2)
    logits = rng.normal(0, 2, (4, 6, 5)).astype("float32")
    targets = rng.integers(0, 5, (4, 6))
    predictions = logits if from_logits else keras.ops.softmax(logits).numpy()
    ours = SparseLabelSmoothingCrossentropy(0.2, from_logits=from_logits)
    theirs = keras.losses.CategoricalCrossentropy(
        from_logits=from_logits, label_smoothing=0.2
    )
    np.testing.assert_allclose(
        float(ours(targets, predictions)),
        float(theirs(np.eye(5)[targets], predictions)),
        rtol=1e-5,
    )


def test_sum_reduction_adds_the_valid_tokens_only():
    targets, logits = batch(seed=3)
    loss = SparseLabelSmoothingCrossentropy(
        0.1, from_logits=True, ignore_class=PAD, reduction="sum"
    )
    mean, _ = numpy_loss_and_grad(targets, logits, 0.1)
    np.testing.assert_allclose(
        float(loss(targets, logits)), mean * (targets != PAD).sum(), rtol=1e-5
    )


def test_round_trips_through_keras_serialization():
    loss = SparseLabelSmoothingCrossentropy(0.1, from_logits=True, ignore_class=PAD)
    again = keras.losses.deserialize(keras.losses.serialize(loss))
    assert isinstance(again, SparseLabelSmoothingCrossentropy)
    assert (again.label_smoothing, again.from_logits, again.ignore_class) == (
        0.1,
        True,
        PAD,
    )


@pytest.mark.parametrize("epsilon", [-0.1, 1.0])
def test_smoothing_outside_zero_one_is_refused(epsilon):
    with pytest.raises(ValueError, match=r"label_smoothing must be in \[0, 1\)"):
        SparseLabelSmoothingCrossentropy(epsilon)


# -- QuantileLoss --------------------------------------------------------------------


def numpy_pinball_and_grad(targets, forecasts, levels, weights):
    """mean over (batch, steps) of weight * mean_q max(q e, (q - 1) e), e = y - f,
    and its gradient with respect to f: -q or 1 - q (over Q, batch and steps)."""
    error = targets[..., None] - forecasts
    levels = np.asarray(levels)
    pinball = np.maximum(levels * error, (levels - 1.0) * error).mean(-1)
    loss = (pinball * weights).sum() / weights.size
    slope = np.where(error > 0, -levels, 1.0 - levels)
    grad = slope * weights[..., None] / (len(levels) * weights.size)
    return loss, grad


@pytest.mark.parametrize("levels", [(0.5,), (0.025, 0.1, 0.5, 0.9, 0.975)])
def test_quantile_loss_and_gradients_match_numpy(levels):
    from rnnkit.losses import QuantileLoss

    rng = np.random.default_rng(3)
    targets = rng.normal(0, 2, (4, 6)).astype("float32")
    forecasts = rng.normal(0, 2, (4, 6, len(levels))).astype("float32")
    weights = rng.uniform(0, 2, (4, 6)).astype("float32")
    weights[0, 2:] = 0.0  # missing targets
    expected, expected_grad = numpy_pinball_and_grad(
        targets.astype("float64"), forecasts.astype("float64"), levels, weights
    )
    variable = tf.constant(forecasts)
    with tf.GradientTape() as tape:
        tape.watch(variable)
        value = QuantileLoss(levels)(targets, variable, sample_weight=weights)
    np.testing.assert_allclose(float(value), expected, rtol=1e-5)
    np.testing.assert_allclose(tape.gradient(value, variable), expected_grad, atol=1e-7)


def test_quantile_loss_median_is_half_the_absolute_error_and_round_trips():
    from rnnkit.losses import QuantileLoss

    targets = np.array([[1.0, -2.0, 3.0]], "float32")
    forecasts = np.array([[[0.0], [1.0], [3.5]]], "float32")
    loss = QuantileLoss((0.5,))
    assert float(loss(targets, forecasts)) == pytest.approx(0.5 * (1 + 3 + 0.5) / 3)
    again = keras.losses.deserialize(keras.losses.serialize(QuantileLoss((0.2, 0.8))))
    assert again.quantiles == (0.2, 0.8)


def test_quantile_loss_refuses_bad_levels_and_mismatched_predictions():
    from rnnkit.losses import QuantileLoss

    with pytest.raises(ValueError, match="levels in \\(0, 1\\)"):
        QuantileLoss((0.5, 1.0))
    with pytest.raises(ValueError, match="2 values per target for 3 quantiles"):
        QuantileLoss((0.1, 0.5, 0.9))(np.zeros((2, 3)), np.zeros((2, 3, 2)))
