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
  classifier (its forward direction when bidirectional). The backward direction reads
  the text reversed, which a left-to-right model never learned: it takes the layers of
  a `backward` language model (one trained on reversed text, the language-model
  recipe's `data.reverse`) when one is given, and otherwise keeps its initialisation.

Shapes are checked first: the same `embedding_dim`, cell type and `units`; a mismatch
is a `ValueError` that names both values. `settings_in(tables, {"data.level": "char"})`
reads what a language-model run recorded in its `config.toml` (the tables that
`rnnkit.training.run_dir.read_run_config` returns) without that recipe's config
class, so that a recipe that pre-trains from it imports no other recipe.

Fine-tuning the result as ULMFiT does: `layer_groups(classifier)` lists the layers from
the output down (the output layer, each recurrent layer from the top, the word vectors);
`discriminative_factors(groups, 2.6)` gives each group the learning rate of the group
above divided by 2.6, for `rnnkit.optimizers.LayerwiseAdam`; and the
`GradualUnfreezing(groups)` callback trains only the top group in the first epoch and
one more group in each epoch after.

Reference: Howard & Ruder (2018), "Universal Language Model Fine-tuning for Text
Classification"; Dai & Le (2015), "Semi-supervised Sequence Learning".
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import keras
import numpy as np


@dataclasses.dataclass(frozen=True)
class TransferReport:
    """What was copied: matched vocabulary rows and recurrent layers."""

    matched_tokens: int
    vocabulary_size: int
    layers: int
    backward_layers: int = 0

    def __str__(self) -> str:
        share = self.matched_tokens / max(self.vocabulary_size, 1)
        backward = (
            f", {self.backward_layers} backward layer(s) of the backward model"
            if self.backward_layers
            else ""
        )
        return (
            f"{self.matched_tokens} of {self.vocabulary_size} word vectors "
            f"({share:.0%}) and {self.layers} recurrent layer(s) of the language "
            f"model{backward}"
        )


def initialize_from_language_model(
    classifier: keras.Model,
    language_model: Any,
    lowercase: bool = True,
    backward: Any = None,
) -> TransferReport:
    """Copies the language model's word vectors and recurrent weights into
    `classifier` (see the module docstring); returns what was copied.

    `lowercase` is the classifier's `TextStandardizer` setting (default `True`).
    `backward`: a language model trained on reversed text, whose recurrent layers go
    to the backward directions of a bidirectional classifier (the word vectors stay
    the forward model's).
    """
    import tensorflow as tf

    from rnnkit.models.text_standardizer import TextStandardizer

    for model, what in (
        (language_model, "language model"),
        (backward, "backward language model"),
    ):
        if getattr(model, "block", "none") != "none":
            raise ValueError(
                f"the {what} is built of {model.block} blocks, whose weights "
                "have no place in the classifier's recurrent layers; pre-train with "
                "model.block=none"
            )
    embedding = classifier.get_layer("embedding")
    vectorizer = classifier.get_layer("vectorizer")
    classifier_dim = int(embedding.embeddings.shape[1])
    if classifier_dim != language_model.embedding_dim:
        raise ValueError(
            f"the language model's embedding_dim is {language_model.embedding_dim}, "
            f"the classifier's {classifier_dim}; set them equal"
        )
    recurrent = _recurrent_layers(classifier)
    _check_layers(recurrent, language_model, "language model")
    backward_layers = []
    if backward is not None:
        backward_layers = _recurrent_layers(classifier, backward=True)
        if not backward_layers:
            raise ValueError(
                "a backward language model was given, but the classifier reads one "
                "direction only; set model.bidirectional=true or give no backward "
                "model"
            )
        _check_layers(backward_layers, backward, "backward language model")

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
    copied = _copy_layers(recurrent, language_model)
    copied_backward = 0
    if backward is not None:
        copied_backward = _copy_layers(backward_layers, backward)
    return TransferReport(int(filled.sum()), len(vocabulary), copied, copied_backward)


def _check_layers(layers: list[Any], language_model: Any, what: str) -> None:
    """A ValueError naming both sides when a layer's cell type or units differ."""
    for index, layer in enumerate(layers[: language_model.num_layers]):
        cell = layer.cell
        source = language_model.recurrent_layers[index].cell
        if type(cell) is not type(source) or cell.units != source.units:
            raise ValueError(
                f"recurrent layer {index + 1}: the {what} has "
                f"{language_model.cell_type} with {source.units} units, the "
                f"classifier {type(cell).__name__} with {cell.units}; set the same "
                "cell type and units"
            )


def _copy_layers(layers: list[Any], language_model: Any) -> int:
    """Layer k of `language_model` into `layers[k]`; returns how many were copied."""
    copied = 0
    for index, layer in enumerate(layers[: language_model.num_layers]):
        layer.set_weights(language_model.recurrent_layers[index].get_weights())
        copied += 1
    return copied


def settings_in(tables: dict[str, Any], defaults: dict[str, Any]) -> dict[str, Any]:
    """Each dotted key of `defaults` mapped to its value in the TOML `tables` of a
    config file, or to its default where they hold none."""
    values = {}
    for key, default in defaults.items():
        table: Any = tables
        for part in key.split("."):
            if not isinstance(table, dict) or part not in table:
                table = default
                break
            table = table[part]
        values[key] = table
    return values


def _recurrent_layers(classifier: keras.Model, backward: bool = False) -> list[Any]:
    """The classifier's recurrent layers in order: their forward directions, or with
    `backward` the backward directions of its bidirectional layers."""
    layers = []
    for layer in classifier.layers:
        if isinstance(layer, keras.layers.Bidirectional):
            layers.append(layer.backward_layer if backward else layer.forward_layer)
        elif isinstance(layer, keras.layers.RNN) and not backward:
            layers.append(layer)
    return layers


def layer_groups(classifier: keras.Model) -> list[list[keras.layers.Layer]]:
    """The classifier's layers with weights, in groups from the output down.

    Group 0 holds the layers above the last recurrent layer (the output layer), then
    one group per recurrent layer from the top (a `Bidirectional` wrapper with both its
    directions), and last the word vectors.
    """
    weighted = [layer for layer in classifier.layers if layer.weights]
    recurrent = [
        index
        for index, layer in enumerate(weighted)
        if isinstance(layer, keras.layers.Bidirectional | keras.layers.RNN)
    ]
    if not recurrent:
        raise ValueError("the model has no recurrent layer to group by")
    first, last = recurrent[0], recurrent[-1]
    groups = [weighted[last + 1 :]] if weighted[last + 1 :] else []
    groups += [[weighted[index]] for index in reversed(recurrent)]
    if weighted[:first]:
        groups.append(weighted[:first])
    return groups


def discriminative_factors(
    groups: Sequence[Sequence[keras.layers.Layer]], divisor: float
) -> dict[str, float]:
    """Layer path -> learning-rate factor `divisor ** -k` for group k (0 = output).

    ULMFiT uses `divisor = 2.6`; for `rnnkit.optimizers.LayerwiseAdam(factors=...)`.
    """
    if divisor < 1:
        raise ValueError(f"divisor is {divisor}; it must be >= 1")
    return {
        layer.path: float(divisor) ** -depth
        for depth, group in enumerate(groups)
        for layer in group
    }


class GradualUnfreezing(keras.callbacks.Callback):
    """Trains the top layer group in epoch 1 and one more group in each later epoch.

    `groups` are lists of layers, output first, as `layer_groups` gives them (the
    default: `layer_groups(model)` of the model being trained). At the start of epoch e
    (from 1)
    the top e groups are trainable and the others frozen; the training step is traced
    again for the new set of variables. When training ends every group is trainable
    again. The optimizer is built on all the groups' variables before the first epoch,
    so layers that join later keep one optimizer (use `LayerwiseAdam`, whose step count
    per variable gives a joining layer the first steps of a fresh Adam).
    """

    def __init__(
        self, groups: Sequence[Sequence[keras.layers.Layer]] | None = None
    ) -> None:
        super().__init__()
        if groups is not None and not groups:
            raise ValueError("GradualUnfreezing needs at least one layer group")
        self._given = None if groups is None else [list(group) for group in groups]
        self.groups: list[list[keras.layers.Layer]] = self._given or []

    def on_train_begin(self, logs=None) -> None:
        if self._given is None:
            self.groups = layer_groups(self.model)
        for group in self.groups:
            for layer in group:
                layer.trainable = True
        optimizer = self.model.optimizer
        if not optimizer.built:
            optimizer.build(self.model.trainable_variables)

    def on_epoch_begin(self, epoch: int, logs=None) -> None:
        import logging

        trained = min(epoch + 1, len(self.groups))
        for depth, group in enumerate(self.groups):
            for layer in group:
                layer.trainable = depth < trained
        self.model.make_train_function(force=True)
        names = [layer.name for group in self.groups[:trained] for layer in group]
        logging.getLogger("rnnkit").info(
            "gradual unfreezing, epoch %d: training %s", epoch + 1, ", ".join(names)
        )

    def on_train_end(self, logs=None) -> None:
        for group in self.groups:
            for layer in group:
                layer.trainable = True
