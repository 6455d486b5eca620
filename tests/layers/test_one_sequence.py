"""The LSTM's and the GRU's inference loop for a batch of one
(`rnnkit.layers._one_sequence`): outputs, final states and gradients against Keras'
layers with the same weights, in both its forms, and when a layer chooses it."""

from __future__ import annotations

import keras
import numpy as np
import pytest

from rnnkit.layers import GRU, LSTM, LSTMCell, _one_sequence
from rnnkit.testing import recurrent as checks

pytestmark = pytest.mark.skipif(
    keras.backend.backend() != "tensorflow", reason="a TensorFlow loop"
)
ONE_SEQUENCE = "one-sequence loop"
XLA = "XLA-compiled"


def _traced(layer, x, **kwargs):
    import tensorflow as tf

    return tf.function(lambda inputs: layer(inputs, **kwargs))(x)


LAYERS = {
    "LSTM": (LSTM, keras.layers.LSTM, 2, {}),
    "GRU": (GRU, keras.layers.GRU, 1, {}),
    "GRU_reset_before": (GRU, keras.layers.GRU, 1, {"reset_after": False}),
}


@pytest.mark.parametrize("name", LAYERS)
@pytest.mark.parametrize("jit_compile", [True, False])
@pytest.mark.parametrize(
    "options",
    [
        {"return_sequences": True, "return_state": True},
        {"go_backwards": True, "return_sequences": True},
        {"activation": "relu", "recurrent_activation": "hard_sigmoid"},
        {"use_bias": False, "return_state": True},
        {"dropout": 0.3, "recurrent_dropout": 0.2},  # inference: no dropout
    ],
    ids=["sequences_and_state", "go_backwards", "activations", "no_bias", "dropout"],
)
def test_the_loop_equals_keras(name, jit_compile, options):
    import tensorflow as tf

    ours_cls, theirs_cls, num_states, variant = LAYERS[name]
    options = {**options, **variant}
    rng = np.random.default_rng(4)
    x = rng.standard_normal((1, 9, 3)).astype("float32")
    initial = [rng.standard_normal((1, 6)).astype("float32") for _ in range(num_states)]
    ours = ours_cls(6, jit_compile=jit_compile, **options)
    theirs = theirs_cls(6, **options)
    for layer in (ours, theirs):
        layer(x)
    for variable in ours.trainable_variables:
        variable.assign(rng.uniform(-0.7, 0.7, variable.shape))
    theirs.set_weights(ours.get_weights())
    results = []
    for layer in (ours, theirs):
        call = tf.function(lambda v, *s, layer=layer: layer(v, initial_state=list(s)))
        with tf.GradientTape() as tape:
            inputs = [tf.constant(v) for v in (x, *initial)]
            tape.watch(inputs)
            outputs = checks.as_list(call(*inputs))
            cotangents = [
                np.cos(np.arange(np.prod(o.shape))).reshape(o.shape) for o in outputs
            ]
            loss = sum(
                tf.reduce_sum(o * c) for o, c in zip(outputs, cotangents, strict=True)
            )
        grads = tape.gradient(loss, [*inputs, *layer.trainable_variables])
        results.append([*outputs, *grads])
        if layer is ours:
            assert ONE_SEQUENCE in ours.execution_path, ours.execution_path
            assert (XLA in ours.execution_path) == jit_compile
    for got, want in zip(*results, strict=True):
        np.testing.assert_allclose(np.asarray(got), np.asarray(want), atol=1e-5)


def test_the_loop_runs_where_it_can_and_the_generic_loop_elsewhere():
    rng = np.random.default_rng(0)
    one = rng.standard_normal((1, 5, 3)).astype("float32")

    def path(layer, x=one, **kwargs):
        _traced(layer, x, **kwargs)
        return layer.execution_path

    # A batch of one in inference; XLA-compiled up to 256 units by default.
    assert path(LSTM(256)).startswith(
        f"{ONE_SEQUENCE}, input projection hoisted, {XLA}"
    )
    assert path(GRU(256)).startswith(f"{ONE_SEQUENCE}, input projection hoisted, {XLA}")
    assert XLA not in path(LSTM(257))
    assert XLA in path(LSTM(512, jit_compile=True))
    # An eager call is a one-off: not compiled.
    eager = LSTM(4)
    eager(one)
    assert eager.execution_path.startswith(ONE_SEQUENCE)
    assert XLA not in eager.execution_path
    # Elsewhere the generic loop.
    assert path(LSTM(4), x=np.concatenate([one, one])).startswith("generic loop")
    assert path(LSTM(4), training=True).startswith("generic loop")
    assert path(LSTM(4), mask=np.array([[True] * 4 + [False]])).startswith(
        "generic loop"
    )

    class Peephole(LSTMCell):  # a cell of one's own that changes the step
        def step(self, inputs, states, weights, input_mask=None, recurrent_mask=None):
            return super().step(inputs, states, weights, input_mask, recurrent_mask)

    own = LSTM(4)
    own(one)
    own.cell.__class__ = Peephole
    assert _one_sequence.blockers(own, one, None, False) == [
        "not rnnkit's LSTM or GRU step"
    ]


def test_a_stateful_lstm_streams_one_sequence_in_pieces():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((1, 12, 3)).astype("float32")
    whole = LSTM(5, return_sequences=True)
    streamed = LSTM(5, return_sequences=True, stateful=True)
    whole(x)
    streamed(x[:, :4])
    streamed.set_weights(whole.get_weights())
    streamed.reset_state()
    pieces = [np.asarray(_traced(streamed, x[:, k : k + 4])) for k in (0, 4, 8)]
    assert streamed.execution_path.startswith(ONE_SEQUENCE)
    np.testing.assert_allclose(
        np.concatenate(pieces, axis=1), np.asarray(whole(x)), atol=1e-5
    )
