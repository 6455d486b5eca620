"""The LSTM's and the GRU's inference loop for one sequence at a time (a batch of one),
on TensorFlow.

At a batch of one, a step of the generic loop is a few (1, D + 1 + H) by (D + 1 + H, H)
vector-matrix products and a dozen element-wise ops, and what it costs is mostly the
ops' fixed cost and one core's memory bandwidth for the weights. This loop does what
PyTorch's fused kernels do instead: the input projection of every step in one matmul
before the loop (x_t W + b for all t), then per step only the recurrent product, in
two column blocks (the LSTM's [U_i U_f] and [U_c U_o], the GRU's [U_z U_r] and U_h),
and the gates. The plain TensorFlow loop runs the two blocks on two cores at once,
each small enough to stay in its core's cache; XLA's CPU loop runs them one after the
other but with less fixed cost per op, the better trade for a small recurrent matrix
(`COMPILED_UNITS`). Measured in docs/performance.md, "A batch of one".

Inference only (a training call keeps the generic loop and its hand-written backward
pass); the plain loop is differentiable as it is, and the compiled one takes its
gradient from the plain loop run again, as `_loops.compiled_loop` does.
"""

from __future__ import annotations

import functools

# Units up to which the compiled loop runs by default (`jit_compile=None`).
COMPILED_UNITS = 256

# The methods a cell of one's own must not override for this loop to run it: the
# loop computes rnnkit's step from the weights these give.
_STEP_METHODS = {
    "LSTMCell": ("step", "_gate_values", "_pre_activations", "gate_weights"),
    "GRUCell": ("step", "_gates", "gate_weights"),
}


def blockers(layer, sequences, mask, training) -> list[str]:
    """Why `layer`'s call cannot run this loop (empty: it can)."""
    import keras

    from rnnkit.layers.gru import GRUCell
    from rnnkit.layers.lstm import LSTMCell

    cell = layer.cell
    reasons = []
    if keras.backend.backend() != "tensorflow":
        reasons.append(f"backend is {keras.backend.backend()}")
    if training:
        reasons.append("a training call")
    if sequences.shape[0] != 1:
        reasons.append(f"a batch of {sequences.shape[0]}, not one")
    if mask is not None:
        reasons.append("a mask")
    if layer.unroll:
        reasons.append("unroll=True")
    if cell.compute_dtype != "float32":
        reasons.append(f"compute dtype {cell.compute_dtype}")
    base = next((c for c in (LSTMCell, GRUCell) if isinstance(cell, c)), None)
    # A cell of one's own that changes the step keeps the generic loop, which runs
    # its step.
    if base is None or any(
        getattr(type(cell), name) is not getattr(base, name)
        for name in _STEP_METHODS[base.__name__]
    ):
        reasons.append("not rnnkit's LSTM or GRU step")
    return reasons


def compiles(layer, sequences) -> bool:
    """Whether the loop runs XLA-compiled: `jit_compile` where it is set, else as
    the generic loop decides when to compile (a traced call of a static number of
    steps on a CPU: `_xla_policy`) and up to `COMPILED_UNITS` units."""
    import tensorflow as tf

    from rnnkit.layers import _xla

    if layer.jit_compile is False or not _xla.available():
        return False
    if layer.jit_compile:
        return True
    return (
        layer.cell.units <= COMPILED_UNITS
        and not tf.executing_eagerly()
        and sequences.shape[1] is not None
        and not tf.config.list_logical_devices("GPU")
    )


def run(layer, sequences, initial_state, compiled):
    """(last output, outputs, states) as `keras_backend.rnn` returns them, for a
    (1, steps, features) `sequences` in float32."""
    import tensorflow as tf

    from rnnkit.layers import _xla
    from rnnkit.layers._cell_math import STATE_DTYPE

    cell = layer.cell
    all_steps = bool(layer.return_sequences)
    if layer.go_backwards:
        sequences = tf.reverse(sequences, axis=[1])
    with cell.dropped_weights(False):
        kernel, recurrent = _weights(cell)
    inputs = cell.augment_inputs(sequences[0])  # (steps, features [+ 1])
    projected = tf.matmul(inputs, kernel)  # x_t W + b, every step at once
    states = [tf.cast(state, STATE_DTYPE) for state in initial_state]
    arguments = (projected, *states, *recurrent)
    if compiled:
        loop = _xla.shared_function(
            cell,
            ("one sequence", all_steps),
            lambda clone: _xla.compiled(functools.partial(_loop, clone, all_steps)),
        )
        outputs, *states = _with_plain_gradient(loop, cell, all_steps, arguments)
    else:
        outputs, *states = _loop(cell, all_steps, *arguments)
    h = states[0]
    sequence = outputs[None] if all_steps else h[:, None, :]
    return h, sequence, states


