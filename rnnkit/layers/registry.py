"""The one place a recurrent layer's name becomes its class.

Names are the entry points of group "rnnkit.recurrent" (rnnkit's own are declared in
its `pyproject.toml`; any installed package can add one), so configs and the command
line list them without importing Keras (`rnnkit.registry.recurrent_names()`).
A layer class defined in a script, outside any package, joins with
`register_recurrent(name, layer_class)` for this process.
"""

from __future__ import annotations

import difflib

from rnnkit import _recurrent_names as _names

# The entry-point group and the names registered in this process: one list with the
# one configs and the command line offer (rnnkit/_recurrent_names.py).
GROUP = _names.RECURRENT_GROUP


def register_recurrent(name: str, layer_class: type) -> type:
    """Makes `get_recurrent(name)` return `layer_class` in this process.

    The class needs a `cell_class` attribute (its cell's class). Returns the class, so
    it can serve as a decorator's body. A name already taken raises `ValueError`.
    """
    if name in _names.registered_recurrent or name in _names.recurrent_entry_points():
        raise ValueError(f"a recurrent layer is already registered as {name!r}")
    if not isinstance(getattr(layer_class, "cell_class", None), type):
        raise ValueError(
            f"{layer_class.__name__} has no `cell_class` attribute: set it to the "
            "class of its cell"
        )
    _names.registered_recurrent[name] = layer_class
    return layer_class


def get_recurrent(name: str) -> type:
    """The recurrent layer class registered as `name` (e.g. `"lstm"` -> `LSTM`)."""
    if name in _names.registered_recurrent:
        return _names.registered_recurrent[name]
    found = _names.recurrent_entry_points()
    if name not in found:
        known = list(_names.recurrent_names())
        close = difflib.get_close_matches(name, known, n=1, cutoff=0.5)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise ValueError(
            f"unknown recurrent layer {name!r}{hint} (known: {', '.join(known)})"
        )
    return found[name].load()


def recurrent_layer_class(cell_type: str) -> type:
    """The recurrent layer class registered as `cell_type`, for a layer's or model's
    argument of that name: an unknown name is a `ValueError` that names the argument
    and the value received."""
    try:
        return get_recurrent(cell_type)
    except ValueError as error:
        raise ValueError(
            f"Argument `cell_type` must name a registered recurrent layer ({error}), "
            f"received cell_type={cell_type!r}."
        ) from None


def recurrent_layer_names() -> list[str]:
    """Every registered name, sorted: the entry points and `register_recurrent`'s
    (`rnnkit.registry.recurrent_names`)."""
    return list(_names.recurrent_names())


def get_recurrent_cell(name: str) -> type:
    """The cell class of the recurrent layer registered as `name`."""
    return get_recurrent(name).cell_class
