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
  `rnn` below: a `tf.while_loop` that LiteRT runs with its WHILE op and tf2onnx
  turns into an ONNX `Loop`, in the form each converter runs in time linear (or
  nearly) in the sequence length, chosen by `export_mode(format)`: for LiteRT,
  blocks of steps whose outputs are written in place (`_blocked_loop`); for
  ONNX, a `tf.TensorArray` (`_tensor_array_loop`); for both at once, one loop
  over plain tensors with a scatter per step (`_scatter_loop`, time^2). The batch
  size and the number of steps stay dynamic.
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

# None outside `export_mode`, else the format traced for.
_EXPORT_MODE = contextvars.ContextVar("rnnkit_export_mode", default=None)
FORMATS = ("any", "tflite", "onnx")


@contextlib.contextmanager
def export_mode(format: str = "any"):
    """Within this context, layers traced (first called inside a `tf.function`)
    lower to operations that convert to LiteRT builtins and to ONNX.

    `format`: `"any"` traces a graph that converts to both; `"tflite"` one that
    converts to LiteRT only, with a loop linear in the sequence length (each step's
    output written in place with `DYNAMIC_UPDATE_SLICE`, which tf2onnx lacks);
    `"onnx"` the same as `"any"`."""
    if format not in FORMATS:
        raise ValueError(
            f"Argument `format` must be one of {FORMATS}, received format={format!r}."
        )
    token = _EXPORT_MODE.set(format)
    try:
        yield
    finally:
        _EXPORT_MODE.reset(token)


def active() -> bool:
    """Whether the layers are being traced for export (`export_mode`)."""
    return _EXPORT_MODE.get() is not None


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
    export: the same (last output, outputs, states) and masking rules, in the
    loop of the format `export_mode` traces for.

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
    batch = tf.shape(inputs)[1]
    zeros = tf.zeros(tf.stack([batch, output_size]), dtype=inputs.dtype)

    def masked_step(x_t, keep_t, previous_output, states):
        """One step; where `keep_t` (batch, 1) is 0 the states stay and the
        output is zeros or the previous output."""
        output, new_states = step(x_t, list(states))
        output = tf.cast(output, inputs.dtype)
        if keep_t is None:
            return output, tuple(new_states)
        keep = tf.not_equal(keep_t, 0)  # (batch, 1)
        output = tf.where(
            keep, output, zeros if zero_output_for_mask else previous_output
        )
        new_states = tuple(
            tf.where(keep, new, old)
            for new, old in zip(new_states, states, strict=True)
        )
        return output, new_states

    loop = {"tflite": _blocked_loop, "onnx": _tensor_array_loop}.get(
        _EXPORT_MODE.get(), _scatter_loop
    )
    last_output, outputs, states = loop(
        masked_step, inputs, mask, zeros, tuple(initial_state), return_all_outputs
    )
    if not return_all_outputs:
        outputs = tf.expand_dims(last_output, 0)  # (1, batch, units)
    return last_output, tf.transpose(outputs, (1, 0, 2)), list(states)


def _steps(masked_step, inputs, mask, previous_output, states, outputs, write):
    """Runs `masked_step` over every step of `inputs` (time, batch, features), from
    `previous_output` and `states`; `write(outputs, time, output)` stores each
    output (None: nothing is stored). -> (last output, outputs, states)."""
    import tensorflow as tf

    def body(time, previous_output, outputs, *states):
        keep_t = None if mask is None else mask[time]
        output, new_states = masked_step(inputs[time], keep_t, previous_output, states)
        if write is not None:
            outputs = write(outputs, time, output)  # (time, batch, units)
        return (time + 1, output, outputs, *new_states)

    steps = tf.shape(inputs)[0]
    _, last_output, outputs, *states = tf.while_loop(
        lambda time, *_: time < steps,
        body,
        (tf.constant(0, tf.int32), previous_output, outputs, *states),
    )
    return last_output, outputs, tuple(states)


