"""The hand-written backward pass (`rnnkit.layers._bptt`) of SimpleRNN, LSTM and GRU.

A training call on TensorFlow takes it; its gradients are checked against automatic
differentiation of the same loop, the numpy BPTT and the Keras built-ins. Options it
does not cover fall back to automatic differentiation and say why.
"""

import keras
import pytest

from rnnkit.testing import recurrent as checks
from tests.layers import recurrent_checks as internal
from tests.layers.test_gru import FAMILY as GRU
from tests.layers.test_lstm import FAMILY as LSTM
from tests.layers.test_simple_rnn import FAMILY as SIMPLE_RNN

FAMILIES = {"simple_rnn": SIMPLE_RNN, "lstm": LSTM, "gru": GRU}
family_parameter = pytest.mark.parametrize(
    "family", FAMILIES.values(), ids=FAMILIES.keys()
)


@pytest.mark.skipif(
    not internal.hand_written_bptt_expected(),
    reason="the hand-written backward pass is TensorFlow's",
)
@pytest.mark.parametrize(
    "case", internal.BPTT_CASES.values(), ids=internal.BPTT_CASES.keys()
)
@family_parameter
def test_matches_autodiff_through_the_same_loop(family, case):
    options, mask_kind, with_initial_state, compiled = case
    internal.check_hand_written_bptt_matches_autodiff(
        family, options, mask_kind, with_initial_state, compiled
    )


# Elsewhere a training call without dropout runs the inference call's path (JAX's and
# PyTorch's automatic differentiation, or PyTorch's kernel), whose outputs and
# gradients the family's own tests check against numpy and Keras on every backend:
# these three repeated them on JAX, a quarter of a minute of the CI per family.
training_path_of_its_own = pytest.mark.skipif(
    not internal.hand_written_bptt_expected(),
    reason="a training call takes the inference call's path on this backend",
)


@training_path_of_its_own
@pytest.mark.parametrize("with_initial_state", [False, True])
@family_parameter
def test_training_call_matches_numpy_bptt(family, with_initial_state):
    checks.check_against_numpy(family, {}, with_initial_state, training=True)


@training_path_of_its_own
@pytest.mark.parametrize("mask_kind", ["right", "left"])
@family_parameter
def test_training_call_matches_keras_with_mask(family, mask_kind):
    checks.check_parity_with_keras(
        family, {"return_sequences": True}, mask_kind, training=True
    )


@training_path_of_its_own
@family_parameter
def test_training_bidirectional_matches_keras(family):
    checks.check_bidirectional_parity(family, training=True)


# (family, options, the reason named for automatic differentiation; "" for none)
TRAINING_PATHS = {
    "simple_rnn": (SIMPLE_RNN, {}, ""),
    "simple_rnn_elu": (SIMPLE_RNN, {"activation": "elu"}, "activation=elu"),
    "simple_rnn_recurrent_dropout": (
        SIMPLE_RNN,
        {"recurrent_dropout": 0.2},
        "recurrent_dropout=0.2 > 0",
    ),
    "lstm": (LSTM, {}, ""),
    "lstm_recurrent_dropout": (
        LSTM,
        {"recurrent_dropout": 0.1},
        "recurrent_dropout=0.1 > 0",
    ),
    "lstm_hard_sigmoid": (
        LSTM,
        {"recurrent_activation": "hard_sigmoid"},
        "recurrent_activation=hard_sigmoid",
    ),
    "lstm_unroll": (LSTM, {"unroll": True}, "unroll=True"),
    "gru": (GRU, {}, ""),
    "gru_reset_before": (GRU, {"reset_after": False}, "reset_after=False"),
    "gru_softsign": (GRU, {"activation": "softsign"}, "activation=softsign"),
}


@pytest.mark.parametrize(
    "family, options, reason", TRAINING_PATHS.values(), ids=TRAINING_PATHS.keys()
)
def test_training_call_names_its_backward_pass(family, options, reason):
    internal.check_training_path_is_named(family, options, reason)


def test_mixed_precision_training_differentiates_automatically():
    """Under mixed_float16 the hand-written backward pass steps aside for automatic
    differentiation of the loop, and the path says why; on PyTorch the layer runs
    PyTorch's kernel (in float32) instead, as under float32."""
    reason = "" if keras.backend.backend() == "torch" else "compute dtype float16"
    previous = keras.config.dtype_policy()
    keras.config.set_dtype_policy("mixed_float16")
    try:
        internal.check_training_path_is_named(LSTM, {}, reason)
    finally:
        keras.config.set_dtype_policy(previous)
