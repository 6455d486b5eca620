"""Export mode: the layers trace to operations that LiteRT runs with builtin ops.

Keras' time loop on TensorFlow (`keras.src.backend.tensorflow.rnn`) keeps its inputs
and outputs in `tf.TensorArray`s. The LiteRT converter can lower those to builtin
ops only when every element's shape is static, which a batch of unknown size never
is, so a model of rnnkit's (or Keras') recurrent layers needs Select TF ops, the
whole TensorFlow runtime inside LiteRT. The Bahdanau layer's per-query loop
(`ops.map`, or its XLA-compiled form) has the same problem, and XLA-compiled
functions do not convert at all.

While `export_mode()` is active (`rnnkit.export.convert` enters it while it traces a
model) the layers trace otherwise, and only then:

- the recurrent layers skip the fused kernels, XLA and batch shards, and run
  `rnn` below: a `tf.while_loop` whose loop variables are plain tensors of fixed
  shape, the outputs written into a (time, batch, units) tensor with
  `tf.tensor_scatter_nd_update`. LiteRT runs it with its WHILE op; tf2onnx turns it
  into an ONNX `Loop`. The batch size and the number of steps stay dynamic.
- the Bahdanau layer scores all queries at once, broadcast over (batch, Tq, Tv,
  units), instead of one query at a time.
- the Transformer decoder block writes its key/value cache with a gather and a
  select (`write_positions` below) instead of `ops.slice_update` (XLA's
  DynamicUpdateSlice, which tf2onnx does not convert).

The numbers are those of the normal path (the same step, the same masking rules as
Keras' loop); training and the normal inference path never read the flag except
once per trace.
"""

from __future__ import annotations

import contextlib
import contextvars

_EXPORT_MODE = contextvars.ContextVar("rnnkit_export_mode", default=False)


@contextlib.contextmanager
def export_mode():
    """Within this context, layers traced (first called inside a `tf.function`)
    lower to operations that convert to LiteRT builtins and to ONNX."""
    token = _EXPORT_MODE.set(True)
    try:
        yield
    finally:
        _EXPORT_MODE.reset(token)


def active() -> bool:
    """Whether the layers are being traced for export (`export_mode`)."""
    return _EXPORT_MODE.get()


def rnn(
    step,
    sequences,
    initial_state,
    output_size,
    go_backwards=False,
    mask=None,
    zero_output_for_mask=False,
    return_all_outputs=True,
):
    """Keras' time loop (`keras.src.backend.tensorflow.rnn`, `unroll=False`) for
    export: the same (last output, outputs, states) and masking rules, without
    `tf.TensorArray`.

    `step(x_t, states)` -> (output of `output_size` features, new states);
    `sequences` (batch, time, features); `mask` (batch, time) or None. A masked step
    keeps the states and outputs zeros (`zero_output_for_mask`) or the previous
    output. `go_backwards` reads the sequence from its end and returns the outputs
    in that (reversed) order, as Keras does."""
    import tensorflow as tf

    inputs = tf.transpose(sequences, (1, 0, 2))  # (time, batch, features)
    if mask is not None:
        # int32, and expand_dims rather than [..., None]: LiteRT's STRIDED_SLICE
        # takes neither booleans nor a new axis beside an ellipsis.
        mask = tf.expand_dims(tf.transpose(tf.cast(mask, tf.int32)), -1)
        # (time, batch, 1)
    if go_backwards:
        inputs = tf.reverse(inputs, [0])
        mask = None if mask is None else tf.reverse(mask, [0])
    steps = tf.shape(inputs)[0]
    batch = tf.shape(inputs)[1]
    states = tuple(initial_state)
    zeros = tf.zeros(tf.stack([batch, output_size]), dtype=inputs.dtype)
    # Written step by step; a (1, batch, units) placeholder where only the last
    # output is asked for.
    outputs = tf.zeros(
        tf.stack([steps if return_all_outputs else 1, batch, output_size]),
        dtype=inputs.dtype,
    )  # (time, batch, units)

    def body(time, previous_output, outputs, *states):
        output, new_states = step(inputs[time], list(states))
        output = tf.cast(output, inputs.dtype)
        if mask is not None:
            keep = tf.not_equal(mask[time], 0)  # (batch, 1)
            output = tf.where(
                keep, output, zeros if zero_output_for_mask else previous_output
            )
            new_states = [
                tf.where(keep, new, old)
                for new, old in zip(new_states, states, strict=True)
            ]
        if return_all_outputs:
            outputs = tf.tensor_scatter_nd_update(
                outputs, tf.reshape(time, (1, 1)), tf.expand_dims(output, 0)
            )  # (time, batch, units)
        return (time + 1, output, outputs, *new_states)

    _, last_output, outputs, *states = tf.while_loop(
        lambda time, *_: time < steps,
        body,
        (tf.constant(0, tf.int32), zeros, outputs, *states),
    )
    if not return_all_outputs:
        outputs = tf.expand_dims(last_output, 0)  # (1, batch, units)
    return last_output, tf.transpose(outputs, (1, 0, 2)), list(states)


def bahdanau_scores(projected_query, projected_key, score_vector):
    """e_ij = v_a^T tanh(W_q q_i + W_k k_j + b) for every query-key pair at once:
    (batch, Tq, units), (batch, Tv, units), (units,) -> (batch, Tq, Tv)."""
    from keras import ops

    hidden = ops.tanh(
        ops.expand_dims(projected_query, 2) + ops.expand_dims(projected_key, 1)
    )  # (batch, Tq, Tv, units)
    return ops.matmul(hidden, score_vector)  # (batch, Tq, Tv)


def write_positions(cache, start, updates, axis):
    """`ops.slice_update(cache, start at axis, updates)` as a gather and a select:
    positions start..start+T-1 of `cache` along `axis` take `updates` (T there),
    the others keep theirs. Both converters take it (LiteRT's GATHER and SELECT,
    ONNX's Gather and Where); the values are copied, never computed."""
    from keras import ops

    length = ops.shape(cache)[axis]
    count = ops.shape(updates)[axis]
    positions = ops.arange(length, dtype="int32")  # (L,)
    offsets = positions - ops.cast(start, "int32")  # (L,)
    inside = ops.logical_and(offsets >= 0, offsets < count)  # (L,)
    placed = ops.take(updates, ops.clip(offsets, 0, count - 1), axis=axis)
    shape = [1] * len(cache.shape)
    shape[axis] = -1
    return ops.where(ops.reshape(inside, shape), placed, cache)  # cache's shape
