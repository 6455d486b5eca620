"""Backpropagation through time written out by hand, for training on TensorFlow.

Differentiating the generic time loop automatically makes TensorFlow repeat, at every
step of the backward loop, one small weight-gradient matmul per weight (a reduction over
the batch only) and add it into an accumulator as large as the weight. The backward pass
here does what cuDNN does instead:

1. The forward loop runs the cell and stores, per step, the factors that the backward
   step needs (derivatives of the gates, expressed through their outputs, e.g.
   sigma' = sigma (1 - sigma)).
2. The backward loop runs from the last step to the first and carries only the gradient
   of the state: per step one matmul with the transposed recurrent kernel and a few
   elementwise products. It stores the gradients of the gate pre-activations G_t.
3. After the loop, the weight gradients are one large matmul each over all steps,
   dW = X^T G and dU = H_{t-1}^T G, and the input gradient is dX = G W^T.

The cells supply the pieces (`bptt_weights`, `bptt_forward`, `bptt_backward_context`,
`bptt_backward`, `bptt_weight_gradients`) with `keras.ops`; this module owns the two
loops (a `tf.while_loop` over `tf.TensorArray`s, read forwards and then backwards
without copies) and the masking. Masked steps keep the previous state: its gradient
passes through them unchanged, and their gate gradients are zero.

On TensorFlow with XLA (`jit_compile=True`, chosen by the layer) the two loops are
each one `tf.function(jit_compile=True)`: XLA fuses a step's element-wise products
into one pass and runs the loop without per-operation dispatch. The weight gradients
stay outside, as TensorFlow (oneDNN) matmuls. The loops take and give tensors, and
the tape does not record inside them: the backward loop is the gradient.
"""

from __future__ import annotations


def _forward_loop(cell, x, mask, states0, weights, stacked):
    """h_t of every step (time, batch, units), the final states, and what the
    backward loop needs per step: `TensorArray`s, or with `stacked` (XLA, whose
    function can only give tensors back) those stacked into (time, ...) tensors."""
    import tensorflow as tf

    steps = tf.shape(x)[0]
    x_ta = tf.TensorArray(x.dtype, steps, element_shape=x.shape[1:]).unstack(x)
    mask_ta = None
    if mask is not None:
        mask_ta = tf.TensorArray(mask.dtype, steps).unstack(mask)
    hidden_ta = tf.TensorArray(states0[0].dtype, steps, element_shape=states0[0].shape)
    # Read again by every gradient computation (eager mode clears on read).
    saved_tas = tuple(
        tf.TensorArray(x.dtype, steps, clear_after_read=False)
        for _ in range(cell.bptt_num_saved)
    )

    def forward(t, states, hidden_ta, saved_tas):
        new_states, saved = cell.bptt_forward(x_ta.read(t), list(states), weights)
        new_states = [
            tf.cast(new, old.dtype) for new, old in zip(new_states, states, strict=True)
        ]
        if mask_ta is not None:
            keep = mask_ta.read(t)
            new_states = [
                tf.where(keep, new, old)
                for new, old in zip(new_states, states, strict=True)
            ]
        saved_tas = tuple(
            ta.write(t, tf.cast(value, ta.dtype))
            for ta, value in zip(saved_tas, saved, strict=True)
        )
        return (
            t + 1,
            tuple(new_states),
            hidden_ta.write(t, new_states[0]),
            saved_tas,
        )

    _, final_states, hidden_ta, saved_tas = tf.while_loop(
        lambda t, *_: t < steps,
        forward,
        (0, tuple(states0), hidden_ta, saved_tas),
        swap_memory=True,
    )
    if stacked:
        saved_tas = tuple(ta.stack() for ta in saved_tas)
    return hidden_ta.stack(), tuple(final_states), saved_tas


