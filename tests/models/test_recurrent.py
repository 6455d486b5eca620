"""rnnkit.models._recurrent: every model's `cell_type` goes through the registry."""

from __future__ import annotations

import pytest

from rnnkit.layers import GRU, LSTM, LSTMCell, SimpleRNNCell
from rnnkit.models._recurrent import (
    recurrent_cell_class,
    recurrent_layer_class,
    states_per_cell,
)


def test_names_become_the_registered_classes():
    assert recurrent_layer_class("lstm") is LSTM
    assert recurrent_layer_class("gru") is GRU
    assert recurrent_cell_class("lstm") is LSTMCell


def test_an_unknown_name_is_an_error_that_names_the_argument():
    with pytest.raises(ValueError, match="`cell_type`.*did you mean 'gru'"):
        recurrent_layer_class("gr")


def test_states_per_cell_counts_the_state_tensors():
    assert states_per_cell(LSTMCell(3)) == 2
    assert states_per_cell(SimpleRNNCell(3)) == 1
