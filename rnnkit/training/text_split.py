"""A model that reads raw strings, cut in two to train under `MirroredStrategy`.

TensorFlow cannot hand string tensors to the replicas of one process
(tensorflow/tensorflow#80951), so `split_text_model` runs the model's first layer (the
sentiment classifier's `TextVectorization`) in the input pipeline and trains the rest
on the replicas, sharing the whole model's layers: what is saved is the whole model,
which still reads raw text.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import TYPE_CHECKING, Any

from rnnkit.errors import ConfigError
from rnnkit.training.strategies import is_multiworker

if TYPE_CHECKING:
    import keras

log = logging.getLogger("rnnkit")


@dataclasses.dataclass(frozen=True)
class TextModelSplit:
    """A text model cut in two for `MirroredStrategy`: the layer that turns strings
    into numbers (run in the input pipeline, on the host) and the rest of the model
    (trained on the replicas). Both share their layers with the whole model, so
    training `model` trains the whole one, which is what is saved."""

    preprocessing: keras.layers.Layer
    model: keras.Model

    def dataset(self, split: Any) -> Any:
        """`split` (a batched dataset of `(texts, targets[, weights])`, or a tuple of
        arrays) with the texts turned into numbers; None stays None."""
        import tensorflow as tf

        if split is None:
            return None
        if not isinstance(split, tf.data.Dataset):
            return (self._numbers(split[0]), *split[1:])
        layer = self.preprocessing

        def numbers(inputs: Any, *rest: Any) -> tuple[Any, ...]:
            return (layer(inputs), *rest)

        return split.map(numbers, num_parallel_calls=tf.data.AUTOTUNE)

    def _numbers(self, texts: Any) -> Any:
        import keras

        return keras.ops.convert_to_numpy(self.preprocessing(texts))


def split_text_model(model: keras.Model, strategy: Any) -> TextModelSplit | None:
    """For a model that reads strings, on several replicas of one process
    (`MirroredStrategy`): the model cut after its string-reading layer, compiled as
    `model` is; `None` when no cut is needed (one replica, multi-worker, numbers in).

    TensorFlow cannot hand string tensors to the replicas of one process
    (tensorflow/tensorflow#80951: Keras `fit` fails on a `TextVectorization` inside
    the model), so the strings become token ids in the input pipeline instead, the
    usual place for preprocessing under a distribution strategy. A model whose strings
    are read by more than one layer (or by a layer that is not its first) cannot be
    cut: a `ConfigError` names `--strategy one` and `multiworker`.
    """
    if (
        strategy is None
        or strategy.num_replicas_in_sync < 2
        or is_multiworker(strategy)
    ):
        return None
    inputs = getattr(model, "inputs", None) or []
    texts = [t for t in inputs if str(getattr(t, "dtype", "")) == "string"]
    if not texts:
        return None
    readers = [
        layer
        for layer in model.layers
        if type(layer).__name__ != "InputLayer"
        and any(t is texts[0] for t in _inputs_of(layer))
    ]
    if (
        len(inputs) != 1
        or len(readers) != 1
        or readers[0].weights
        or str(getattr(readers[0].output, "dtype", "")) == "string"
    ):
        raise ConfigError(
            "this recipe's model reads text in a way that cannot be moved into the "
            "input pipeline, and TensorFlow cannot mirror string inputs over several "
            "devices of one process (tensorflow/tensorflow#80951); use --strategy "
            "one, or --strategy multiworker with one process per device"
        )
    import keras

    preprocessing = readers[0]
    with strategy.scope():
        core = keras.Model(
            preprocessing.output, model.outputs, name=f"{model.name}_core"
        )
        # The same optimizer object: its state is the whole model's when it is saved.
        settings = keras.saving.deserialize_keras_object(model.get_compile_config())
        settings["optimizer"] = model.optimizer
        core.compile(**settings)
    log.info(
        "mirrored text model: %s runs in the input pipeline, the rest on the replicas",
        preprocessing.name,
    )
    return TextModelSplit(preprocessing, core)


def _inputs_of(layer: keras.layers.Layer) -> list[Any]:
    try:
        value = layer.input
    except (AttributeError, ValueError):
        return []
    return list(value) if isinstance(value, list | tuple) else [value]
