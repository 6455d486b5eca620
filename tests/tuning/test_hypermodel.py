"""rnnkit.tuning.hypermodel: how `recipe.search_space(hp, config)` makes trials."""

from __future__ import annotations

import keras
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
    trained_with = []

    class RecordLearningRate(keras.callbacks.Callback):
        # Keras Tuner copies its callbacks for each trial; the list is shared.
        def on_train_begin(self, logs=None):
            trained_with.append(float(self.model.optimizer.learning_rate))

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
    search.search(callbacks=[RecordLearningRate()], verbose=0)
    score_of = {
        trial.hyperparameters.values["learning_rate"]: trial.score
        for trial in search.oracle.trials.values()
    }
    # Two trials of a two-value choice: each value once, each trained with its own.
    assert sorted(score_of) == [0.001, 0.01]
    assert trained_with == pytest.approx(list(score_of))
    best = search.get_best_hyperparameters()[0]
    assert best.values["learning_rate"] == min(score_of, key=score_of.get)
    best_config = recipe.search_space(best, config)
    assert best_config == config.with_values(
        {"train.learning_rate": best.values["learning_rate"]}
    )
