import keras
import numpy as np
import pytest

from rnnkit.layers import LSTM, LSTMCell
from rnnkit.testing import recurrent as checks
from rnnkit.testing import references
from tests.layers import recurrent_checks as internal


def numpy_forward(x, weights, initial, mask, options):
    h0, c0 = initial if initial else (None, None)
    outputs, *_ = references.lstm_forward(x, *weights, h0=h0, c0=c0, mask=mask)
    return outputs


def numpy_bptt(x, weights, output_weights, initial, options):
    h0, c0 = initial if initial else (None, None)
    return references.lstm_bptt(x, *weights, output_weights, h0=h0, c0=c0)


FAMILY = checks.RecurrentFamily(
    name="lstm",
    layer=LSTM,
    cell=LSTMCell,
    keras_layer=keras.layers.LSTM,
    num_states=2,
    numpy_forward=numpy_forward,
    numpy_bptt=numpy_bptt,
)

PARITY_CASES = {
    "default": {},
    "sequences_and_state": {"return_sequences": True, "return_state": True},
    "go_backwards": {"go_backwards": True, "return_sequences": True},
    "activations": {"activation": "relu", "recurrent_activation": "hard_sigmoid"},
    "no_bias": {"use_bias": False},
    "no_forget_bias": {"unit_forget_bias": False, "bias_initializer": "ones"},
    "dropout_inference": {"dropout": 0.3, "recurrent_dropout": 0.2},
    "regularized": {"kernel_regularizer": "l2", "recurrent_regularizer": "l1"},
}


@pytest.mark.parametrize("options", PARITY_CASES.values(), ids=PARITY_CASES.keys())
def test_matches_keras_lstm(options):
    checks.check_parity_with_keras(FAMILY, options)


@pytest.mark.parametrize("mask_kind", ["right", "left"])
def test_matches_keras_lstm_with_mask(mask_kind):
    checks.check_parity_with_keras(FAMILY, {"return_sequences": True}, mask_kind)


@pytest.mark.parametrize("with_initial_state", [False, True])
def test_forward_and_bptt_match_numpy(with_initial_state):
    checks.check_against_numpy(FAMILY, {}, with_initial_state)


@pytest.mark.parametrize("mask_kind", ["right", "left"])
def test_masked_forward_matches_numpy(mask_kind):
    checks.check_masked_against_numpy(FAMILY, mask_kind)


def test_embedding_mask_ignores_padding():
    checks.check_embedding_mask_ignores_padding(FAMILY)


def test_input_dropout_keeps_the_bias():
    checks.check_input_dropout_keeps_the_bias(FAMILY)


@pytest.mark.parametrize("training", [False, True])
def test_stateful_and_reset_state(training):
    checks.check_stateful(FAMILY, training)


def test_bidirectional_matches_keras():
    checks.check_bidirectional_parity(FAMILY)


def test_cell_inside_keras_rnn():
    checks.check_cell_in_keras_rnn(FAMILY)


def test_save_and_reload_in_fresh_process(tmp_path):
    checks.check_save_and_reload(FAMILY, tmp_path)


@pytest.mark.parametrize("policy", sorted(checks.MIXED_TOLERANCES))
def test_mixed_precision(policy):
    checks.check_mixed_precision(FAMILY, policy)


def test_training_on_msft_reduces_loss():
    checks.check_training_reduces_loss(FAMILY)


def test_unit_forget_bias_initialises_forget_gate_to_one():
    layer = LSTM(3)
    layer(np.zeros((1, 2, 4), "float32"))
    bias = keras.ops.convert_to_numpy(layer.cell.bias)
    np.testing.assert_array_equal(bias, [0, 0, 0, 1, 1, 1, 0, 0, 0, 0, 0, 0])


def test_gate_activations_reproduce_one_step():
    cell = LSTMCell(3)
    x = checks.random_inputs(8)[:, 0]
    h0 = np.random.RandomState(1).randn(checks.BATCH, 3).astype("float32")
    c0 = np.random.RandomState(2).randn(checks.BATCH, 3).astype("float32")
    h1, (_, c1) = cell(x, [h0, c0])
    gates = cell.gate_activations(x, [h0, c0])
    assert_close = checks.assert_close
    assert_close(keras.ops.convert_to_numpy(gates["hidden"]), h1)
    assert_close(keras.ops.convert_to_numpy(gates["cell"]), c1)
    for name in ("input", "forget", "output"):
        values = keras.ops.convert_to_numpy(gates[name])
        assert values.min() > 0 and values.max() < 1, name


