import keras
import numpy as np
import pytest

from rnnkit.layers import GRU, GRUCell
from rnnkit.testing import recurrent as checks
from rnnkit.testing import references
from tests.layers import recurrent_checks as internal


def numpy_forward(x, weights, initial, mask, options):
    reset_after = options.get("reset_after", True)
    h0 = initial[0] if initial else None
    outputs, *_ = references.gru_forward(
        x, *weights, h0=h0, mask=mask, reset_after=reset_after
    )
    return outputs


def numpy_bptt(x, weights, output_weights, initial, options):
    h0 = initial[0] if initial else None
    return references.gru_bptt(
        x, *weights, output_weights, h0=h0, reset_after=options.get("reset_after", True)
    )


FAMILY = checks.RecurrentFamily(
    name="gru",
    layer=GRU,
    cell=GRUCell,
    keras_layer=keras.layers.GRU,
    num_states=1,
    numpy_forward=numpy_forward,
    numpy_bptt=numpy_bptt,
)

PARITY_CASES = {
    "default": {},
    "reset_before": {"reset_after": False},
    "sequences_and_state": {"return_sequences": True, "return_state": True},
    "go_backwards": {"go_backwards": True, "return_sequences": True},
    "activations": {"activation": "relu", "recurrent_activation": "hard_sigmoid"},
    "no_bias": {"use_bias": False},
    "no_bias_reset_before": {"use_bias": False, "reset_after": False},
    "dropout_inference": {"dropout": 0.3, "recurrent_dropout": 0.2},
}


@pytest.mark.parametrize("options", PARITY_CASES.values(), ids=PARITY_CASES.keys())
def test_matches_keras_gru(options):
    checks.check_parity_with_keras(FAMILY, options)


@pytest.mark.parametrize("mask_kind", ["right", "left"])
@pytest.mark.parametrize("reset_after", [True, False])
def test_matches_keras_gru_with_mask(mask_kind, reset_after):
    checks.check_parity_with_keras(
        FAMILY, {"return_sequences": True, "reset_after": reset_after}, mask_kind
    )


@pytest.mark.parametrize("reset_after", [True, False])
@pytest.mark.parametrize("with_initial_state", [False, True])
def test_forward_and_bptt_match_numpy(reset_after, with_initial_state):
    checks.check_against_numpy(FAMILY, {"reset_after": reset_after}, with_initial_state)


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


def test_bias_layout_follows_reset_after():
    for reset_after, shape in ((True, (2, 9)), (False, (9,))):
        layer = GRU(3, reset_after=reset_after)
        layer(np.zeros((1, 2, 4), "float32"))
        assert tuple(layer.cell.bias.shape) == shape


def test_execution_path_names_the_reason():
    layer = GRU(3, reset_after=False)
    layer(np.zeros((2, 4, 3), "float32"))
    assert layer.execution_path.startswith("generic loop")
    assert "reset_after=False" in layer.execution_path


def test_invalid_units_is_named():
    with pytest.raises(ValueError, match="received units=-2"):
        GRU(-2)


def test_get_config_round_trip():
    layer = GRU(5, reset_after=False, recurrent_dropout=0.1, stateful=False)
    clone = GRU.from_config(layer.get_config())
    assert clone.get_config() == layer.get_config()
    assert clone.reset_after is False and clone.recurrent_dropout == 0.1


@pytest.mark.parametrize("reset_after", [True, False])
def test_gate_activations_reproduce_one_step(reset_after):
    cell = GRUCell(3, reset_after=reset_after)
    x = checks.random_inputs(8)[:, 0]
    h0 = np.random.RandomState(1).randn(checks.BATCH, 3).astype("float32")
    h1, _ = cell(x, [h0])
    gates = cell.gate_activations(x, [h0])
    checks.assert_close(keras.ops.convert_to_numpy(gates["hidden"]), h1)
    for name in ("update", "reset"):
        values = keras.ops.convert_to_numpy(gates[name])
        assert values.min() > 0 and values.max() < 1, name


@pytest.mark.skipif(
    keras.backend.backend() != "tensorflow", reason="cuDNN hand-off is TF-only"
)
def test_qualifying_config_hands_the_same_weights_to_cudnn(monkeypatch):
    from keras.src import backend as keras_backend

    calls = []

    def fake_gru(sequences, h0, mask, kernel, recurrent_kernel, bias, **kwargs):
        calls.append((kernel, recurrent_kernel, bias, kwargs))
        outputs, h, _ = references.gru_forward(
            np.asarray(sequences, np.float64),
            *(np.asarray(w, np.float64) for w in (kernel, recurrent_kernel, bias)),
        )
        return h.astype("float32"), outputs.astype("float32"), [h.astype("float32")]

    monkeypatch.setattr(keras_backend, "cudnn_ok", lambda *a, **k: True)
    monkeypatch.setattr(keras_backend, "gru", fake_gru)
    x = checks.random_inputs(9)
    layer = GRU(checks.UNITS)
    expected = keras.ops.convert_to_numpy(layer(x))
    assert layer.execution_path == "cudnn: fused kernel"
    kernel, _, bias, kwargs = calls[-1]
    assert kernel is layer.cell.kernel and bias is layer.cell.bias
    assert kwargs["reset_after"] is True
    blocked = GRU(checks.UNITS, reset_after=False)
    calls.clear()
    blocked(x)
    assert not calls
    assert internal.is_generic_path(blocked.execution_path, "reset_after=False")
    monkeypatch.undo()
    checks.assert_close(keras.ops.convert_to_numpy(layer(x)), expected)
