"""The batch in shards: the generic loop run as independent loops over slices of it.

A recurrent step is a few small matmuls and element-wise work. On TensorFlow several
loops over consecutive slices of the batch run at once, one per inter-op thread, and
keep the cores busier than one loop that splits each small operation over all of
them. The results are those of one loop over the whole batch. How many shards pay,
and the measurements behind `MIN_SHARD_ROWS`: docs/performance.md, "One loop per
core: `batch_shards`".
"""

from __future__ import annotations

import os

import keras

from rnnkit._keras_private import get_global_attribute

# With `batch_shards=None`, a shard gets at least this many rows (the smallest
# measured to pay: docs/performance.md).
MIN_SHARD_ROWS = 8


def _inter_op_threads() -> int:
    """The threads TensorFlow runs independent operations on at once: its inter-op
    pool, by default one per core this process may use."""
    import tensorflow as tf

    threads = tf.config.threading.get_inter_op_parallelism_threads()
    if threads > 0:
        return threads
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def _local_replicas() -> int:
    """How many replicas of the `tf.distribute` strategy in scope run on this
    machine (its worker's devices), side by side: 1 without a strategy."""
    import tensorflow as tf

    if not tf.distribute.has_strategy():
        return 1
    try:
        return max(1, len(tf.distribute.get_strategy().extended.worker_devices))
    except (AttributeError, NotImplementedError, RuntimeError, ValueError):
        return 1


def directions(layer) -> int:
    """2 when `layer` is being called as one direction of a
    `keras.layers.Bidirectional` (whose two loops TensorFlow runs side by side),
    else 1.

    Keras records the layer calls in progress: each `Layer.__call__` opens a name
    scope with the layer as its `caller` (`keras.src.backend.common.name_scope`,
    the scopes that give variables their paths). The direction is the layer whose
    enclosing call is a `Bidirectional` that holds it as `forward_layer` or
    `backward_layer`."""
    for scope in get_global_attribute("name_scope_stack") or ():
        owner = getattr(scope, "caller", None)
        if isinstance(owner, keras.layers.Bidirectional) and layer in (
            owner.forward_layer,
            owner.backward_layer,
        ):
            return 2
    return 1


def shards_for(layer, sequences) -> tuple[int, int]:
    """(How many shards of the batch the generic loop runs side by side, each its
    own loop (1: the whole batch in one), and how many copies of this loop run side
    by side without them: the directions of a `Bidirectional` times the replicas of
    a distribution strategy on this machine); see `batch_shards`."""
    if keras.backend.backend() != "tensorflow" or layer.unroll:
        return 1, 1
    import tensorflow as tf

    batch = sequences.shape[0]
    beside = directions(layer) * _local_replicas()
    if layer.batch_shards is not None:
        shards = layer.batch_shards
    else:
        # Only a traced call runs its shards at once (eagerly they run one after
        # the other), only on a CPU (a GPU runs one loop's kernels in parallel
        # already), and only for a batch size known when traced: one loop per
        # thread of TensorFlow's inter-op pool, each of at least MIN_SHARD_ROWS
        # rows. The two directions of a Bidirectional, and the replicas of a
        # strategy over this machine's CPUs, run side by side already: they share
        # the threads.
        if (
            batch is None
            or tf.executing_eagerly()
            or tf.config.list_logical_devices("GPU")
        ):
            return 1, beside
        shards = min(_inter_op_threads() // beside, batch // MIN_SHARD_ROWS)
    if batch is not None:
        shards = min(shards, batch)
    return max(shards, 1), beside


def run_sharded(run, shards, batch_major):
    """`run(sequences, initial_state, mask, input_mask, recurrent_mask)` on `shards`
    consecutive slices of the batch, as independent loops (TensorFlow runs them at
    once, one per inter-op thread), joined again: (last output, outputs, states) as
    for the whole batch. Slices differ in size by at most one row."""
    import tensorflow as tf

    sequences = batch_major[0]
    batch = sequences.shape[0]
    if batch is not None:
        sizes = [batch // shards + (i < batch % shards) for i in range(shards)]
    else:
        batch = tf.shape(sequences)[0]
        sizes = tf.stack([(batch + shards - 1 - i) // shards for i in range(shards)])

    def split(tensor):
        if tensor is None:
            return [None] * shards
        if isinstance(tensor, (list, tuple)):  # the initial states
            return [list(states) for states in zip(*map(split, tensor), strict=True)]
        return tf.split(tensor, sizes, axis=0)

    results = [run(*pieces) for pieces in zip(*map(split, batch_major), strict=True)]
    last, outputs, states = zip(*results, strict=True)
    return (
        tf.concat(last, axis=0),
        tf.concat(outputs, axis=0),
        [tf.concat(state, axis=0) for state in zip(*states, strict=True)],
    )
