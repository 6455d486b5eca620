"""`RecipeHyperModel`: a recipe seen by Keras Tuner as a search space of models."""

from __future__ import annotations

import math
from typing import Any

import keras
import keras_tuner

from rnnkit.recipe import Recipe, RecipeConfig, RecipeData
from rnnkit.training import runner


class RecipeHyperModel(keras_tuner.HyperModel):
    """A recipe's search space of models, for Keras Tuner.

    A recipe never calls `hp.*` in its model code. It declares its search space in one
    method, `search_space(hp, config)`, which draws values from `hp` (a
    `keras_tuner.HyperParameters`) and returns a whole new config: `config` with the
    drawn values in place of its own. Keras Tuner calls `build` and then `fit` with
    the same `hp` for each trial, and each turns it into that trial's config first:

    - `build(hp)` seeds every generator with the trial config's `train.seed` and
      returns `recipe.build_model(trial_config, data)`, compiled;
    - `fit(hp, model, ...)` trains it through the runner's `fit`
      (rnnkit.training.runner) on the trial config's splits, with Keras Tuner's
      callbacks, the runner's NaN stop and early stopping, and the recipe's own.

    A trial's data are those its config asks for: a search space may change the data
    section (e.g. the window length), so the data are loaded once per distinct data
    section and kept for later trials. A trial whose training loss became NaN raises
    `keras_tuner.errors.FailedTrialError`, so Keras Tuner records it as failed instead
    of ranking it.

    Args:
        recipe: the recipe; its `name` names the hypermodel.
        config: the fixed values; `recipe.search_space` overrides some per trial.
        verbose: Keras `fit` verbosity of each trial.

    Example:

    ```python
    recipe = registry.load("stock")
    config = rnnkit.config.resolve(recipe.Config)
    search = keras_tuner.RandomSearch(
        RecipeHyperModel(recipe, config), objective="val_loss", max_trials=4
    )
    search.search()
    best_config = recipe.search_space(search.get_best_hyperparameters()[0], config)
    ```

    `rnnkit.tuning.tune` does this, and writes the best config and every trial.
    """

    def __init__(
        self, recipe: Recipe, config: RecipeConfig, verbose: int | str = "auto"
    ) -> None:
        super().__init__(name=recipe.name)
        self.recipe = recipe
        self.config = config
        self.verbose = verbose
        self._data: dict[str, RecipeData] = {}

    def trial_config(self, hp: keras_tuner.HyperParameters) -> RecipeConfig:
        """The config of the trial that `hp` describes."""
        return self.recipe.search_space(hp, self.config)

    def data_for(self, trial_config: RecipeConfig) -> RecipeData:
        """The splits `trial_config` asks for, loaded once per data section."""
        key = repr(trial_config.to_dict()["data"])
        if key not in self._data:
            self._data[key] = self.recipe.load_data(trial_config)
        return self._data[key]

    def build(self, hp: keras_tuner.HyperParameters) -> keras.Model:
        """The recipe's compiled model for the trial `hp` describes."""
        trial_config = self.trial_config(hp)
        keras.utils.set_random_seed(trial_config.train.seed)
        return self.recipe.build_model(trial_config, self.data_for(trial_config))

    def fit(
        self,
        hp: keras_tuner.HyperParameters,
        model: keras.Model,
        *args: Any,
        callbacks: list | None = None,
        **kwargs: Any,
    ) -> keras.callbacks.History:
        """Trains `model` as the runner would; `kwargs` are Keras Tuner's further
        `fit` arguments (Hyperband's `epochs` and `initial_epoch`)."""
        trial_config = self.trial_config(hp)
        data = self.data_for(trial_config)
        history = runner.fit(
            model,
            data,
            trial_config,
            [
                *(callbacks or []),
                *runner.tuning_callbacks(trial_config),
                *self.recipe.callbacks(trial_config, data),
            ],
            **{"verbose": self.verbose, **kwargs},
        )
        losses = history.history.get("loss", [])
        if any(not math.isfinite(loss) for loss in losses):
            # A failed trial, so Keras Tuner neither ranks it nor retries forever.
            raise keras_tuner.errors.FailedTrialError("the training loss became NaN")
        return history
