"""A model's `cell_type` argument, read through the one registry of recurrent layers.

Every model accepts the name of any registered recurrent layer
(`rnnkit.layers.get_recurrent`), so a new cell reaches every model without an edit here.
"""

from __future__ import annotations

from rnnkit.layers.registry import recurrent_layer_class


def recurrent_cell_class(cell_type: str) -> type:
    """The cell class of the recurrent layer registered as `cell_type`."""
    return recurrent_layer_class(cell_type).cell_class


def states_per_cell(cell) -> int:
    """How many state tensors `cell` carries (two for an LSTM cell: h and c)."""
    size = cell.state_size
    return len(size) if isinstance(size, (list, tuple)) else 1
