"""`rnnkit.layers.registry`: the one place a recurrent layer's name becomes a class."""

from __future__ import annotations

import pytest

from rnnkit import _recurrent_names as names
from rnnkit import registry as recipe_registry
from rnnkit.layers import (
    GRU,
    LSTM,
    MinGRU,
    MinLSTM,
    SimpleRNN,
    get_recurrent,
    get_recurrent_cell,
    register_recurrent,
    registry,
)


@pytest.fixture
def clean_registry(monkeypatch):
    """`register_recurrent`'s names for this test only."""
    monkeypatch.setattr(names, "registered_recurrent", {})


def test_the_installed_names_are_rnnkits_layers():
    assert get_recurrent("lstm") is LSTM
    assert get_recurrent("gru") is GRU
    assert get_recurrent("simple_rnn") is SimpleRNN
    assert {"gru", "lstm", "simple_rnn"} <= set(registry.recurrent_layer_names())


def test_the_cell_counterpart_is_the_layers_cell_class():
    for name, layer_cls in (
        ("lstm", LSTM), ("gru", GRU), ("simple_rnn", SimpleRNN),
        ("mingru", MinGRU), ("minlstm", MinLSTM),
    ):  # fmt: skip
        assert get_recurrent_cell(name) is layer_cls.cell_class
        assert isinstance(layer_cls(2).cell, get_recurrent_cell(name))


def test_an_unknown_name_suggests_the_nearest_and_lists_all():
    with pytest.raises(ValueError, match="unknown recurrent layer 'lstn'") as error:
        get_recurrent("lstn")
    message = str(error.value)
    assert "did you mean 'lstm'?" in message
    assert "known: gru, lru, lstm, mingru, minlstm, rglru, simple_rnn" in message
    with pytest.raises(ValueError, match="unknown recurrent layer 'transformer'"):
        get_recurrent_cell("transformer")


def test_register_recurrent_adds_a_name_for_this_process(clean_registry):
    class Peephole(LSTM):
        pass

    assert register_recurrent("peephole", Peephole) is Peephole
    assert get_recurrent("peephole") is Peephole
    assert get_recurrent_cell("peephole") is LSTM.cell_class
    assert "peephole" in registry.recurrent_layer_names()
    # One list: the names configs and the command line offer hold it too.
    assert recipe_registry.recurrent_names() == tuple(registry.recurrent_layer_names())
    with pytest.raises(ValueError, match="already registered as 'peephole'"):
        register_recurrent("peephole", Peephole)
    with pytest.raises(ValueError, match="already registered as 'lstm'"):
        register_recurrent("lstm", Peephole)


def test_a_layer_without_a_cell_class_is_refused(clean_registry):
    class NoCell:
        pass

    with pytest.raises(ValueError, match="NoCell has no `cell_class` attribute"):
        register_recurrent("no_cell", NoCell)
    with pytest.raises(ValueError, match="unknown recurrent layer 'no_cell'"):
        get_recurrent("no_cell")
