"""Every private Keras symbol that rnnkit uses, gathered in one module.

Keras does not export these, so a Keras release may move or rename them. rnnkit is
tested with the Keras versions in `TESTED_KERAS` (pinned in pyproject.toml); importing
this module checks that each symbol is where rnnkit expects it and, if one is not,
fails at once with an error that names the symbol and the tested versions, instead of
an `AttributeError` deep inside a layer call.

- `backend.rnn`: the time loop of Keras' recurrent layers (masks, `go_backwards`,
  `unroll`), which rnnkit's generic loop and decoder also run through.
- `backend.lstm`, `backend.gru`: the fused cuDNN kernels with Keras' weight layout.
- `backend.cudnn_ok`: whether a GPU and an activation pair allow those kernels.
- `DropoutRNNCell`: the mix-in that `keras.layers.RNN` recognises to refresh a cell's
  per-sequence dropout masks.
- `LossFunctionWrapper`: a loss given by name ("mse") as a `Loss` whose reduction the
  multi-worker loop can turn off (`rnnkit.training.multi_worker`).

One private method is used where Keras offers no public way, with a fallback:
`Model._symbolic_build`, which `fit` calls to create the compiled metrics' variables;
the multi-worker loop calls it under its strategy and, if a Keras release drops it,
logs the losses only (`rnnkit.training.multi_worker`).

Code elsewhere calls `backend.NAME(...)` at call time (never `from ... import NAME`),
so that tests can stand in for the cuDNN kernels with `monkeypatch.setattr`.
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any

import keras

TESTED_KERAS = ">=3.15,<3.16"

SYMBOLS = (
    ("keras.src.backend", "rnn"),
    ("keras.src.backend", "lstm"),
    ("keras.src.backend", "gru"),
    ("keras.src.backend", "cudnn_ok"),
    ("keras.src.layers.rnn.dropout_rnn_cell", "DropoutRNNCell"),
    ("keras.src.losses.losses", "LossFunctionWrapper"),
    # The layer calls in progress: how a recurrent layer learns that it is one
    # direction of a Bidirectional (rnnkit/layers/_batch_shards.py).
    ("keras.src.backend.common.global_state", "get_global_attribute"),
)


def _advice(what: str) -> str:
    return (
        f"rnnkit needs the private Keras symbol {what}, which Keras "
        f"{keras.__version__} does not have; rnnkit is tested with "
        f"keras{TESTED_KERAS}: pip install 'keras{TESTED_KERAS}'"
    )


def resolve(module_name: str, name: str) -> Any:
    """`module_name.name`, or an ImportError that names it and the tested versions."""
    try:
        module = importlib.import_module(module_name)
    except ImportError:
        raise ImportError(_advice(f"{module_name}.{name}")) from None
    if not hasattr(module, name):
        raise ImportError(_advice(f"{module_name}.{name}"))
    return getattr(module, name)


for _module_name, _name in SYMBOLS:
    resolve(_module_name, _name)

backend: ModuleType = importlib.import_module("keras.src.backend")
DropoutRNNCell: type = resolve(
    "keras.src.layers.rnn.dropout_rnn_cell", "DropoutRNNCell"
)
LossFunctionWrapper: type = resolve("keras.src.losses.losses", "LossFunctionWrapper")
get_global_attribute = resolve(
    "keras.src.backend.common.global_state", "get_global_attribute"
)

__all__ = [
    "DropoutRNNCell",
    "LossFunctionWrapper",
    "SYMBOLS",
    "TESTED_KERAS",
    "backend",
    "get_global_attribute",
    "resolve",
]
