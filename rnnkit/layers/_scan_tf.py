"""The sequential form of `linear_scan` on TensorFlow, with its gradient written out.

h_t = a_t * h_{t-1} + b_t is linear in h, so its backward pass is the same recurrence
run backwards: with g_t the gradient reaching h_t from the outputs,

    s_t = g_t + a_{t+1} * s_{t+1},   dL/db_t = s_t,   dL/da_t = s_t * h_{t-1}.

Both loops are `tf.while_loop`s whose step is one multiply-add over (batch, units),
XLA-compiled where this TensorFlow can (`_xla.available`): XLA runs the loop without
TensorFlow's per-operation dispatch, and the step costs a few microseconds. The tape
records inside neither (as for the recurrent layers' hand-written BPTT, `_bptt`):
TensorFlow cannot differentiate an XLA-compiled loop, and the backward loop here is
the gradient, one pass with no accumulators.
"""

from __future__ import annotations

import functools


def _forward(a, b):
    """Every h_t from h_{-1} = 0, time-major (steps, batch, units)."""
    import tensorflow as tf

    steps = tf.shape(a)[0]

    def step(t, h, states):
        h = a[t] * h + b[t]
        return t + 1, h, states.write(t, h)

    states = tf.TensorArray(b.dtype, steps, element_shape=b.shape[1:])
    _, _, states = tf.while_loop(
        lambda t, *_: t < steps,
        step,
        (0, tf.zeros_like(b[0]), states),
        maximum_iterations=steps,
    )
    return states.stack()


def _backward(a, upstream):
    """s_t = g_t + a_{t+1} s_{t+1} from the last step to the first: the gradient of
    every b_t (time-major)."""
    import tensorflow as tf

    steps = tf.shape(a)[0]
    a_next = tf.concat([a[1:], tf.zeros_like(a[:1])], axis=0)

    def step(t, s, sums):
        s = upstream[t] + a_next[t] * s
        return t - 1, s, sums.write(t, s)

    sums = tf.TensorArray(upstream.dtype, steps, element_shape=upstream.shape[1:])
    _, _, sums = tf.while_loop(
        lambda t, *_: t >= 0,
        step,
        (steps - 1, tf.zeros_like(upstream[0]), sums),
        maximum_iterations=steps,
    )
    return sums.stack()


@functools.cache
def _loops():
    import tensorflow as tf

    from rnnkit.layers import _xla

    if _xla.available():
        return _xla.compiled(_forward), _xla.compiled(_backward)
    return (
        tf.function(_forward, reduce_retracing=True, autograph=False),
        tf.function(_backward, reduce_retracing=True, autograph=False),
    )


def sequential_scan(a, b):
    """Every h_t of h_t = a_t * h_{t-1} + b_t from h_{-1} = 0, for (batch, steps,
    units) tensors of one float dtype; differentiable in `a` and `b`."""
    import tensorflow as tf

    forward, backward = _loops()

    @tf.custom_gradient
    def scan(a, b):
        # stop_gradient: the tape must not record inside the compiled loop.
        a, b = tf.stop_gradient(a), tf.stop_gradient(b)
        h = forward(a, b)

        def gradient(upstream):
            d_b = backward(a, tf.stop_gradient(upstream))
            previous = tf.concat([tf.zeros_like(h[:1]), h[:-1]], axis=0)
            return d_b * previous, d_b

        return h, gradient

    time_major = scan(tf.transpose(a, (1, 0, 2)), tf.transpose(b, (1, 0, 2)))
    return tf.transpose(time_major, (1, 0, 2))