def _scatter_loop(masked_step, inputs, mask, zeros, states, return_all_outputs):
    """One loop, each output scattered into a (time, batch, units) tensor: converts
    to LiteRT and ONNX alike, but both copy that tensor at every step."""
    import tensorflow as tf

    shape = tf.shape(inputs)
    outputs = tf.zeros(
        tf.stack([shape[0] if return_all_outputs else 1, shape[1], tf.shape(zeros)[1]]),
        dtype=inputs.dtype,
    )  # (time, batch, units); a placeholder where only the last output is asked
    write = _write_scatter if return_all_outputs else None
    return _steps(masked_step, inputs, mask, zeros, states, outputs, write)


def _blocked_loop(masked_step, inputs, mask, zeros, states, return_all_outputs):
    """For LiteRT: a loop over blocks of about sqrt(time) steps around a loop over
    the steps of one block.

    LiteRT's WHILE copies every loop variable at every iteration, and a tensor that
    the body reads (the inputs) is a loop variable too: one loop over the steps
    copies the whole sequence and the whole output tensor at each step, time^2 in
    all. Here the outer loop copies them once per block and the inner loop copies
    one block per step: time^1.5. Each output goes into its block, and each block
    into the outputs, with `XlaDynamicUpdateSlice` (LiteRT's DYNAMIC_UPDATE_SLICE),
    which copies only the part written."""
    import tensorflow as tf

    shape = tf.shape(inputs)
    steps, batch, units = shape[0], shape[1], tf.shape(zeros)[1]
    block = tf.maximum(
        tf.cast(tf.math.ceil(tf.sqrt(tf.cast(steps, tf.float32))), tf.int32), 1
    )
    outputs = tf.zeros(
        tf.stack([steps if return_all_outputs else 1, batch, units]), inputs.dtype
    )  # (time, batch, units); a placeholder where only the last output is asked

    def body(start, previous_output, outputs, *states):
        end = tf.minimum(start + block, steps)
        block_mask = None if mask is None else mask[start:end]  # (block, batch, 1)
        block_outputs = tf.zeros(
            tf.stack([end - start if return_all_outputs else 1, batch, units]),
            inputs.dtype,
        )  # (block, batch, units)
        last_output, block_outputs, states = _steps(
            masked_step,
            inputs[start:end],  # (block, batch, features)
            block_mask,
            previous_output,
            states,
            block_outputs,
            _write_in_place if return_all_outputs else None,
        )
        if return_all_outputs:
            outputs = _write_in_place(outputs, start, block_outputs, block=True)
        return (end, last_output, outputs, *states)

    _, last_output, outputs, *states = tf.while_loop(
        lambda start, *_: start < steps,
        body,
        (tf.constant(0, tf.int32), zeros, outputs, *states),
    )
    return last_output, outputs, tuple(states)


def _tensor_array_loop(masked_step, inputs, mask, zeros, states, return_all_outputs):
    """For ONNX: the outputs in a `tf.TensorArray`, which tf2onnx turns into the
    scan outputs of an ONNX `Loop` (no copy of earlier steps; the inputs are read
    from the enclosing graph, not copied either). LiteRT cannot convert it for a
    batch of unknown size."""
    import tensorflow as tf

    if not return_all_outputs:
        return _scatter_loop(masked_step, inputs, mask, zeros, states, False)
    outputs = tf.TensorArray(inputs.dtype, size=tf.shape(inputs)[0])
    last_output, outputs, states = _steps(
        masked_step,
        inputs,
        mask,
        zeros,
        states,
        outputs,
        lambda outputs, time, output: outputs.write(time, output),
    )
    return last_output, outputs.stack(), states


def _write_in_place(outputs, time, output, block=False):
    """`outputs[time] = output` (or `outputs[time:time + len(output)] = output`
    for a `block`) as `XlaDynamicUpdateSlice`: LiteRT's DYNAMIC_UPDATE_SLICE,
    which tf2onnx lacks."""
    import tensorflow as tf

    from rnnkit._keras_private import dynamic_update_slice

    update = output if block else tf.expand_dims(output, 0)  # (steps, batch, units)
    start = tf.stack([time, 0, 0])  # (3,)
    return dynamic_update_slice(outputs, update, start)  # (time, batch, units)


def _write_scatter(outputs, time, output):
    """`outputs[time] = output` as a scatter, which LiteRT and tf2onnx convert."""
    import tensorflow as tf

    return tf.tensor_scatter_nd_update(
        outputs, tf.reshape(time, (1, 1)), tf.expand_dims(output, 0)
    )  # (time, batch, units)


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
