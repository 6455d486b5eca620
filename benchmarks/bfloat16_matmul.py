"""Where a bfloat16 recurrent step spends its time on a CPU, op by op (TensorFlow).

1. One matmul of a step's size, float32 against bfloat16, run by TensorFlow's own
   kernels (oneDNN, `tf.function`) and by XLA (`jit_compile=True`): microseconds
   per call, and a large square for the kernels' peak.
2. An LSTM-like loop of 100 steps, batch 64, 64 inputs, 256 units, XLA-compiled:
   float32; bfloat16 with the state carried in float32 and cast every step (what
   rnnkit's cells do under a mixed policy); bfloat16 throughout (no casts).

    python benchmarks/bfloat16_matmul.py
"""

from __future__ import annotations

import os
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tensorflow as tf  # noqa: E402
from timing import cpu_line  # noqa: E402

SIZES = [(64, 320, 1024), (64, 768, 2048), (64, 512, 512), (2048, 2048, 2048)]


def microseconds(function, *args, repeats=200):
    function(*args)  # trace, compile, warm up
    start = time.perf_counter()
    for _ in range(repeats):
        function(*args)
    return (time.perf_counter() - start) / repeats * 1e6


def lstm_like_loop(dtype, float32_state, steps=100, batch=64, inputs=64, units=256):
    """Milliseconds of an XLA-compiled loop of one LSTM step per time step."""
    state_dtype = tf.float32 if float32_state else dtype
    kernel = tf.cast(tf.random.normal((inputs + units, 4 * units)) * 0.05, dtype)
    x = tf.cast(tf.random.normal((steps, batch, inputs)), dtype)

    @tf.function(jit_compile=True)
    def run(x):
        h = tf.zeros((batch, units), state_dtype)
        c = tf.zeros((batch, units), state_dtype)
        for t in tf.range(steps):
            z = tf.matmul(tf.concat([x[t], tf.cast(h, dtype)], -1), kernel)
            i, f, g, o = tf.split(z, 4, -1)  # (batch, units) each
            i, f, g, o = tf.sigmoid(i), tf.sigmoid(f), tf.tanh(g), tf.sigmoid(o)
            c = tf.cast(f, state_dtype) * c + tf.cast(i * g, state_dtype)
            h = tf.cast(o * tf.tanh(tf.cast(c, dtype)), state_dtype)
        return h

    return microseconds(run, x, repeats=20) / 1000


def main() -> None:
    print(f"CPU: {cpu_line()}; TensorFlow {tf.__version__}")
    for m, k, n in SIZES:
        repeats = 5 if m > 1000 else 300
        for dtype in (tf.float32, tf.bfloat16):
            a = tf.cast(tf.random.normal((m, k)), dtype)
            b = tf.cast(tf.random.normal((k, n)), dtype)
            kernels = tf.function(tf.matmul)
            xla = tf.function(tf.matmul, jit_compile=True)
            plain = microseconds(kernels, a, b, repeats=repeats)
            compiled = microseconds(xla, a, b, repeats=repeats)
            print(
                f"matmul {m}x{k} by {k}x{n} {dtype.name:9} "
                f"TensorFlow kernels {plain:9.1f} us, XLA {compiled:9.1f} us",
                flush=True,
            )
    for dtype, float32_state, label in (
        (tf.float32, False, "float32"),
        (tf.bfloat16, True, "bfloat16, float32 state cast every step"),
        (tf.bfloat16, False, "bfloat16 throughout"),
    ):
        milliseconds = lstm_like_loop(dtype, float32_state)
        print(f"LSTM-like XLA loop, {label}: {milliseconds:.2f} ms", flush=True)


if __name__ == "__main__":
    main()
