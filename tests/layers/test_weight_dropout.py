"""Weight dropout (AWD-LSTM's weight drop) against Keras' built-in layers given the
recurrent kernel with the same mask applied: outputs, and on TensorFlow every
gradient, on the hand-written backward pass, the XLA-compiled loop and automatic
differentiation; one mask per call; inference untouched; the refusals."""

import keras
import numpy as np
import pytest

from rnnkit.layers import GRU, LSTM, LSTMCell, MinGRU, SimpleRNN
from rnnkit.testing._numerics import assert_close

FAMILIES = {
    "lstm": (LSTM, keras.layers.LSTM),
    "gru": (GRU, keras.layers.GRU),
    "simple_rnn": (SimpleRNN, keras.layers.SimpleRNN),
}
BATCH, STEPS, FEATURES, UNITS, RATE = 4, 7, 3, 5, 0.4


def _x(seed=0):
    return (
        np.random.default_rng(seed)
        .normal(size=(BATCH, STEPS, FEATURES))
        .astype("float32")
    )


@pytest.fixture
def masks(monkeypatch):
    """The masks keras.random.dropout draws (as 0 or 1 / (1 - rate)), recorded."""
    drawn = []
    original = keras.random.dropout

    def recording(inputs, rate, noise_shape=None, seed=None):
        mask = original(keras.ops.ones_like(inputs), rate, noise_shape, seed)
        drawn.append(mask)
        return inputs * mask

    monkeypatch.setattr(keras.random, "dropout", recording)
    return drawn


def _reference(family, weights):
    """Keras' layer of `family` holding `weights` (kernel, recurrent, bias)."""
    reference = FAMILIES[family][1](UNITS, return_sequences=True)
    reference.build((None, STEPS, FEATURES))
    reference.set_weights(weights)
    return reference


@pytest.mark.parametrize("family", FAMILIES)
def test_a_training_call_runs_the_recurrent_kernel_with_one_mask(family, masks):
    layer = FAMILIES[family][0](
        UNITS, weight_dropout=RATE, seed=3, return_sequences=True
    )
    x = _x()
    inference = keras.ops.convert_to_numpy(layer(x))
    assert not masks  # inference draws nothing
    kernel, recurrent, bias = (keras.ops.convert_to_numpy(w) for w in layer.weights)
    assert_close(inference, _reference(family, [kernel, recurrent, bias])(x), 1e-5)
    trained = keras.ops.convert_to_numpy(layer(x, training=True))
    assert len(masks) == 1
    mask = keras.ops.convert_to_numpy(masks[0])
    assert mask.shape == recurrent.shape
    np.testing.assert_allclose(np.unique(mask), [0.0, 1 / (1 - RATE)], rtol=1e-6)
    assert 0.2 < float(np.mean(mask == 0)) < 0.6
    expected = _reference(family, [kernel, recurrent * mask, bias])(x)
    assert_close(trained, expected, 1e-5, "outputs")
    assert "weight_dropout" in layer.execution_path or "fused" not in (
        layer.execution_path
    )
    again = keras.ops.convert_to_numpy(layer(x, training=True))
    assert len(masks) == 2 and not np.allclose(again, trained)  # a new mask


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize(
    "options",
    [{}, {"jit_compile": True}, {"jit_compile": False}, {"unroll": True}],
    ids=["default", "xla", "no-xla", "autodiff"],
)
def test_gradients_reach_the_kernel_through_the_mask(family, options, masks):
    if keras.backend.backend() != "tensorflow":
        pytest.skip("the loop's paths are TensorFlow's")
    import tensorflow as tf

    layer = FAMILIES[family][0](
        UNITS, weight_dropout=RATE, seed=5, return_sequences=True, **options
    )
    x = tf.constant(_x(seed=1))
    layer(x)
    cotangent = np.random.default_rng(2).normal(size=(BATCH, STEPS, UNITS))

    def gradients(model, call_kwargs):
        with tf.GradientTape() as tape:
            tape.watch(x)
            output = model(x, **call_kwargs)
            loss = tf.reduce_sum(output * cotangent)
        return output, tape.gradient(loss, [*model.trainable_weights, x])

    output, grads = gradients(layer, {"training": True})
    if options.get("unroll"):
        assert "autodiff BPTT" in layer.execution_path
    else:
        assert "hand-written BPTT" in layer.execution_path
    assert ("XLA-compiled" in layer.execution_path) == bool(options.get("jit_compile"))
    mask = masks[-1].numpy()
    kernel, recurrent, bias = (w.numpy() for w in layer.weights)
    reference = _reference(family, [kernel, recurrent * mask, bias])
    expected, reference_grads = gradients(reference, {})
    assert_close(output, expected, 1e-5, "outputs")
    names = ["kernel", "recurrent_kernel", "bias", "inputs"]
    reference_grads[1] = reference_grads[1] * mask  # d/dR = d/d(R * m) * m
    for name, ours, theirs in zip(names, grads, reference_grads, strict=True):
        assert_close(ours, theirs, 1e-5, f"d {name}")


def test_the_cell_alone_refuses_weight_dropout_in_training():
    layer = keras.layers.RNN(LSTMCell(UNITS, weight_dropout=RATE))
    layer(_x())  # inference: nothing to drop
    with pytest.raises(ValueError, match="only the layer's own loop holds"):
        layer(_x(), training=True)


def test_a_cell_without_recurrent_weights_refuses_weight_dropout():
    with pytest.raises(ValueError, match="has no recurrent weights, so no weight_dr"):
        MinGRU(UNITS, weight_dropout=0.1)


def test_the_config_keeps_weight_dropout():
    layer = LSTM(UNITS, weight_dropout=0.25)
    assert layer.weight_dropout == 0.25
    assert LSTM.from_config(layer.get_config()).cell.weight_dropout == 0.25
    with pytest.raises(ValueError, match="weight_dropout"):
        LSTM(UNITS, weight_dropout=1.0)
