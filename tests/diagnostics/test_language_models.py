"""Tests for rnnkit.diagnostics.language_models: what `rnnkit diagnose` is handed."""

import keras
import numpy as np
import pytest

from rnnkit import diagnostics, registry
from rnnkit.errors import RnnkitError
from tests.diagnostics.support import tiny_model


def test_text_recipe_reads_one_token_at_a_time():
    loaded = []

    def load(name):
        loaded.append(name)
        return registry.load(name)

    recipe, config = diagnostics.text_recipe(load, None, "word", seed=3)
    assert loaded == [diagnostics.TEXT_RECIPE] == [recipe.name]
    assert config.data.path is None and config.data.level == "word"
    assert (config.train.seed, config.train.batch_size, config.train.bptt) == (3, 1, 1)


def test_check_run_refuses_a_model_that_is_no_language_model(tmp_path):
    diagnostics.check_run(tiny_model(), "language_model", tmp_path)
    other = keras.Sequential([keras.layers.Dense(1)])
    with pytest.raises(RnnkitError, match="is a run of recipe 'stock'; rnnkit diag"):
        diagnostics.check_run(other, "stock", tmp_path)


def test_fresh_and_trained_pairs_the_model_with_a_new_copy():
    model = tiny_model()
    fresh, trained = diagnostics.fresh_and_trained(model)
    assert list(fresh) == list(trained) == ["simple_rnn"]
    expected = {**model.get_config(), "stateful": False, "batch_size": None}
    copied = fresh["simple_rnn"].get_config()
    for config in (copied, expected):
        config.pop("name")
    assert copied == expected
    for ours, theirs in zip(
        trained["simple_rnn"].get_weights(), model.get_weights(), strict=True
    ):
        np.testing.assert_array_equal(ours, theirs)


def test_fresh_language_models_start_from_the_seed_in_the_order_given():
    tokens = list("abcdef")
    first = diagnostics.fresh_language_models(tokens, ["gru", "simple_rnn"], 4, 7)
    again = diagnostics.fresh_language_models(tokens, ["gru"], 4, 7)
    assert list(first) == ["gru", "simple_rnn"]
    assert first["gru"].recurrent_layers[0].cell.units == 4
    for ours, theirs in zip(
        first["gru"].get_weights(), again["gru"].get_weights(), strict=True
    ):
        np.testing.assert_array_equal(ours, theirs)
