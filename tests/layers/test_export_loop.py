"""The export loop (rnnkit/layers/_export.py) keeps Keras' time-loop semantics.

`_export.rnn` replaces `keras.src.backend.rnn` while a model is traced for export
(`rnnkit.export.convert`); it must give the same last output, outputs and states for
every combination of mask, `go_backwards`, `zero_output_for_mask` and
`return_all_outputs`. The converted models themselves: tests/export.
"""

from __future__ import annotations

import itertools

import keras
import numpy as np
import pytest

from rnnkit._keras_private import backend as keras_backend
from rnnkit.layers import LSTM, BahdanauAttention, _export
from rnnkit.testing.recurrent import assert_close

pytestmark = pytest.mark.skipif(
    keras.backend.backend() != "tensorflow", reason="export traces TensorFlow graphs"
)

BATCH, STEPS, FEATURES, UNITS = 4, 6, 3, 5
# Right-padded, left-padded, holed and fully masked rows.
MASK = np.array(
    [
        [1, 1, 1, 1, 0, 0],
        [0, 0, 1, 1, 1, 1],
        [1, 0, 1, 0, 1, 1],
        [0, 0, 0, 0, 0, 0],
    ],
    bool,
)


def step_function(seed=0):
    """A two-state step (like an LSTM's h and c) with an output of its own."""
    rng = np.random.RandomState(seed)
    kernel = rng.uniform(-1, 1, (FEATURES, UNITS)).astype("float32")
    recurrent = rng.uniform(-1, 1, (UNITS, UNITS)).astype("float32")

    def step(x_t, states):
        h, c = states
        c_new = 0.5 * c + keras.ops.tanh(x_t @ kernel + h @ recurrent)
        h_new = keras.ops.tanh(c_new) * 0.9
        return h_new + 1.0, [h_new, c_new]  # an output that is not the state

    return step


@pytest.mark.parametrize("format", _export.FORMATS)
@pytest.mark.parametrize(
    "masked, go_backwards, zero_output_for_mask, return_all_outputs",
    list(itertools.product([False, True], repeat=4)),
)
def test_export_loop_matches_keras_loop(
    masked, go_backwards, zero_output_for_mask, return_all_outputs, format
):
    rng = np.random.RandomState(1)
    sequences = rng.uniform(-1, 1, (BATCH, STEPS, FEATURES)).astype("float32")
    initial = [rng.uniform(-1, 1, (BATCH, UNITS)).astype("float32") for _ in range(2)]
    options = {
        "go_backwards": go_backwards,
        "mask": MASK if masked else None,
        "zero_output_for_mask": zero_output_for_mask,
        "return_all_outputs": return_all_outputs,
    }
    expected = keras_backend.rnn(step_function(), sequences, initial, **options)
    with _export.export_mode(format):
        actual = _export.rnn(step_function(), sequences, initial, UNITS, **options)
    assert_close(actual[0], expected[0], 1e-6)
    assert_close(actual[1], expected[1], 1e-6)
    for state, want in zip(actual[2], expected[2], strict=True):
        assert_close(state, want, 1e-6)


@pytest.mark.parametrize("steps", [1, 2, 5, 10, 17])
def test_blocked_loop_covers_every_step(steps):
    """LiteRT's loop runs blocks of ceil(sqrt(steps)) steps, the last one shorter
    where the blocks do not divide the sequence."""
    rng = np.random.RandomState(3)
    sequences = rng.uniform(-1, 1, (BATCH, steps, FEATURES)).astype("float32")
    mask = rng.uniform(size=(BATCH, steps)) < 0.7
    initial = [rng.uniform(-1, 1, (BATCH, UNITS)).astype("float32") for _ in range(2)]
    expected = keras_backend.rnn(step_function(), sequences, initial, mask=mask)
    with _export.export_mode("tflite"):
        actual = _export.rnn(step_function(), sequences, initial, UNITS, mask=mask)
    for got, want in zip(
        [*actual[:2], *actual[2]], [*expected[:2], *expected[2]], strict=True
    ):
        assert_close(got, want, 1e-6)


def test_export_mode_takes_a_known_format():
    with pytest.raises(ValueError, match="format"):
        with _export.export_mode("coreml"):
            pass


def test_export_mode_is_a_scope():
    assert not _export.active()
    with _export.export_mode():
        assert _export.active()
        with _export.export_mode():
            assert _export.active()
        assert _export.active()
    assert not _export.active()


def test_layers_take_the_export_paths_only_in_export_mode():
    import tensorflow as tf

    rng = np.random.RandomState(2)
    sequences = rng.uniform(-1, 1, (BATCH, STEPS, FEATURES)).astype("float32")
    lstm = LSTM(UNITS, return_sequences=True)
    attention = BahdanauAttention(4)
    usual = [
        np.asarray(lstm(sequences, mask=MASK)),
        np.asarray(attention(sequences, sequences)),
    ]
    usual_paths = [lstm.execution_path, attention.execution_path]

    @tf.function
    def traced(x, mask):
        return lstm(x, mask=mask), attention(x, x)

    with _export.export_mode():
        exported = [np.asarray(output) for output in traced(sequences, MASK)]
    assert lstm.execution_path == "generic loop, for export (builtin ops)"
    assert attention.execution_path == "all queries at once, for export (builtin ops)"
    for got, want in zip(exported, usual, strict=True):
        assert_close(got, want, 1e-5)
    lstm(sequences, mask=MASK), attention(sequences, sequences)
    assert [lstm.execution_path, attention.execution_path] == usual_paths
