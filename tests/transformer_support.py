"""Small Transformers with weights large enough that every output depends on its
context: shared by the tests of cached decoding (tests/decoding/) and of the
Transformer language model (tests/recipes/)."""

from __future__ import annotations

import keras
import numpy as np

from rnnkit.models.transformer_encoder_decoder import TransformerEncoderDecoder
from rnnkit.models.transformer_language_model import TransformerLanguageModel

SIZES = dict(model_dim=16, num_heads=4, feedforward_dim=24, dropout=0.0)


def with_larger_weights(model: keras.Model) -> keras.Model:
    """Adds N(0, 0.6) noise to every matrix (not the biases and norms): with the
    initialisers' small weights the next token barely depends on the context."""
    rng = np.random.default_rng(0)
    model.set_weights(
        [
            w + rng.normal(0, 0.6, w.shape).astype(w.dtype) if w.ndim > 1 else w
            for w in model.get_weights()
        ]
    )
    return model


def tiny_transformer(**kwargs) -> TransformerEncoderDecoder:
    """An encoder-decoder over 14 source and 9 target tokens, 2 + 2 blocks."""
    keras.utils.set_random_seed(3)
    model = TransformerEncoderDecoder(
        14, 9, encoder_layers=2, decoder_layers=2, **{**SIZES, **kwargs}
    )
    model.build()
    return with_larger_weights(model)


def tiny_language_model(context_length: int = 8, **kwargs) -> TransformerLanguageModel:
    """A language model over 11 tokens `t0`..`t10`, 2 blocks."""
    keras.utils.set_random_seed(2)
    model = TransformerLanguageModel(
        [f"t{i}" for i in range(11)], num_layers=2, context_length=context_length,
        **{**SIZES, **kwargs},
    )  # fmt: skip
    model.build()
    return with_larger_weights(model)


def search_space_points(recipe, base) -> list[tuple[str, object, object]]:
    """(name, value, config) for every value of every hyperparameter of `recipe`'s
    search space from `base` (the others at their defaults): each value is set in
    `hp.values` before the search space is read, as a tuner's trial sets it."""
    import keras_tuner

    registered = keras_tuner.HyperParameters()
    recipe.search_space(registered, base)
    points = []
    for parameter in registered.space:
        kind = type(parameter).__name__
        if kind == "Choice":
            values = list(parameter.values)
        elif kind == "Int":
            step = parameter.step or 1
            values = list(range(parameter.min_value, parameter.max_value + 1, step))
        else:  # Float: its ends
            values = [parameter.min_value, parameter.max_value]
        for value in values:
            trial = keras_tuner.HyperParameters()
            recipe.search_space(trial, base)
            trial.values[parameter.name] = value
            points.append((parameter.name, value, recipe.search_space(trial, base)))
    return points


def assert_search_space_sets_its_fields(recipe, base) -> set[str]:
    """Every value of every hyperparameter reaches the config field of its name (in
    the model or train section), and every model_dim x num_heads pair divides;
    returns the hyperparameters' names."""
    names = set()
    dims, heads = set(), set()
    for name, value, config in search_space_points(recipe, base):
        section = config.model if hasattr(config.model, name) else config.train
        assert getattr(section, name) == value, (name, value)
        names.add(name)
        dims.add(config.model.model_dim)
        heads.add(config.model.num_heads)
    assert len(dims) > 1 and len(heads) > 1
    assert all(dim % head == 0 for dim in dims for head in heads), (dims, heads)
    return names
