"""rnnkit.tuning.hypermodel: how `recipe.search_space(hp, config)` makes trials."""

from __future__ import annotations

import keras_tuner
import pytest

from rnnkit.tuning.hypermodel import RecipeHyperModel
from tests.training.test_runner import ToyConfig, ToyRecipe


class SearchedToy(ToyRecipe):
    """The runner's toy recipe with a search space over its data and learning rate;
    it counts how often it loads its data."""

    def __init__(self) -> None:
        self.loads = 0

    def load_data(self, config):
        self.loads += 1
        return super().load_data(config)

    def search_space(self, hp, config):
        return config.with_values(
            {
                "data.poison": hp.Boolean("poison"),
                "train.learning_rate": hp.Choice("learning_rate", [0.01, 0.001]),
            }
        )


def hyperparameters(poison: bool, learning_rate: float) -> keras_tuner.HyperParameters:
    hp = keras_tuner.HyperParameters()
    hp.Fixed("poison", poison)
    hp.Fixed("learning_rate", learning_rate)
    return hp


def test_each_trial_builds_from_its_own_config_and_data_load_once_per_data():
    recipe = SearchedToy()
    hypermodel = RecipeHyperModel(recipe, ToyConfig(), verbose=0)
    assert hypermodel.name == "toy"
    model = hypermodel.build(hyperparameters(False, 0.01))
    assert float(model.optimizer.learning_rate) == pytest.approx(0.01)
    hypermodel.build(hyperparameters(False, 0.001))
    assert recipe.loads == 1  # the learning rate leaves the data section as it was
    hypermodel.build(hyperparameters(True, 0.001))
    assert recipe.loads == 2
    # The trial's seed: the same hyperparameters build the same weights.
    again = hypermodel.build(hyperparameters(False, 0.01))
    for left, right in zip(model.weights, again.weights, strict=True):
        assert (left.numpy() == right.numpy()).all(), left.path


def test_a_trial_whose_loss_became_nan_fails():
    hypermodel = RecipeHyperModel(SearchedToy(), ToyConfig(), verbose=0)
    hp = hyperparameters(True, 0.01)
    with pytest.raises(keras_tuner.errors.FailedTrialError, match="became NaN"):
        hypermodel.fit(hp, hypermodel.build(hp))


def test_a_keras_tuner_search_over_it_finds_a_config_of_the_recipe(tmp_path):
    recipe = SearchedToy()
    config = ToyConfig().with_values({"train.epochs": 1})
    clean = keras_tuner.HyperParameters()
    clean.Fixed("poison", False)
    search = keras_tuner.RandomSearch(
        RecipeHyperModel(recipe, config, verbose=0),
        objective="val_loss",
        max_trials=2,
        seed=0,
        hyperparameters=clean,
        directory=str(tmp_path),
    )
    search.search(verbose=0)
    best = search.get_best_hyperparameters()[0]
    best_config = recipe.search_space(best, config)
    assert best_config == config.with_values(
        {"train.learning_rate": best.values["learning_rate"]}
    )
    assert best.values["learning_rate"] in (0.01, 0.001)