def _is_lstm(cell) -> bool:
    from rnnkit.layers.lstm import LSTMCell

    return isinstance(cell, LSTMCell)


def _weights(cell):
    """The input kernel [W; b] of all gates, (features [+ 1], gates x units), and the
    recurrent weights the step takes: the two column blocks, and for the GRU with
    reset_after the bias b'_h that r_t multiplies."""
    import tensorflow as tf

    units = cell.units
    if _is_lstm(cell):
        kernel, recurrent = cell._input_and_recurrent_blocks(cell.gate_weights())
        return kernel, tuple(tf.split(recurrent, 2, axis=-1))
    kernels, recurrent, candidate_bias = cell.gate_weights()
    if cell.reset_after:
        recurrent = (recurrent[:, : 2 * units], recurrent[:, 2 * units :])
    extra = () if candidate_bias is None else (candidate_bias,)
    return tf.concat(kernels, axis=-1), (*recurrent, *extra)


def _loop(cell, all_steps, projected, *args):
    """The recurrence over the projected inputs: (every h_t (steps, units), or an
    empty placeholder, then the final states)."""
    import tensorflow as tf

    units = cell.units
    lstm = _is_lstm(cell)
    num_states = 2 if lstm else 1
    states, weights = args[:num_states], args[num_states:]
    steps = tf.shape(projected)[0]
    # The inputs' columns in the recurrent blocks' groups.
    groups = tf.split(projected, [2 * units, (2 if lstm else 1) * units], axis=-1)
    step = _lstm_step if lstm else _gru_step
    written = tf.TensorArray(
        projected.dtype, size=steps if all_steps else 0, element_shape=(units,)
    )

    def body(t, written, *states):
        x_t = [group[t][None] for group in groups]
        states = step(cell, x_t, states, weights)
        if all_steps:
            written = written.write(t, states[0][0])
        return (t + 1, written, *states)

    _, written, *states = tf.while_loop(
        lambda t, *_: t < steps, body, (tf.constant(0), written, *states)
    )
    outputs = written.stack() if all_steps else tf.zeros((0, units), projected.dtype)
    return (outputs, *states)


def _lstm_step(cell, x_t, states, weights):
    import tensorflow as tf

    (x_if, x_co), (h, c), (u_if, u_co) = x_t, states, weights
    sigma, phi = cell.recurrent_activation, cell.activation
    z_if = x_if + tf.matmul(h, u_if)
    z_co = x_co + tf.matmul(h, u_co)
    i_t, f_t = tf.split(sigma(z_if), 2, axis=-1)
    g_t, o_t = phi(z_co[:, : cell.units]), sigma(z_co[:, cell.units :])
    c = f_t * c + i_t * g_t
    return o_t * phi(c), c


def _gru_step(cell, x_t, states, weights):
    import tensorflow as tf

    (x_zr, x_h), (h,) = x_t, states
    sigma, phi = cell.recurrent_activation, cell.activation
    z_t, r_t = tf.split(sigma(x_zr + tf.matmul(h, weights[0])), 2, axis=-1)
    if cell.reset_after:
        h_h = tf.matmul(h, weights[1])
        if len(weights) > 2:
            h_h = h_h + weights[2]  # b'_h
        n_t = phi(x_h + r_t * h_h)
    else:
        n_t = phi(x_h + tf.matmul(r_t * h, weights[1]))
    return (n_t + z_t * (h - n_t),)  # z_t h_{t-1} + (1 - z_t) n_t


def _with_plain_gradient(loop, cell, all_steps, arguments):
    """`loop(*arguments)` (compiled), whose gradient, when one is asked for,
    differentiates the plain loop run again."""
    import tensorflow as tf

    @tf.custom_gradient
    def run(*args):
        results = loop(*(tf.stop_gradient(a) for a in args))

        def gradient(*upstream):
            with tf.GradientTape() as tape:
                tape.watch(args)
                again = _loop(cell, all_steps, *args)
            upstream = [
                tf.zeros_like(a) if u is None else u
                for a, u in zip(again, upstream, strict=True)
            ]
            return tape.gradient(again, args, output_gradients=upstream)

        return results, gradient

    return run(*arguments)
