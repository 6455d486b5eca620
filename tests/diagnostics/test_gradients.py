"""Tests for rnnkit.diagnostics.gradients: exact gradient norms of a linear RNN,
spectral norms, clipping statistics against Keras' own global-norm clipping."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from rnnkit import diagnostics
from rnnkit.layers import SimpleRNN, SimpleRNNCell
from tests.diagnostics.support import tiny_model

STEPS, UNITS = 12, 5


def linear_cell(recurrent_kernel):
    cell = SimpleRNNCell(UNITS, activation=None, use_bias=False)
    cell.build((None, 3))
    cell.kernel.assign(np.random.default_rng(0).normal(size=(3, UNITS)))
    cell.recurrent_kernel.assign(recurrent_kernel)
    return cell


def linear_norms(recurrent_kernel, direction):
    inputs = np.random.default_rng(1).normal(size=(2, STEPS, 3))
    cell = linear_cell(recurrent_kernel)

    def loss(last_hidden):  # L = g . h_T for each example, so dL/dh_T = g
        return tf.reduce_sum(last_hidden * direction)

    return diagnostics.state_gradient_norms([cell], inputs, loss)  # (2, 1, STEPS)


def test_linear_rnn_gradient_norms_are_powers_of_the_recurrent_matrix():
    """h_t = x_t W + h_{t-1} U, i.e. h_t = W_hh h_{t-1} + ... with W_hh = U^T:
    dL/dh_t = (W_hh^T)^(T-t) g = U^(T-t) g exactly."""
    rng = np.random.default_rng(2)
    recurrent = rng.normal(size=(UNITS, UNITS)) * 0.6
    direction = rng.normal(size=UNITS)
    norms = linear_norms(recurrent, direction)
    w_hh = recurrent.T
    expected = [
        np.linalg.norm(np.linalg.matrix_power(w_hh.T, STEPS - t) @ direction)
        for t in range(1, STEPS + 1)
    ]
    for example in range(2):
        np.testing.assert_allclose(norms[example, 0], expected, rtol=1e-5)
    assert expected[0] != pytest.approx(expected[-1])  # the test can tell


def test_orthogonal_recurrent_matrix_keeps_the_norm_constant():
    rng = np.random.default_rng(3)
    orthogonal, _ = np.linalg.qr(rng.normal(size=(UNITS, UNITS)))
    direction = rng.normal(size=UNITS)
    norms = linear_norms(orthogonal, direction)
    np.testing.assert_allclose(norms, np.linalg.norm(direction), rtol=1e-5)


def test_tanh_rnn_stays_under_the_spectral_bound():
    keras.utils.set_random_seed(4)
    cell = SimpleRNNCell(UNITS)
    cell.build((None, 3))
    inputs = np.random.default_rng(5).normal(size=(3, STEPS, 3))
    norms = diagnostics.state_gradient_norms(
        [cell], inputs, lambda h: tf.reduce_sum(h**2)
    )
    sigma = diagnostics.spectral_norms([cell])[0]["sigma_max"]
    distance = np.arange(STEPS)[::-1]  # T - t for t = 1..T
    bound = norms[:, :, -1:] * sigma**distance
    assert (norms <= bound * (1 + 1e-5)).all()


def test_spectral_norms_match_the_singular_values():
    layer = SimpleRNN(4)
    layer.build((None, None, 2))
    from rnnkit.layers import LSTM

    lstm = LSTM(3, name="lstm")
    lstm.build((None, None, 2))
    rows = diagnostics.spectral_norms([layer, lstm])
    kernel = lstm.cell.recurrent_kernel.numpy()
    expected = {
        (layer.name, "all"): np.linalg.svd(layer.cell.recurrent_kernel.numpy())[1][0],
        ("lstm", "all"): np.linalg.svd(kernel)[1][0],
        ("lstm", "f"): np.linalg.svd(kernel[:, 3:6])[1][0],
    }
    found = {(row["layer"], row["gate"]): row["sigma_max"] for row in rows}
    assert len(rows) == 1 + 5
    for key, value in expected.items():
        assert found[key] == pytest.approx(value, rel=1e-6)


def test_clipping_statistics_match_keras_global_clipnorm():
    ids = np.random.default_rng(7).integers(0, 6, size=(4, 9)).astype("int32")
    batch = (ids[:, :-1], ids[:, 1:])
    ours, reference = tiny_model(), tiny_model()
    rows = diagnostics.train_with_clipping(
        ours, [batch], keras.optimizers.SGD(0.5), clipnorm=0.01
    )
    reference.compile(
        optimizer=keras.optimizers.SGD(0.5, global_clipnorm=0.01),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    reference.train_on_batch(*batch)
    for a, b in zip(ours.get_weights(), reference.get_weights(), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7)
    assert rows[0]["norm_before"] > 0.01 and rows[0]["clipped"] == 1.0
    assert rows[0]["norm_after"] == 0.01


def test_spectral_tracker_records_during_fit():
    model = tiny_model()
    model.compile(
        optimizer="adam",
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    ids = np.random.default_rng(8).integers(0, 6, size=(16, 9))
    tracker = diagnostics.SpectralNormTracker(every=2)
    model.fit(ids[:, :-1], ids[:, 1:], batch_size=4, epochs=1, verbose=0,
              callbacks=[tracker])  # fmt: skip
    assert [row["step"] for row in tracker.rows] == [0, 2, 4]
    last = tracker.rows[-1]["sigma_max"]
    kernel = model.recurrent_layers[0].cell.recurrent_kernel.numpy()
    assert last == pytest.approx(np.linalg.norm(kernel, 2), rel=1e-6)
