"""The wide LSTM's inference loop for a batch of one (`rnnkit.layers._one_sequence`):
outputs, final states and gradients against Keras' LSTM with the same weights, and
when the layer chooses it. The loop runs only on the CPUs where it measured faster
(`FASTER_ON`); the tests count this machine's among them, so that they run the loop on
any CPU, and the last takes it out again."""

from __future__ import annotations

import keras
import numpy as np
import pytest

from rnnkit.layers import GRU, LSTM, LSTMCell, _one_sequence
from rnnkit.testing import recurrent as checks

pytestmark = pytest.mark.skipif(
    keras.backend.backend() != "tensorflow", reason="a TensorFlow loop"
)
ONE_SEQUENCE = "one-sequence loop, input projection hoisted"
WIDE = _one_sequence.MIN_UNITS + 4


@pytest.fixture(autouse=True)
def this_cpu_measured_faster(monkeypatch):
    from rnnkit.layers import calibration

    isa = calibration.machine()["isa"]
    monkeypatch.setattr(_one_sequence, "FASTER_ON", (isa,))


def _traced(layer, x, **kwargs):
    import tensorflow as tf

    return tf.function(lambda inputs: layer(inputs, **kwargs))(x)


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
def test_the_loop_equals_keras_lstm(options):
    import tensorflow as tf

    rng = np.random.default_rng(4)
    x = rng.standard_normal((1, 9, 3)).astype("float32")
    initial = [rng.standard_normal((1, WIDE)).astype("float32") for _ in range(2)]
    ours = LSTM(WIDE, **options)
    theirs = keras.layers.LSTM(WIDE, **options)
    for layer in (ours, theirs):
        layer(x)
    for variable in ours.trainable_variables:
        variable.assign(rng.uniform(-0.2, 0.2, variable.shape))
    theirs.set_weights(ours.get_weights())
    results = []
    for layer in (ours, theirs):
        call = tf.function(lambda v, h, c, layer=layer: layer(v, initial_state=[h, c]))
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
    assert ours.execution_path.startswith(ONE_SEQUENCE), ours.execution_path
    for got, want in zip(*results, strict=True):
        np.testing.assert_allclose(np.asarray(got), np.asarray(want), atol=1e-5)


def test_the_loop_runs_where_it_measured_faster_and_the_generic_loop_elsewhere():
    import tensorflow as tf

    rng = np.random.default_rng(0)
    one = rng.standard_normal((1, 5, 3)).astype("float32")

    def path(layer, x=one, **kwargs):
        _traced(layer, x, **kwargs)
        return layer.execution_path

    # A wide LSTM's inference at a batch of one, traced or eager.
    assert path(LSTM(WIDE)).startswith(ONE_SEQUENCE)
    assert path(LSTM(WIDE, jit_compile=False)).startswith(ONE_SEQUENCE)
    eager = LSTM(WIDE)
    eager(one)
    assert eager.execution_path.startswith(ONE_SEQUENCE)
    # Elsewhere the generic loop.
    generic = "generic loop"
    assert path(LSTM(_one_sequence.MIN_UNITS)).startswith(generic)
    assert path(LSTM(_one_sequence.MAX_UNITS + 1)).startswith(generic)
    short = one[:, : _one_sequence.MIN_STEPS - 1]
    assert path(LSTM(WIDE), x=short).startswith(generic)  # e.g. token by token
    any_length = LSTM(WIDE)  # the number of steps not known when traced
    tf.function(
        lambda inputs: any_length(inputs),
        input_signature=[tf.TensorSpec((1, None, 3), "float32")],
    )(one)
    assert any_length.execution_path.startswith(generic)
    assert path(GRU(WIDE)).startswith(generic)
    assert path(LSTM(WIDE, jit_compile=True)).startswith(generic)
    assert path(LSTM(WIDE), x=np.concatenate([one, one])).startswith(generic)
    assert path(LSTM(WIDE), training=True).startswith(generic)
    mask = np.array([[True] * 4 + [False]])
    assert path(LSTM(WIDE), mask=mask).startswith(generic)

    class Peephole(LSTMCell):  # a cell of one's own that changes the step
        def step(self, inputs, states, weights, input_mask=None, recurrent_mask=None):
            return super().step(inputs, states, weights, input_mask, recurrent_mask)

    own = LSTM(WIDE)
    own(one)
    own.cell.__class__ = Peephole
    assert _one_sequence.blockers(own, one, None, False) == ["not rnnkit's LSTM step"]


def test_a_stateful_lstm_streams_one_sequence_in_pieces():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((1, 15, 3)).astype("float32")
    whole = LSTM(WIDE, return_sequences=True, batch_shards=1)
    streamed = LSTM(WIDE, return_sequences=True, stateful=True)
    whole(np.concatenate([x, x]))  # a batch of two: the generic loop
    streamed(x[:, :5])
    streamed.set_weights(whole.get_weights())
    streamed.reset_state()
    pieces = [np.asarray(_traced(streamed, x[:, k : k + 5])) for k in (0, 5, 10)]
    assert streamed.execution_path.startswith(ONE_SEQUENCE)
    assert whole.execution_path.startswith("generic loop")
    np.testing.assert_allclose(
        np.concatenate(pieces, axis=1),
        np.asarray(whole(np.concatenate([x, x])))[:1],
        atol=1e-5,
    )


def test_a_cpu_where_it_measured_slower_keeps_the_generic_loop(monkeypatch):
    from rnnkit.layers import calibration

    rng = np.random.default_rng(2)
    one = rng.standard_normal((1, 5, 3)).astype("float32")
    isa = calibration.machine()["isa"]
    monkeypatch.setattr(_one_sequence, "FASTER_ON", ("AMX",) if isa != "AMX" else ())
    layer = LSTM(WIDE)
    _traced(layer, one)
    assert layer.execution_path.startswith("generic loop"), layer.execution_path
    assert _one_sequence.blockers(layer, one, None, False) == [
        f"a CPU with {isa}, where the generic loop measured faster"
    ]
    monkeypatch.setattr(_one_sequence, "FASTER_ON", (isa,))
    again = LSTM(WIDE)
    _traced(again, one)
    assert again.execution_path.startswith(ONE_SEQUENCE), again.execution_path
