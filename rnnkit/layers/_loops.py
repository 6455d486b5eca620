"""The recurrent layers' own time loops, for what no fused kernel runs.

The generic loop feeds the cell's `step` its weights split once per sequence
(`loop_weights`) and inputs augmented once per sequence (`augment_inputs`), through
Keras' time loop (`keras.src.backend.rnn`), and comes in three forms on TensorFlow:
plain; XLA-compiled (`_xla_policy`), whose gradient differentiates the plain loop
run again; and, in training, with the hand-written backward pass of `_bptt` (the
weight gradients as one large matmul over all steps instead of one small matmul and
one accumulation per step and weight). Any of them may run the batch in shards side
by side (`_batch_shards`).
"""

from __future__ import annotations

import functools

import keras
from keras import ops

from rnnkit._keras_private import backend as keras_backend
from rnnkit.layers import (
    _batch_shards,
    _export,
    _kernels,
    _one_sequence,
    _xla_policy,
)
from rnnkit.layers._cell_math import STATE_DTYPE


def run_loop(
    cell,
    options,
    sequences,
    initial_state,
    mask,
    weights,
    input_mask=None,
    recurrent_mask=None,
):
    """Keras' time loop over `cell.step` with the layer's `options` (go_backwards,
    unroll, zero_output_for_mask, return_sequences): (last output, outputs, states)."""
    go_backwards, unroll, zero_output_for_mask, return_sequences = options

    def step(inputs, states):
        return cell.step(inputs, states, weights, input_mask, recurrent_mask)

    if _export.active() and not unroll:
        return _export.rnn(
            step,
            sequences,
            initial_state,
            cell.output_size,
            go_backwards=go_backwards,
            mask=mask,
            zero_output_for_mask=zero_output_for_mask,
            return_all_outputs=return_sequences,
        )
    return keras_backend.rnn(
        step,
        sequences,
        initial_state,
        go_backwards=go_backwards,
        mask=mask,
        unroll=unroll,
        input_length=sequences.shape[1],
        zero_output_for_mask=zero_output_for_mask,
        return_all_outputs=return_sequences,
    )


def _dtype_note(layer) -> str:
    """The loop's compute dtype in `execution_path` where it is not the layer's
    policy's, or where a CPU's bfloat16 loop was chosen for this call
    (`_kernels.bfloat16_loop`)."""
    cell_dtype, policy = layer.cell.compute_dtype, layer.dtype_policy.name
    if cell_dtype != layer.compute_dtype:
        return f", in {cell_dtype} under {policy}"
    if _kernels.in_bfloat16_loop(layer):
        why = "a step large enough for the CPU's bfloat16 matmuls"
        return f", in bfloat16 under {policy} ({why})"
    return ""


def loop_options(layer):
    return (
        layer.go_backwards,
        layer.unroll,
        layer.zero_output_for_mask,
        layer.return_sequences,
    )


def bptt_blockers(layer) -> list[str]:
    """Reasons a training call of `layer` cannot use the hand-written backward
    pass: the layer's, then its cell's (`RecurrentCell.bptt_blockers`)."""
    reasons = []
    if keras.backend.backend() != "tensorflow":
        reasons.append(f"backend is {keras.backend.backend()}")
    if layer.unroll:
        reasons.append("unroll=True")
    if layer.cell.compute_dtype == "bfloat16" and not _kernels.in_bfloat16_loop(layer):
        # Measured and tested in a CPU's per-call bfloat16 loop only.
        reasons.append("compute dtype bfloat16")
    return reasons + layer.cell.bptt_blockers()


def generic_path(layer, sequences, initial_state, mask, training):
    """The generic loop's name ("generic loop, XLA-compiled, hand-written BPTT")
    and runner."""
    if _export.active():
        # Traced for export: the plain loop in builtin ops (`_export.rnn`), not
        # XLA, the batch in shards or the hand-written backward pass.
        def plain_loop():
            return generic_loop(layer, sequences, initial_state, mask, training)

        return "generic loop, for export (builtin ops)", plain_loop
    if not _one_sequence.blockers(layer, sequences, mask, training):

        def one_sequence():
            return _one_sequence.run(layer, sequences, initial_state)

        return "one-sequence loop, input projection hoisted", one_sequence
    hand_written = False
    bptt = ""
    if training:
        # Only a training call takes the hand-written backward pass: its forward
        # loop stores what the backward loop needs, which inference need not pay.
        reasons = layer._bptt_blockers()
        hand_written = not reasons
        bptt = (
            ", hand-written BPTT"
            if hand_written
            else f", autodiff BPTT ({'; '.join(reasons)})"
        )
    shards, beside = _batch_shards.shards_for(layer, sequences)
    compiled, error = _xla_policy.use_xla(
        layer, sequences, training, hand_written, shards > 1 or beside > 1
    )
    path = (
        "generic loop"
        + _dtype_note(layer)
        + (", XLA-compiled" if compiled else "")
        + bptt
        + (f", batch in {shards} shards side by side" if shards > 1 else "")
    )

    def loop():
        if error:  # raised only when the generic loop runs (not for cuDNN)
            raise ValueError(error)
        return generic_loop(
            layer,
            sequences,
            initial_state,
            mask,
            training,
            hand_written,
            compiled,
            shards,
        )

    return path, loop


