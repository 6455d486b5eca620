"""What `rnnkit diagnose` diagnoses: fresh one-layer language models of each cell on
a text, or the model of a language-model run beside a fresh copy.

The command loads the recipe and the run (recipes and runs are above this package);
these functions are handed the objects.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import keras
import numpy as np

from rnnkit import config as config_lib
from rnnkit.diagnostics.report import compare_models, probe_windows
from rnnkit.errors import DataError, RnnkitError

# The recipe whose data (`tokens`, `train_ids`, `test_ids`, and `with_vocabulary` to
# encode it with a run's saved vocabulary) fresh cells and runs read: its `data.path`
# and `data.level` keys are the command's `--data` and `--level`.
TEXT_RECIPE = "language_model"
# Windows of the test split on which the gradient norms are measured.
PROBE_WINDOWS = 16
# Training windows of the fresh models: batch size and steps read back through time.
TRAIN_BATCH_SIZE, TRAIN_BPTT = 32, 35
# Compared when no cell is named, the cell that forgets first (the order colours the
# curves of docs/images/vanishing_gradients.png).
FRESH_CELLS = ("simple_rnn", "lstm", "gru")


def text_recipe(
    load_recipe: Callable[[str], Any],
    data_path: str | None,
    level: str,
    seed: int,
) -> tuple[Any, Any]:
    """The recipe (`load_recipe(TEXT_RECIPE)`, e.g. `rnnkit.registry.load`) and its
    config for reading the text of fresh cells one token at a time."""
    recipe = load_recipe(TEXT_RECIPE)
    config = config_lib.resolve(
        recipe.Config,
        None,
        {
            "data.path": data_path,
            "data.level": level,
            "train.seed": seed,
            "train.batch_size": 1,
            "train.bptt": 1,
        },
    )
    return recipe, config


def check_run(model: Any, recipe_name: str, run_dir: Path) -> None:
    """Raises `RnnkitError` unless the run's model is a `LanguageModel` of stacked
    recurrent layers."""
    from rnnkit.models.language_model import LanguageModel

    if not isinstance(model, LanguageModel):
        raise RnnkitError(
            f"{run_dir} is a run of recipe {recipe_name!r}; rnnkit diagnose reads "
            "language_model runs"
        )
    if model.block != "none":
        raise RnnkitError(
            f"{run_dir} is a language model of {model.block} blocks; rnnkit diagnose "
            "reads the gradients and recurrent kernels of stacked recurrent layers "
            "(model.block=none)"
        )


def fresh_and_trained(model: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """{cell: fresh copy}, {cell: model} for a trained `LanguageModel`: the copy has
    the same settings and new weights (from the global seed), both stateless."""
    from rnnkit.models.language_model import LanguageModel

    trained = model.with_batch_size(None, stateful=False)
    settings = {**model.get_config(), "stateful": False, "batch_size": None}
    settings.pop("name", None)
    fresh = LanguageModel.from_config(settings)
    fresh.build()
    label = model.cell_type
    return {label: fresh}, {label: trained}


def fresh_language_models(
    tokens: Sequence[str], cells: Iterable[str], units: int, seed: int
) -> dict[str, Any]:
    """{cell: one-layer `LanguageModel`}, each initialised from `seed`."""
    from rnnkit.models.language_model import LanguageModel

    fresh = {}
    for cell in cells:
        keras.utils.set_random_seed(seed)
        model = LanguageModel(tokens, cell, embedding_dim=32, units=units, num_layers=1)
        model.build()
        fresh[cell] = model
    return fresh


def diagnose(
    fresh: dict[str, Any],
    train_ids: np.ndarray,
    test_ids: np.ndarray,
    output_dir: Path,
    *,
    trained: dict[str, Any] | None = None,
    window: int = 100,
    steps: int = 300,
    learning_rate: float = 0.002,
    clipnorm: float = 1.0,
    seed: int = 0,
) -> dict[str, Path]:
    """`compare_models` with Adam, measured on `PROBE_WINDOWS` windows of `window`
    steps spread over `test_ids`; returns {name: path} of the files written.

    Raises `DataError` when the text is too short for the windows.
    """
    check_lengths(len(train_ids), len(test_ids), window, steps)
    probe = probe_windows(test_ids, PROBE_WINDOWS, window + 1)
    return compare_models(
        fresh,
        train_ids,
        probe,
        output_dir,
        trained=trained,
        steps=steps,
        batch_size=TRAIN_BATCH_SIZE,
        bptt=TRAIN_BPTT,
        make_optimizer=lambda: keras.optimizers.Adam(learning_rate),
        clipnorm=clipnorm,
        seed=seed,
    )


def check_lengths(train_tokens: int, test_tokens: int, window: int, steps: int) -> None:
    """Raises `DataError` unless the splits hold enough tokens: the test split
    `PROBE_WINDOWS` windows of `window` + 1, the training split (when `steps` train)
    one window of `TRAIN_BPTT` + 1 and more."""
    needed = window + 1 + PROBE_WINDOWS
    if test_tokens < needed:
        longest = test_tokens - PROBE_WINDOWS - 1
        fix = f"use --window {longest} or less, or" if longest >= 2 else "give"
        raise DataError(
            f"the test part of the text has {test_tokens} tokens, too few for "
            f"{PROBE_WINDOWS} windows of --window {window} (needs {needed}); {fix} "
            "a longer text"
        )
    if steps and train_tokens <= TRAIN_BPTT + 1:
        raise DataError(
            f"the training part of the text has {train_tokens} tokens, too few for "
            f"training windows of {TRAIN_BPTT + 1}; give a longer text, or --steps 0"
        )