def _backward_loop(cell, saved, mask, d_hidden, d_states, context):
    """The gradients G_t that `bptt_backward` emits, stacked (time, ...), and those
    of the initial states, from the output gradients: d_hidden (time, batch, units)
    or None, and d of each final state."""
    import tensorflow as tf

    if isinstance(saved[0], tf.TensorArray):
        saved_tas, steps = saved, saved[0].size()
    else:
        steps = tf.shape(saved[0])[0]
        saved_tas = tuple(
            tf.TensorArray(s.dtype, steps, element_shape=s.shape[1:]).unstack(s)
            for s in saved
        )
    mask_ta = None
    if mask is not None:
        mask_ta = tf.TensorArray(mask.dtype, steps).unstack(mask)
    d_hidden_ta = None
    if d_hidden is not None:
        d_hidden_ta = tf.TensorArray(d_hidden.dtype, steps).unstack(d_hidden)
    # The step computes in the cell's compute dtype (the saved factors'), the state
    # gradients are carried in theirs (float32) between steps.
    compute = saved_tas[0].dtype
    emitted_tas = tuple(
        tf.TensorArray(compute, steps) for _ in range(cell.bptt_num_emitted)
    )

    def backward(t, d_states, emitted_tas):
        d_states = list(d_states)
        if d_hidden_ta is not None:
            d_states[0] = d_states[0] + d_hidden_ta.read(t)
        saved = [ta.read(t) for ta in saved_tas]
        d_in = [tf.cast(d, compute) for d in d_states]
        if mask_ta is not None:
            keep = mask_ta.read(t)
            d_in = [tf.where(keep, d, tf.zeros_like(d)) for d in d_in]
        d_prev, emitted = cell.bptt_backward(d_in, saved, context)
        d_prev = [tf.cast(dp, d.dtype) for dp, d in zip(d_prev, d_states, strict=True)]
        if mask_ta is not None:
            # A masked step copied the state: its gradient passes through.
            d_prev = [
                tf.where(keep, dp, d) for dp, d in zip(d_prev, d_states, strict=True)
            ]
        emitted_tas = tuple(
            ta.write(t, tf.cast(value, compute))
            for ta, value in zip(emitted_tas, emitted, strict=True)
        )
        return t - 1, tuple(d_prev), emitted_tas

    _, d_initial, emitted_tas = tf.while_loop(
        lambda t, *_: t >= 0,
        backward,
        (steps - 1, tuple(d_states), emitted_tas),
        swap_memory=True,
    )
    return tuple(ta.stack() for ta in emitted_tas), d_initial


def _loop_functions(cell, stacked):
    """`_forward_loop` and `_backward_loop` of `cell` as functions of tensors."""

    def forward(x, mask, states0, weights):
        return _forward_loop(cell, x, mask, states0, weights, stacked)

    def backward(saved, mask, d_hidden, d_states, context):
        return _backward_loop(cell, saved, mask, d_hidden, d_states, context)

    return forward, backward


def _loops(cell, jit_compile):
    """The forward and backward loop functions of `cell`; with `jit_compile`, XLA
    compiled, shared by the cells of the same config (XLA then compiles once per
    input shape)."""
    if not jit_compile:
        return _loop_functions(cell, stacked=False)
    from rnnkit.layers import _xla

    return _xla.shared_function(
        cell,
        "bptt",
        lambda clone: tuple(map(_xla.compiled, _loop_functions(clone, stacked=True))),
    )


def run(cell, inputs, mask, initial_states, weights, all_steps=True, jit_compile=False):
    """Runs `cell` over time-major `inputs` with a hand-written backward pass.

    Args:
        cell: An rnnkit cell with the `bptt_*` methods.
        inputs: (time, batch, features) in the compute dtype, [x_t, 1] when the cell
            has biases (`augment_inputs`), input dropout already applied.
        mask: None or (time, batch, 1) booleans; a masked step keeps the state.
        initial_states: List of (batch, units) float32 tensors.
        weights: Tuple of tensors from `cell.bptt_weights()`.
        all_steps: Whether h_t of every step is wanted, or only the final states
            (then the backward loop has no per-step output gradient to add).
        jit_compile: Whether the two loops run XLA-compiled.

    Returns:
        `(hidden, final_states)`: h_t of every step, (time, batch, units), or None
        without `all_steps`, and the list of states after the last step.
    """
    import tensorflow as tf

    weights = tuple(weights)
    num_states = len(initial_states)
    forward, backward = _loops(cell, jit_compile)

    @tf.custom_gradient
    def recurrence(x, *args):
        states0, weights_ = list(args[:num_states]), args[num_states:]
        # stop_gradient: the tape must not record inside the loop (XLA cannot hand
        # its loop state out); the gradient is `backward_pass` below.
        hidden, final_states, saved = forward(
            tf.stop_gradient(x),
            mask,
            [tf.stop_gradient(s) for s in states0],
            [tf.stop_gradient(w) for w in weights_],
        )

        def backward_pass(*upstream):
            # d hidden (all_steps only), then d final state for each state; TF passes
            # zeros for an output that the loss does not use.
            d_hidden = upstream[0] if all_steps else None
            d_finals = upstream[1:] if all_steps else upstream
            d_states = [
                tf.zeros_like(s) if d is None else d
                for s, d in zip(states0, d_finals, strict=True)
            ]
            context = cell.bptt_backward_context(weights_)
            emitted, d_initial = backward(saved, mask, d_hidden, d_states, context)
            # h_{t-1} for every step: [h_0, h_1, ..., h_{T-1}].
            previous = tf.cast(
                tf.concat([states0[0][None], hidden[:-1]], axis=0), x.dtype
            )
            d_inputs, d_weights = cell.bptt_weight_gradients(
                x, previous, list(emitted), weights_
            )
            return (d_inputs, *d_initial, *d_weights)

        outputs = (hidden, *final_states) if all_steps else tuple(final_states)
        return outputs, backward_pass

    outputs = recurrence(inputs, *initial_states, *weights)
    if all_steps:
        return outputs[0], list(outputs[1:])
    return None, list(outputs)