def test_loop_weights_give_the_step_of_the_per_gate_weights():
    """The layer's loop may hand `step` the gates side by side in one matrix (on
    JAX); the step is the same as with the per-gate stacks of `gate_weights()`."""
    cell = LSTMCell(3)
    x = checks.random_inputs(9)[:, 0]
    cell.build(x.shape)
    states = [
        keras.ops.convert_to_tensor(
            np.random.RandomState(seed).randn(checks.BATCH, 3).astype("float32")
        )
        for seed in (3, 4)
    ]
    inputs = cell.augment_inputs(keras.ops.convert_to_tensor(x))
    per_gate = cell.gate_weights()
    side_by_side = [keras.ops.concatenate(per_gate, axis=-1)]
    expected_h, (_, expected_c) = cell.step(inputs, states, per_gate)
    h, (_, c) = cell.step(inputs, states, side_by_side)
    checks.assert_close(h, expected_h, what="h")
    checks.assert_close(c, expected_c, what="c")
    loop = cell.loop_weights()
    if keras.backend.backend() == "jax":
        assert [tuple(w.shape) for w in loop] == [(checks.FEATURES + 1 + 3, 12)]
    else:
        assert len(loop) == 4


def test_execution_path_names_the_reason():
    layer = LSTM(3, recurrent_dropout=0.1)
    layer(np.zeros((2, 4, 3), "float32"))
    assert layer.execution_path.startswith("generic loop")
    assert "recurrent_dropout=0.1 > 0" in layer.execution_path


def test_use_cudnn_true_without_cudnn_is_a_clear_error():
    layer = LSTM(3, use_cudnn=True, recurrent_dropout=0.1)
    with pytest.raises(ValueError, match="cannot use cuDNN: .*recurrent_dropout"):
        layer(np.zeros((2, 4, 3), "float32"))


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"units": 0}, "`units` must be a positive integer, received units=0"),
        ({"units": 4, "dropout": 1.5}, "`dropout` must be a float in"),
        ({"units": 4, "use_cudnn": "yes"}, "`use_cudnn` must be"),
    ],
)
def test_invalid_arguments_are_named(kwargs, message):
    with pytest.raises(ValueError, match=message):
        LSTM(**kwargs)


def test_get_config_round_trip():
    layer = LSTM(5, dropout=0.2, go_backwards=True, unit_forget_bias=False)
    clone = LSTM.from_config(layer.get_config())
    assert clone.get_config() == layer.get_config()
    assert clone.units == 5 and clone.dropout == 0.2 and clone.go_backwards


@pytest.mark.skipif(
    keras.backend.backend() != "tensorflow", reason="cuDNN hand-off is TF-only"
)
def test_qualifying_config_hands_the_same_weights_to_cudnn(monkeypatch):
    """With a GPU visible (simulated), the fused kernel gets the layer's own weights
    and its result is returned; a blocking option keeps the generic loop."""
    from keras.src import backend as keras_backend

    calls = []

    def fake_lstm(sequences, h0, c0, mask, kernel, recurrent_kernel, bias, **kwargs):
        calls.append((kernel, recurrent_kernel, bias, kwargs))
        outputs, h, c, _ = references.lstm_forward(
            np.asarray(sequences, np.float64),
            *(np.asarray(w, np.float64) for w in (kernel, recurrent_kernel, bias)),
        )
        return (
            h.astype("float32"),
            outputs.astype("float32"),
            [h.astype("float32"), c.astype("float32")],
        )

    monkeypatch.setattr(keras_backend, "cudnn_ok", lambda *a, **k: True)
    monkeypatch.setattr(keras_backend, "lstm", fake_lstm)
    x = checks.random_inputs(9)
    layer = LSTM(checks.UNITS)
    expected = keras.ops.convert_to_numpy(layer(x))  # traced eagerly: fake kernel ran
    assert layer.execution_path == "cudnn: fused kernel"
    kernel, recurrent_kernel, bias, _ = calls[-1]
    assert kernel is layer.cell.kernel and bias is layer.cell.bias
    assert recurrent_kernel is layer.cell.recurrent_kernel
    monkeypatch.undo()
    generic = keras.ops.convert_to_numpy(layer(x))
    checks.assert_close(generic, expected, what="cuDNN stand-in vs generic loop")

    monkeypatch.setattr(keras_backend, "cudnn_ok", lambda *a, **k: True)
    monkeypatch.setattr(keras_backend, "lstm", fake_lstm)
    blocked = LSTM(checks.UNITS, recurrent_dropout=0.2)
    calls.clear()
    blocked(x)
    assert not calls
    assert internal.is_generic_path(blocked.execution_path, "recurrent_dropout=0.2 > 0")
