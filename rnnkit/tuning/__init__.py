"""Keras Tuner over a recipe's search space.

- rnnkit.tuning.hypermodel: `RecipeHyperModel`, how `recipe.search_space(hp, config)`
  becomes each trial's config, data and model;
- rnnkit.tuning.search: `tune`, the search, and its results (best.toml, trials.csv);
- rnnkit.tuning.worker: `tune_worker`, a worker of a search spread over machines;
- rnnkit.tuning.cluster: Keras Tuner's chief/worker plumbing, with bounded waits.

`from rnnkit import tuning; tuning.tune(...)` works: the names below are loaded on
first use, so importing this package (as the command line does for
rnnkit.tuning.cluster) imports neither Keras nor Keras Tuner. docs/guides/tuning.md is
the user's side of it.
"""

from __future__ import annotations

import importlib
from typing import Any

# Public name -> the module that defines it.
_HOMES = {
    "RecipeHyperModel": "rnnkit.tuning.hypermodel",
    "BEST_CONFIG_FILE": "rnnkit.tuning.search",
    "TRIALS_FILE": "rnnkit.tuning.search",
    "TUNERS": "rnnkit.tuning.search",
    "TuneResult": "rnnkit.tuning.search",
    "tune": "rnnkit.tuning.search",
    "WorkerResult": "rnnkit.tuning.worker",
    "WorkerTrial": "rnnkit.tuning.worker",
    "tune_worker": "rnnkit.tuning.worker",
}

__all__ = sorted(_HOMES)


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(_HOMES[name]), name)


def __dir__() -> list[str]:
    return sorted([*globals(), *_HOMES])
