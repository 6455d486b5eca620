"""The text standardization of the sequence classifier, shared by every text model.

`TextStandardizer` is the `standardize` callable of the classifier's
`TextVectorization`; the language-model recipe cleans its corpus with it too, so that
a language model pre-trained on reviews reads the words the classifier reads. It is
importable from `rnnkit.models.sequence_classifier` as well, and keeps its registered
Keras name (`rnnkit>TextStandardizer`) that saved classifiers reference.
"""

from __future__ import annotations

import keras
import tensorflow as tf

from rnnkit.data.text import HTML_TAG_PATTERN

# Punctuation is replaced by a space (apostrophes are dropped: "don't" -> "dont").
_APOSTROPHES = r"['\x{2019}]"
_PUNCTUATION = r"[!\"#$%&()*+,\-./:;<=>?@\[\\\]^_`{|}~\x{2013}\x{2014}\x{201C}\x{201D}]"


@keras.saving.register_keras_serializable(package="rnnkit")
class TextStandardizer:
    """The `standardize` callable of the classifier's `TextVectorization`.

    Replaces HTML tags (`<br />`) and punctuation with spaces, drops apostrophes and,
    with `lowercase=True`, lower-cases Unicode text. It works on string tensors with
    `tf.strings` ops (rnnkit depends on TensorFlow for its text pipeline on every
    backend), and is registered so that a saved model reloads in safe mode.

    Args:
        lowercase: lower-case the text before building or looking up tokens.
            Defaults to `True`.

    Example:
    >>> TextStandardizer()(tf.constant(["Great film!<br />Loved it."])).numpy()
    array([b'great film  loved it '], dtype=object)
    """

    def __init__(self, lowercase: bool = True):
        if not isinstance(lowercase, bool):
            raise ValueError(
                "Argument `lowercase` must be a bool, received "
                f"lowercase={lowercase!r}."
            )
        self.lowercase = lowercase

    def __call__(self, texts):
        texts = tf.strings.regex_replace(texts, HTML_TAG_PATTERN, " ")
        if self.lowercase:
            texts = tf.strings.lower(texts, encoding="utf-8")
        texts = tf.strings.regex_replace(texts, _APOSTROPHES, "")
        return tf.strings.regex_replace(texts, _PUNCTUATION, " ")

    def get_config(self) -> dict:
        return {"lowercase": self.lowercase}

    @classmethod
    def from_config(cls, config: dict) -> TextStandardizer:
        return cls(**config)
