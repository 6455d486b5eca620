"""The recurrent layers' names, without importing Keras or any layer.

Names are the entry points of group "rnnkit.recurrent" (rnnkit's own are declared in
its `pyproject.toml`; any installed package can add one) and the classes registered in
this process by `rnnkit.layers.register_recurrent`. Configs and the command line offer
`recurrent_names()`; `rnnkit.layers.get_recurrent` turns a name into its class. One
list for both, here on the floor so that `rnnkit.layers` and `rnnkit.registry` read
the same one.
"""

from __future__ import annotations

from importlib.metadata import EntryPoint, entry_points

RECURRENT_GROUP = "rnnkit.recurrent"

# Recurrent layers registered in this process (`rnnkit.layers.register_recurrent`:
# classes defined in a script, outside any package), by name.
registered_recurrent: dict[str, type] = {}


def recurrent_entry_points() -> dict[str, EntryPoint]:
    """The installed recurrent layers' entry points by name (the first distribution
    on sys.path wins), without importing any of them."""
    found: dict[str, EntryPoint] = {}
    for entry_point in entry_points(group=RECURRENT_GROUP):
        found.setdefault(entry_point.name, entry_point)
    return found


def recurrent_names() -> tuple[str, ...]:
    """The names of the recurrent layers (`"gru"`, `"lstm"`, ...), sorted: the
    installed ones and those registered in this process."""
    return tuple(sorted({*recurrent_entry_points(), *registered_recurrent}))
