"""rnnkit.models.text_standardizer: the text cleaning every text model shares."""

from __future__ import annotations

import keras
import tensorflow as tf

from rnnkit.models import sequence_classifier
from rnnkit.models.text_standardizer import TextStandardizer


def test_standardizer_strips_html_punctuation_and_case():
    standardize = TextStandardizer()
    out = standardize(tf.constant(["Great FILM!<br />Don't miss it. \u00c9T\u00c9"]))
    assert out.numpy()[0].decode("utf-8").split() == [
        "great", "film", "dont", "miss", "it", "\u00e9t\u00e9"
    ]  # fmt: skip
    kept = TextStandardizer(lowercase=False)(tf.constant(["Great FILM"]))
    assert kept.numpy()[0].decode("utf-8") == "Great FILM"


def test_importable_from_the_classifier_under_its_registered_name():
    assert sequence_classifier.TextStandardizer is TextStandardizer
    registered = keras.saving.get_registered_name(TextStandardizer)
    assert registered == "rnnkit>TextStandardizer"
