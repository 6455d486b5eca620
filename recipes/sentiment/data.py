"""Data of the sentiment recipe: labelled texts as length-bucketed `tf.data` pipelines.

Loading, cleanup, label mapping and splitting are in `rnnkit.data.text`; this module
turns the splits into batches. Reviews vary from ten words to two thousand, and the
model pads each batch only to its longest review, so batching reviews of similar length
together (`tf.data.Dataset.bucket_by_sequence_length`) cuts the recurrent steps per
epoch roughly in half on IMDB compared with padding everything to
`data.sequence_length`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from rnnkit.data.text import TextClassificationData, TextSplit, load_text_classification
from rnnkit.recipe import RecipeData

if TYPE_CHECKING:
    import tensorflow as tf
    from rnnkit_recipes.sentiment.config import SentimentConfig

# Binary 0/1 labels in sentiment data sets mean negative/positive (IMDB, SST-2, Yelp).
_BINARY_SENTIMENT = ("negative", "positive")


@dataclasses.dataclass
class SentimentData(RecipeData):
    """Batched train / validation / test datasets of (text, label), plus the texts."""

    text: TextClassificationData


def load(config: SentimentConfig) -> SentimentData:
    """Reads the source the config names and batches its splits."""
    data_config = config.data
    class_names = data_config.class_names
    text = load_text_classification(
        data_config.path,
        data_config.test_path,
        text_column=data_config.text_column,
        label_column=data_config.label_column,
        class_names=class_names,
        encoding=data_config.encoding,
        validation_fraction=data_config.validation_fraction,
        test_fraction=data_config.test_fraction,
        limit=data_config.limit,
        seed=config.train.seed,
        split_seed=data_config.split_seed,
    )
    if not class_names and text.class_names == ("0", "1"):
        text = dataclasses.replace(
            text,
            class_names=_BINARY_SENTIMENT,
            notes=(*text.notes, "labels 0/1 read as negative/positive"),
        )
    batching = dict(
        batch_size=config.train.batch_size, sequence_length=data_config.sequence_length
    )
    return SentimentData(
        train=text_dataset(
            text.train,
            text.num_classes,
            shuffle=config.train.shuffle,
            seed=config.train.seed,
            bucket=data_config.bucket,
            **batching,
        ),
        validation=text_dataset(text.validation, text.num_classes, **batching),
        test=text_dataset(text.test, text.num_classes, **batching),
        text=text,
    )


def in_class_order(data: SentimentData, class_names: Sequence[str]) -> SentimentData:
    """`data` with its labels numbered as `class_names` (a trained model's) number them.

    The classes a run was trained with, in their order, come from the model: today's
    data settings may name or order them otherwise (`data.class_names`, a class that
    is missing). Labels are matched by name, ignoring case; a class the model does not
    know raises `DataError`. Returns `data` itself when the order already agrees.
    """
    from rnnkit.errors import DataError

    names = tuple(str(name) for name in class_names)
    text = data.text
    if text.class_names == names:
        return data
    position = {name.lower(): index for index, name in enumerate(names)}
    unknown = [name for name in text.class_names if name.lower() not in position]
    if unknown:
        raise DataError(
            f"{text.source}: class(es) {unknown} are not among the run's classes "
            f"{list(names)}; name this data's labels as the run did (data.class_names)"
        )
    renumber = np.array([position[name.lower()] for name in text.class_names])

    def renumbered(split: TextSplit) -> TextSplit:
        return TextSplit(split.texts, renumber[split.labels])

    return dataclasses.replace(
        data,
        text=dataclasses.replace(
            text,
            train=renumbered(text.train),
            validation=renumbered(text.validation),
            test=renumbered(text.test),
            class_names=names,
        ),
        # The batched splits keep today's numbering: evaluation reads `text`.
        train=None,
        validation=None,
        test=None,
    )


def word_counts(texts: np.ndarray) -> np.ndarray:
    """Whitespace-separated words per text: a cheap stand-in for the token count."""
    return np.fromiter((len(text.split()) for text in texts), "int32", len(texts))


def length_order(texts: np.ndarray) -> np.ndarray:
    """Indices that sort texts by length (stable), for padding-efficient inference."""
    return np.argsort(word_counts(texts), kind="stable")


def targets(labels: np.ndarray, num_classes: int) -> np.ndarray:
    """Labels as the loss expects them: float (n, 1) for two classes, int (n,) else."""
    if num_classes == 2:
        return labels.astype("float32").reshape(-1, 1)
    return labels.astype("int64")


def text_dataset(
    split: TextSplit,
    num_classes: int,
    batch_size: int,
    sequence_length: int,
    *,
    shuffle: bool = False,
    seed: int = 0,
    bucket: bool = True,
) -> tf.data.Dataset:
    """Batches of (texts (batch,), labels) from a split.

    Training (`shuffle=True`): shuffled every epoch (seeded) and, with `bucket`,
    grouped into batches of similar length (boundaries every eighth of
    `sequence_length`; longer texts share the last bucket). Evaluation: sorted by
    length, in a fixed order.
    """
    import tensorflow as tf

    from rnnkit.data.buckets import bucket_by_length

    lengths = word_counts(split.texts)
    texts, labels = split.texts.astype(str), targets(split.labels, num_classes)
    if not shuffle:
        order = np.argsort(lengths, kind="stable")
        dataset = tf.data.Dataset.from_tensor_slices((texts[order], labels[order]))
        return dataset.batch(batch_size).prefetch(tf.data.AUTOTUNE)
    dataset = tf.data.Dataset.from_tensor_slices((texts, labels, lengths)).shuffle(
        len(texts), seed=seed, reshuffle_each_iteration=True
    )
    if bucket:
        step = max(1, sequence_length // 8)
        dataset = bucket_by_length(
            dataset,
            lambda text, label, length: length,
            lengths,
            boundaries=range(step, sequence_length + 1, step),
            batch_size=batch_size,
        )
    else:
        dataset = dataset.batch(batch_size)
    return dataset.map(lambda text, label, length: (text, label)).prefetch(
        tf.data.AUTOTUNE
    )
