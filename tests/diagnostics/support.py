"""A tiny language model for the diagnostics tests."""

import keras

from rnnkit.models.language_model import LanguageModel


def tiny_model():
    keras.utils.set_random_seed(6)
    model = LanguageModel(list("abcdef"), "simple_rnn", 4, 6, num_layers=1)
    model.build()
    return model
