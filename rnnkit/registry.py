"""Recipe discovery through Python entry points (group "rnnkit.recipes"), and the names
of the recurrent layers (group "rnnkit.recurrent").

Listing reads the installed distributions' metadata only; a recipe's module is imported
when the recipe is loaded by name. Any installed package can add a recipe:

    [project.entry-points."rnnkit.recipes"]
    my_task = "my_package.recipe:MyRecipe"

The recurrent layers are listed the same way (`recurrent_names`, from
rnnkit/_recurrent_names.py), so that configs and the command line can offer their names
without importing Keras; `rnnkit.layers.get_recurrent(name)` turns a name into its
class.
"""

from __future__ import annotations

import difflib
from importlib.metadata import EntryPoint, entry_points

from rnnkit._recurrent_names import RECURRENT_GROUP, recurrent_names
from rnnkit.errors import RecipeNotFoundError, RnnkitError
from rnnkit.recipe import Recipe

GROUP = "rnnkit.recipes"


def available() -> dict[str, EntryPoint]:
    """Installed recipes by name, sorted, without importing any of them."""
    found: dict[str, EntryPoint] = {}
    for entry_point in entry_points(group=GROUP):
        # The first distribution on sys.path wins, as it does for imports.
        found.setdefault(entry_point.name, entry_point)
    return dict(sorted(found.items()))


def load(name: str) -> Recipe:
    """Imports and instantiates the recipe registered as `name`."""
    recipes = available()
    if name not in recipes:
        close = difflib.get_close_matches(name, list(recipes), n=1, cutoff=0.5)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        known = ", ".join(recipes) or "none"
        raise RecipeNotFoundError(
            f"unknown recipe {name!r}{hint} (installed: {known}; see `rnnkit list`)"
        )
    entry_point = recipes[name]
    try:
        recipe_class = entry_point.load()
    except Exception as error:  # a broken plugin must not look like an rnnkit bug
        raise RnnkitError(
            f"recipe {name!r} ({entry_point.value}) failed to import: "
            f"{type(error).__name__}: {error}"
        ) from error
    if not (isinstance(recipe_class, type) and issubclass(recipe_class, Recipe)):
        raise RnnkitError(
            f"recipe {name!r} ({entry_point.value}) is not a subclass of "
            "rnnkit.recipe.Recipe"
        )
    return recipe_class()


def summaries() -> list[tuple[str, str]]:
    """(name, one-line summary) for every installed recipe; a broken one says why."""
    rows = []
    for name in available():
        try:
            summary = load(name).summary
        except RnnkitError as error:
            summary = f"(unavailable: {error})"
        rows.append((name, summary))
    return rows


__all__ = [
    "GROUP",
    "RECURRENT_GROUP",
    "available",
    "load",
    "recurrent_names",
    "summaries",
]
