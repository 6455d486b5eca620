"""The sequential form of `linear_scan` on TensorFlow, with its gradient written out.

h_t = a_t * h_{t-1} + b_t is linear in h, so its backward pass is the same recurrence
run backwards: with g_t the gradient reaching h_t from the outputs,

    s_t = g_t + a_{t+1} * s_{t+1},   dL/db_t = s_t,   dL/da_t = s_t * h_{t-1}.

Both loops are XLA-compiled `tf.while_loop`s whose step is one multiply-add over
(batch, units), read from and written into (batch, steps, units) tensors in place
(no transposes to time-major and back): XLA runs the loop without TensorFlow's
per-operation dispatch, and a step costs a few microseconds. The tape records inside
neither (as for the recurrent layers' hand-written BPTT, `_bptt`): TensorFlow cannot
differentiate an XLA-compiled loop, and the backward loop here is the gradient, one
pass with no accumulators. A TensorFlow that cannot compile (`_xla.available`) runs
`tf.scan` and differentiates it.
"""

from __future__ import annotations

import functools


def _forward(a, b):
    """Every h_t from h_{-1} = 0."""
    import tensorflow as tf

    from rnnkit._keras_private import dynamic_update_slice

    steps = tf.shape(a)[1]

    def step(t, h, states):
        h = a[:, t] * h + b[:, t]
        return t + 1, h, dynamic_update_slice(states, h[:, None], [0, t, 0])

    _, _, states = tf.while_loop(
        lambda t, *_: t < steps,
        step,
        (0, tf.zeros_like(b[:, 0]), tf.zeros_like(b)),
        maximum_iterations=steps,
    )
    return states


def _backward(a, upstream):
    """s_t = g_t + a_{t+1} s_{t+1} from the last step to the first: the gradient of
    every b_t."""
    import tensorflow as tf

    from rnnkit._keras_private import dynamic_update_slice

    steps = tf.shape(a)[1]
    a_next = tf.concat([a[:, 1:], tf.zeros_like(a[:, :1])], axis=1)

    def step(t, s, sums):
        s = upstream[:, t] + a_next[:, t] * s
        return t - 1, s, dynamic_update_slice(sums, s[:, None], [0, t, 0])

    _, _, sums = tf.while_loop(
        lambda t, *_: t >= 0,
        step,
        (steps - 1, tf.zeros_like(upstream[:, 0]), tf.zeros_like(upstream)),
        maximum_iterations=steps,
    )
    return sums


@functools.cache
def _loops():
    from rnnkit.layers import _xla

    return _xla.compiled(_forward), _xla.compiled(_backward)


def _uncompiled_scan(a, b):
    """`tf.scan` of the step: not `keras.ops.scan` (`rnnkit.layers.scan`'s loop
    elsewhere), whose TensorFlow form needs the number of steps when traced."""
    import tensorflow as tf

    def step(h, coefficients):
        a_t, b_t = coefficients
        return a_t * h + b_t

    time_major = (tf.transpose(a, (1, 0, 2)), tf.transpose(b, (1, 0, 2)))
    h = tf.scan(step, time_major, initializer=tf.zeros_like(b[:, 0]))
    return tf.transpose(h, (1, 0, 2))


def sequential_scan(a, b):
    """Every h_t of h_t = a_t * h_{t-1} + b_t from h_{-1} = 0, for (batch, steps,
    units) tensors of one float dtype; differentiable in `a` and `b`."""
    import tensorflow as tf

    from rnnkit.layers import _xla

    if not _xla.available():
        return _uncompiled_scan(a, b)
    forward, backward = _loops()

    @tf.custom_gradient
    def scan(a, b):
        # stop_gradient: the tape must not record inside the compiled loop.
        a, b = tf.stop_gradient(a), tf.stop_gradient(b)
        h = forward(a, b)

        def gradient(upstream):
            d_b = backward(a, tf.stop_gradient(upstream))
            previous = tf.concat([tf.zeros_like(h[:, :1]), h[:, :-1]], axis=1)
            return d_b * previous, d_b

        return h, gradient

    return scan(a, b)
