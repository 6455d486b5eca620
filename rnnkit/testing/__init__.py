"""Checks for people who extend rnnkit: your own layers and your own recipes.

    from rnnkit.testing import check_recurrent_layer, check_recipe

    check_recurrent_layer(MGU, numpy_forward=mgu_equations)  # parity, gradients, ...
    check_recipe(MyRecipe(), "configs/smoke.toml", predict_inputs=["..."])

Each function runs a list of named checks and raises `AssertionError` "check NAME
failed: ..." at the first that fails; the `*_checks` functions return the same checks
as (name, function) pairs, for one pytest test per check. rnnkit's own tests use these
checks on rnnkit's layers and recipes, so they run on every commit.

- `check_recurrent_layer` / `recurrent_layer_checks` (`rnnkit.testing.recurrent`):
  parity with numpy equations and with a Keras built-in (outputs and gradients),
  masks, initial states, stateful streaming, Bidirectional, the cell inside
  `keras.layers.RNN`, the config round trip, a reload in a fresh process, mixed
  precision, a training step on real data and export to LiteRT and ONNX.
- `check_attention_layer` / `attention_layer_checks` (`rnnkit.testing.attention`):
  outputs and gradients against numpy equations, padded positions, mixed precision,
  the config round trip, a reload in a fresh process and a training step.
- `check_recipe` / `recipe_checks` (`rnnkit.testing.recipe`): the recipe contract,
  from the TOML round trip to one epoch through the runner, the evaluation table,
  predictions and export.
- `references`: the numpy equations of rnnkit's layers (float64), for your own
  tests.

Nothing here imports pytest, and nothing in rnnkit imports this package; Keras is
imported when a check module is first used.
"""

from __future__ import annotations

import importlib
from typing import Any

_LAZY = {
    "check_recurrent_layer": "rnnkit.testing.recurrent",
    "recurrent_layer_checks": "rnnkit.testing.recurrent",
    "check_attention_layer": "rnnkit.testing.attention",
    "attention_layer_checks": "rnnkit.testing.attention",
    "check_recipe": "rnnkit.testing.recipe",
    "recipe_checks": "rnnkit.testing.recipe",
    "references": "rnnkit.testing.references",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'rnnkit.testing' has no attribute {name!r}")
    loaded = importlib.import_module(module)
    return loaded if module.endswith(name) else getattr(loaded, name)


def __dir__() -> list[str]:
    return sorted(list(globals()) + __all__)
