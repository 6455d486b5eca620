"""The LSTM's inference loop for one sequence at a time (a batch of one) with a wide
state, on TensorFlow.

At a batch of one, a step of the generic loop is four (1, D + 1 + H) by (D + 1 + H, H)
vector-matrix products and a dozen element-wise ops. With H above `MIN_UNITS` the
recurrent matrix no longer fits one core's cache, and XLA's loop (which the generic
loop takes at a batch of one) runs the products on one core. This loop does what
PyTorch's fused LSTM does instead: the input projection of every step in one matmul
before the loop (x_t W + b for all t), then per step only h_{t-1} U, in two column
halves ([U_i U_f] and [U_c U_o]) that TensorFlow's executor runs on two cores at once,
each half small enough to stay in its core's cache, and the gates. Outside the sizes
and the CPUs where that measured faster (`MIN_UNITS`, `MAX_UNITS`, `MIN_STEPS`,
`FASTER_ON`), and for the GRU (one recurrent product a step), the generic loop runs:
docs/performance.md, "A batch of one".

Inference only (a training call keeps the generic loop and its hand-written backward
pass); the loop is TensorFlow's own `tf.while_loop`, which automatic differentiation
runs backwards where a gradient is asked for.
"""

from __future__ import annotations

# Where the loop measured faster than the generic loop: an LSTM of more than
# MIN_UNITS and at most MAX_UNITS units (wider, the halves outgrow the cores' caches),
# over at least MIN_STEPS steps known when traced (over fewer, as in generation token
# by token, the projection before the loop costs more than it saves).
MIN_UNITS, MAX_UNITS, MIN_STEPS = 256, 512, 5
# The CPUs it measured faster on, by `calibration.machine()`'s "isa": an Intel Xeon
# with AMX. On an AMD EPYC (Zen 4, AVX-512) TensorFlow's own vector-matrix products
# were slower than XLA's loop and the generic loop won there.
FASTER_ON = ("AMX",)
_STEP_METHODS = ("step", "_gate_values", "_pre_activations", "gate_weights")


def blockers(layer, sequences, mask, training) -> list[str]:
    """Why `layer`'s call cannot run this loop (empty: it can)."""
    import keras

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
    if layer.jit_compile:
        reasons.append("jit_compile=True")
    # A cell of one's own that changes the step keeps the generic loop, which runs
    # its step.
    if not isinstance(cell, LSTMCell) or any(
        getattr(type(cell), name) is not getattr(LSTMCell, name)
        for name in _STEP_METHODS
    ):
        reasons.append("not rnnkit's LSTM step")
    elif not MIN_UNITS < cell.units <= MAX_UNITS:
        reasons.append(f"units={cell.units}, not in ({MIN_UNITS}, {MAX_UNITS}]")
    steps = sequences.shape[1]
    if steps is None or steps < MIN_STEPS:
        reasons.append(f"{steps} steps, not a known number of at least {MIN_STEPS}")
    if cell.compute_dtype != "float32":
        reasons.append(f"compute dtype {cell.compute_dtype}")
    if reasons:  # the CPU last, and only on TensorFlow (`machine` imports it)
        return reasons
    from rnnkit.layers import calibration

    isa = calibration.machine()["isa"]
    if isa not in FASTER_ON:
        reasons.append(f"a CPU with {isa}, where the generic loop measured faster")
    return reasons


def run(layer, sequences, initial_state):
    """(last output, outputs, [h, c]) as `keras_backend.rnn` returns them, for a
    (1, steps, features) `sequences` in float32."""
    import tensorflow as tf

    from rnnkit.layers._cell_math import STATE_DTYPE

    cell = layer.cell
    units = cell.units
    if layer.go_backwards:
        sequences = tf.reverse(sequences, axis=[1])
    with cell.dropped_weights(False):
        kernel, recurrent = cell._input_and_recurrent_blocks(cell.gate_weights())
    inputs = cell.augment_inputs(sequences[0])  # (steps, features [+ 1])
    projected = tf.matmul(inputs, kernel)  # x_t W + b, every step at once
    to_if, to_co = tf.split(projected, 2, axis=-1)
    u_if, u_co = tf.split(recurrent, 2, axis=-1)  # [U_i U_f], [U_c U_o]
    sigma, phi = cell.recurrent_activation, cell.activation
    steps = tf.shape(projected)[0]
    all_steps = bool(layer.return_sequences)
    written = tf.TensorArray(
        projected.dtype, size=steps if all_steps else 0, element_shape=(units,)
    )

    def body(t, h, c, written):
        z_if = to_if[t][None] + tf.matmul(h, u_if)  # the two halves side by side
        z_co = to_co[t][None] + tf.matmul(h, u_co)
        i_t, f_t = tf.split(sigma(z_if), 2, axis=-1)
        g_t, o_t = phi(z_co[:, :units]), sigma(z_co[:, units:])
        c = f_t * c + i_t * g_t
        h = o_t * phi(c)
        if all_steps:
            written = written.write(t, h[0])
        return t + 1, h, c, written

    h_0, c_0 = (tf.cast(state, STATE_DTYPE) for state in initial_state)
    _, h, c, written = tf.while_loop(
        lambda t, *_: t < steps, body, (tf.constant(0), h_0, c_0, written)
    )
    sequence = written.stack()[None] if all_steps else h[:, None, :]
    return h, sequence, [h, c]
