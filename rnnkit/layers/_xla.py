"""XLA on TensorFlow: whether this build can compile, for the layers that use it.

rnnkit's layers compile their inner loops with XLA (`tf.function(jit_compile=True)`)
where it was measured to be faster: the Bahdanau per-query loop (`_bahdanau_xla`) and
the recurrent layers' time loops (`_bptt`, `_rnn_base`). XLA fuses each step's
element-wise operations into one pass and runs the loop without TensorFlow's
per-operation dispatch; it compiles once per input shape.
"""

from __future__ import annotations

import functools


@functools.cache
def available() -> bool:
    """Whether this TensorFlow can XLA-compile on the CPU (tried once, eagerly)."""
    import tensorflow as tf

    def tiny(x):
        return tf.while_loop(
            lambda i, y: i < 2, lambda i, y: (i + 1, tf.tanh(y)), (0, x)
        )

    try:
        # init_scope: run eagerly even when first asked inside a tf.function trace.
        with tf.init_scope(), tf.device("/CPU:0"):
            tf.function(tiny, jit_compile=True)(tf.zeros((1, 1)))[1].numpy()
    except (tf.errors.OpError, NotImplementedError, ValueError):
        return False
    return True
