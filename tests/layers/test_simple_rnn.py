import keras
import numpy as np
import pytest

from rnnkit.layers import SimpleRNN, SimpleRNNCell
from rnnkit.testing import recurrent as checks
from rnnkit.testing import references
from tests.layers import recurrent_checks as internal


def numpy_forward(x, weights, initial, mask, options):
    h0 = initial[0] if initial else None
    outputs, *_ = references.simple_rnn_forward(x, *weights, h0=h0, mask=mask)
    return outputs


def numpy_bptt(x, weights, output_weights, initial, options):
    h0 = initial[0] if initial else None
    return references.simple_rnn_bptt(x, *weights, output_weights, h0=h0)


FAMILY = checks.RecurrentFamily(
    name="simple_rnn",
    layer=SimpleRNN,
    cell=SimpleRNNCell,
    keras_layer=keras.layers.SimpleRNN,
    num_states=1,
    numpy_forward=numpy_forward,
    numpy_bptt=numpy_bptt,
)

PARITY_CASES = {
    "default": {},
    "sequences_and_state": {"return_sequences": True, "return_state": True},
    "go_backwards": {"go_backwards": True, "return_sequences": True},
    "relu": {"activation": "relu"},
    "no_bias": {"use_bias": False},
    "dropout_inference": {"dropout": 0.3, "recurrent_dropout": 0.2},
}


@pytest.mark.parametrize("options", PARITY_CASES.values(), ids=PARITY_CASES.keys())
def test_matches_keras_simple_rnn(options):
    checks.check_parity_with_keras(FAMILY, options)


@pytest.mark.parametrize("mask_kind", ["right", "left"])
def test_matches_keras_simple_rnn_with_mask(mask_kind):
    checks.check_parity_with_keras(FAMILY, {"return_sequences": True}, mask_kind)


@pytest.mark.parametrize("with_initial_state", [False, True])
def test_forward_and_bptt_match_numpy(with_initial_state):
    checks.check_against_numpy(FAMILY, {}, with_initial_state)


@pytest.mark.parametrize("mask_kind", ["right", "left"])
def test_masked_forward_matches_numpy(mask_kind):
    checks.check_masked_against_numpy(FAMILY, mask_kind)


def test_concatenation_identity():
    """[X, H] [W_xh; W_hh] = X W_xh + H W_hh: one step of the layer equals the
    concatenated form, and both equal the sum of the two matmuls."""
    rng = np.random.RandomState(0)
    x = rng.randn(checks.BATCH, checks.FEATURES)
    h = rng.randn(checks.BATCH, checks.UNITS)
    cell = SimpleRNNCell(checks.UNITS, activation=None)
    step, _ = cell(x.astype("float32"), [h.astype("float32")])
    kernel, recurrent_kernel, bias = (
        np.asarray(w, np.float64) for w in cell.get_weights()
    )
    concatenated = np.concatenate([x, h], 1) @ np.concatenate(
        [kernel, recurrent_kernel], 0
    )  # (batch, units)
    np.testing.assert_allclose(concatenated, x @ kernel + h @ recurrent_kernel, 1e-12)
    checks.assert_close(keras.ops.convert_to_numpy(step), concatenated + bias)


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


def test_execution_path_says_which_fused_kernel_or_why_none():
    layer = SimpleRNN(3)
    layer(np.zeros((2, 4, 3), "float32"))
    if keras.backend.backend() == "torch":  # PyTorch's own kernels (CPU and GPU)
        assert layer.execution_path == f"{internal.TORCH_KERNEL}rnn_tanh"
        relu = SimpleRNN(3, activation="relu")
        relu(np.zeros((2, 4, 3), "float32"))
        assert relu.execution_path == f"{internal.TORCH_KERNEL}rnn_relu"
        blocked = SimpleRNN(3, activation="sigmoid", recurrent_dropout=0.1)
        blocked(np.zeros((2, 4, 3), "float32"))
        assert internal.is_generic_path(
            blocked.execution_path,
            "activation=sigmoid; recurrent_dropout=0.1 > 0",
        )
    else:
        assert internal.is_generic_path(
            layer.execution_path, "SimpleRNN has no cuDNN kernel"
        )


def test_invalid_recurrent_dropout_is_named():
    with pytest.raises(ValueError, match="recurrent_dropout=-0.1"):
        SimpleRNN(3, recurrent_dropout=-0.1)