def generic_loop(
    layer,
    sequences,
    initial_state,
    mask,
    training,
    hand_written=False,
    compiled=False,
    shards=1,
):
    cell = layer.cell
    # Split the weights and draw the dropout masks once per sequence, outside the
    # loop: every step reuses them (variational dropout, Gal & Ghahramani 2016).
    input_mask, recurrent_mask = cell.dropout_masks(
        sequences[:, 0, :], initial_state[0], training
    )
    if input_mask is not None:
        input_mask = cell.augment_inputs(input_mask)  # never drops the bias
    sequences = cell.augment_inputs(sequences)  # [x_t, 1], once per sequence
    initial_state = [ops.cast(state, STATE_DTYPE) for state in initial_state]
    if hand_written:
        with cell.dropped_weights(training):
            weights = cell.bptt_weights()

        def run(sequences, initial_state, mask, input_mask, recurrent_mask):
            return hand_written_bptt_loop(
                layer, sequences, initial_state, mask, input_mask, weights, compiled
            )

    else:
        with cell.dropped_weights(training):
            weights = cell.loop_weights()

        def run(sequences, initial_state, mask, input_mask, recurrent_mask):
            if compiled:
                return compiled_loop(layer, sequences, initial_state, mask, weights)
            return run_loop(
                cell,
                loop_options(layer),
                sequences,
                initial_state,
                mask,
                weights,
                input_mask,
                recurrent_mask,
            )

    batch_major = (sequences, initial_state, mask, input_mask, recurrent_mask)
    if shards == 1:
        return run(*batch_major)
    return _batch_shards.run_sharded(run, shards, batch_major)


def compiled_loop(layer, sequences, initial_state, mask, weights):
    """`run_loop` (no dropout) compiled by XLA; its gradient, when one is asked
    for, differentiates the uncompiled loop run again (XLA cannot hand the loop's
    intermediate values to TensorFlow's automatic differentiation)."""
    import tensorflow as tf

    from rnnkit.layers import _xla

    options = loop_options(layer)
    compiled = _xla.shared_function(
        layer.cell,
        ("loop", options),
        lambda cell: _xla.compiled(functools.partial(run_loop, cell, options)),
    )
    leaves = tf.nest.flatten(weights)  # None where a cell has no such weight

    def rebuild(tensors):
        tensors = iter(tensors)
        return tf.nest.pack_sequence_as(
            weights, [None if leaf is None else next(tensors) for leaf in leaves]
        )

    num_states = len(initial_state)

    @tf.custom_gradient
    def loop(inputs, *args):
        states, weights_ = list(args[:num_states]), args[num_states:]
        last, outputs, new_states = compiled(
            tf.stop_gradient(inputs),
            [tf.stop_gradient(s) for s in states],
            mask,
            rebuild([tf.stop_gradient(w) for w in weights_]),
        )

        def gradient(*upstream):
            with tf.GradientTape() as tape:
                tape.watch([inputs, *args])
                again = run_loop(
                    layer.cell, options, inputs, states, mask, rebuild(weights_)
                )
            again = [again[0], again[1], *again[2]]
            upstream = [
                tf.zeros_like(a) if u is None else u
                for a, u in zip(again, upstream, strict=True)
            ]
            return tape.gradient(again, [inputs, *args], output_gradients=upstream)

        return (last, outputs, *new_states), gradient

    results = loop(
        sequences,
        *initial_state,
        *[leaf for leaf in leaves if leaf is not None],
    )
    return results[0], results[1], list(results[2:])


def hand_written_bptt_loop(
    layer, sequences, initial_state, mask, input_mask, weights, compiled=False
):
    """`generic_loop` with the backward pass of `_bptt.run`; returns what
    `keras_backend.rnn` returns, with the same masking semantics."""
    from rnnkit.layers import _bptt

    if input_mask is not None:
        sequences = sequences * input_mask[:, None, :]
    inputs = ops.transpose(sequences, (1, 0, 2))  # time-major
    if mask is not None:
        mask = ops.transpose(ops.cast(mask, "bool"), (1, 0))[..., None]
    if layer.go_backwards:
        inputs = ops.flip(inputs, axis=0)
        mask = None if mask is None else ops.flip(mask, axis=0)
    hidden, final_states = _bptt.run(
        layer.cell,
        inputs,
        mask,
        initial_state,
        weights,
        all_steps=layer.return_sequences,
        jit_compile=compiled,
    )
    # As keras_backend.rnn: a masked step outputs zeros (zero_output_for_mask) or
    # repeats the last output, which is zeros before the first kept step.
    if mask is None:
        shown = None
    elif layer.zero_output_for_mask:
        shown = mask
    else:
        shown = ops.cumsum(ops.cast(mask, "int32"), axis=0) > 0
    if not layer.return_sequences:
        # The last step's h_t is the final state (a masked step keeps it).
        last = final_states[0]
        if shown is not None:
            last = ops.where(shown[-1], last, ops.zeros_like(last))
        return last, last[:, None, :], final_states
    if shown is not None:
        hidden = ops.where(shown, hidden, ops.zeros_like(hidden))
    return hidden[-1], ops.transpose(hidden, (1, 0, 2)), final_states
