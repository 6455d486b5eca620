"""The training split as `fit` takes it (`training_set`), and the variables `fit`
would otherwise create in its first trace, made from the split's spec before it
(`build_before_tracing`)."""

from __future__ import annotations

import logging
from typing import Any

from rnnkit.errors import DataError
from rnnkit.recipe import RecipeConfig

log = logging.getLogger("rnnkit")


def training_set(train: Any, config: RecipeConfig) -> Any:
    """The training split as `fit` takes it: a `tf.data.Dataset` unchanged; a tuple
    `(x, y[, sample_weight])` of arrays (or dicts / tuples of them) as batches of
    `train.batch_size`, in a new order each epoch when `train.shuffle` (the orders
    drawn from `train.seed`).

    Keras's own shuffling of arrays draws one order for every epoch once a global
    seed is set (it re-creates its `tf.random.shuffle` with each epoch's iterator,
    Keras 3.15 on TensorFlow), so a seeded run saw the same batches every epoch.
    The order is drawn as `tf.data` reshuffles it, which the resume callback moves on
    with the epochs (the shuffle fills its buffer one index at a time: about a second
    an epoch per million examples). As in Keras, lists are tuples, whole batches are
    gathered at once, the arrays ride in the pipeline's elements (not as graph
    constants, which stop at 2 GB), and floating-point arrays become Keras's float
    type."""
    if not isinstance(train, tuple):
        return train
    import keras
    import tensorflow as tf

    parts = list(keras.tree.lists_to_tuples(train))
    while parts and parts[-1] is None:  # (x, y, None): no sample weights
        parts.pop()

    def tensor(array: Any) -> Any:
        value = tf.convert_to_tensor(array)
        if value.dtype.is_floating:
            value = tf.cast(value, keras.backend.floatx())
        return value

    try:
        tensors = tf.nest.map_structure(tensor, tuple(parts))
    except (TypeError, ValueError) as error:
        raise DataError(
            f"the training split is not arrays that can be batched ({error}): give "
            "(inputs, targets) as numpy arrays, or dicts or tuples of them"
        ) from None
    leaves = tf.nest.flatten(tensors)
    counts = {int(leaf.shape[0]) if leaf.shape.rank else 0 for leaf in leaves}
    if len(counts) != 1:
        raise DataError(
            f"the training split's arrays hold different numbers of examples "
            f"({', '.join(map(str, sorted(counts)))}): give inputs and targets one "
            "row per example"
        )
    (count,) = counts
    if count == 0:
        raise DataError(
            "the training split holds no examples: check the data source and the "
            "split fractions"
        )
    indices = tf.data.Dataset.range(count)
    if config.train.shuffle:
        indices = indices.shuffle(
            count, seed=config.train.seed, reshuffle_each_iteration=True
        )
    whole = tf.data.Dataset.from_tensors(tensors)

    def gather(batch: Any, tensors: Any) -> Any:
        return tf.nest.map_structure(lambda t: tf.gather(t, batch), tensors)

    return (
        tf.data.Dataset.zip(indices.batch(config.train.batch_size), whole.repeat())
        .map(gather, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
        .prefetch(tf.data.AUTOTUNE)
    )


def symbolic_batch(split: Any) -> Any:
    """A batch of `split` (a `tf.data.Dataset`) as KerasTensors of its element spec,
    for building a model's variables without drawing data; None when the split has
    no element spec or a part of it is not a tensor of known rank (a `py_function`
    without shapes, a None part)."""
    import keras
    import tensorflow as tf

    spec = getattr(split, "element_spec", None)
    if spec is None or not all(
        type(part) is tf.TensorSpec and part.shape.rank is not None
        for part in keras.tree.flatten(spec)
    ):
        return None
    return keras.tree.map_structure(
        lambda part: keras.KerasTensor(part.shape, part.dtype.name), spec
    )


def build_before_tracing(model: Any, train: Any) -> None:
    """Creates the optimizer's and the compiled metrics' and loss's variables from
    the training set's element spec (symbolic: no batch is drawn), before `fit`
    traces its train step.

    Keras does this itself only under a distribution strategy; otherwise the
    variables are created inside the first trace, and TensorFlow then traces the
    step again, since a `tf.function` whose first trace created variables is traced
    anew without them: every run paid a second trace of its training step before
    its first step (docs/performance.md gives what it cost).

    Left to Keras's first trace, as before: other backends; a Keras without the
    private method; a training split whose elements are not all tensors of known
    rank (a `py_function` without shapes, a None part); a model with a frozen layer
    that has weights, whose optimizer must wait for what a callback unfreezes when
    training begins (GradualUnfreezing, rnnkit/models/transfer.py); and a model
    whose symbolic call fails, after which the dropout masks its recurrent cells
    cached in that call are dropped.
    """
    import keras

    from rnnkit._keras_private import nested_layers, symbolic_build

    build = symbolic_build(model)
    if (
        keras.backend.backend() != "tensorflow"
        or build is None
        or not getattr(model, "compiled", False)
    ):
        return
    batch = symbolic_batch(train)
    if batch is None:
        return
    layers = nested_layers(model)
    if any(not layer.trainable and layer.weights for layer in layers):
        return
    try:
        with model.distribute_strategy.scope():
            build(data_batch=batch)
    except Exception as error:  # Keras builds them in the first trace instead
        log.debug("variables left to fit's first trace: %s", error)
        # Keras's RNN caches its cell's dropout masks during a call and clears
        # them at its end, which a failed call does not reach.
        for layer in layers:
            for reset in ("reset_dropout_mask", "reset_recurrent_dropout_mask"):
                getattr(layer, reset, lambda: None)()
