"""Language-model pre-training for the sequence classifier (ULMFiT-style transfer).

`initialize_from_language_model(classifier, language_model)` copies what a word-level
`LanguageModel` learned into a classifier built by `build_sequence_classifier`:

- the word vectors, row by row, matched by token: each language-model token is
  standardized as the classifier's `TextVectorization` standardizes text (lower case,
  no HTML, punctuation and apostrophes), and a token that becomes exactly one
  classifier token gives that token its vector (the most frequent one wins when several
  do, e.g. "film" and "film,"). Classifier tokens without a match keep their
  initialisation;
- the recurrent layers, in order: layer k of the language model into layer k of the
  classifier (its forward direction when bidirectional; the backward direction reads
  the text reversed, which a left-to-right model never learned, so it keeps its
  initialisation).

Shapes are checked first: the same `embedding_dim`, cell type and `units`; a mismatch
is a `ValueError` that names both values.

Reference: Howard & Ruder (2018), "Universal Language Model Fine-tuning for Text
Classification"; Dai & Le (2015), "Semi-supervised Sequence Learning".
"""

from __future__ import annotations

import dataclasses
from typing import Any

import keras
import numpy as np


@dataclasses.dataclass(frozen=True)
class TransferReport:
    """What was copied: matched vocabulary rows and recurrent layers."""

    matched_tokens: int
    vocabulary_size: int
    layers: int

    def __str__(self) -> str:
        share = self.matched_tokens / max(self.vocabulary_size, 1)
        return (
            f"{self.matched_tokens} of {self.vocabulary_size} word vectors "
            f"({share:.0%}) and {self.layers} recurrent layer(s) of the language "
            "model"
        )


def initialize_from_language_model(
    classifier: keras.Model, language_model: Any, lowercase: bool = True
) -> TransferReport:
    """Copies the language model's word vectors and recurrent weights into
    `classifier` (see the module docstring); returns what was copied.

    `lowercase` is the classifier's `TextStandardizer` setting (default `True`).
    """
    import tensorflow as tf

    from rnnkit.models.sequence_classifier import TextStandardizer

    embedding = classifier.get_layer("embedding")
    vectorizer = classifier.get_layer("vectorizer")
    classifier_dim = int(embedding.embeddings.shape[1])
    if classifier_dim != language_model.embedding_dim:
        raise ValueError(
            f"the language model's embedding_dim is {language_model.embedding_dim}, "
            f"the classifier's {classifier_dim}; set them equal"
        )
    recurrent = _recurrent_layers(classifier)
    for index, layer in enumerate(recurrent[: language_model.num_layers]):
        cell = layer.cell
        source = language_model.recurrent_layers[index].cell
        if type(cell) is not type(source) or cell.units != source.units:
            raise ValueError(
                f"recurrent layer {index + 1}: the language model has "
                f"{language_model.cell_type} with {source.units} units, the "
                f"classifier {type(cell).__name__} with {cell.units}; set the same "
                "cell type and units"
            )

    vocabulary = vectorizer.get_vocabulary()
    position = {token: i for i, token in enumerate(vocabulary)}
    standardize = TextStandardizer(lowercase=lowercase)
    standardized = standardize(tf.constant(list(language_model.tokens)))
    vectors = keras.ops.convert_to_numpy(language_model.embedding.embeddings)
    rows = keras.ops.convert_to_numpy(embedding.embeddings).copy()
    filled = np.zeros(len(vocabulary), bool)
    # Language-model tokens are ordered by falling frequency: the first match wins.
    for lm_index, text in enumerate(standardized.numpy()):
        parts = text.decode("utf-8").split()
        if len(parts) != 1 or parts[0] not in position:
            continue
        row = position[parts[0]]
        if row > 1 and not filled[row]:  # never padding (0) or [UNK] (1)
            rows[row] = vectors[lm_index]
            filled[row] = True
    embedding.embeddings.assign(rows)
    copied = 0
    for index, layer in enumerate(recurrent[: language_model.num_layers]):
        layer.set_weights(language_model.recurrent_layers[index].get_weights())
        copied += 1
    return TransferReport(int(filled.sum()), len(vocabulary), copied)


def _recurrent_layers(classifier: keras.Model) -> list[Any]:
    """The classifier's recurrent layers in order (forward directions)."""
    layers = []
    for layer in classifier.layers:
        if isinstance(layer, keras.layers.Bidirectional):
            layers.append(layer.forward_layer)
        elif isinstance(layer, keras.layers.RNN):
            layers.append(layer)
    return layers
