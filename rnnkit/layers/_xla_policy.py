"""Whether a recurrent layer's generic loop runs XLA-compiled (`jit_compile`).

`jit_compile=None` compiles on TensorFlow where that was measured to be faster than
the plain loop: per this machine where a calibration is loaded
(`rnnkit.layers.calibration.load`), else as the cell's `xla_pays` says. The
measurements behind the defaults: docs/performance.md, "XLA-compiled loops".
"""

from __future__ import annotations

import keras


def use_xla(layer, sequences, training, hand_written, side_by_side=False):
    """(Whether the generic loop runs XLA-compiled, and the error message when
    `jit_compile=True` cannot be honoured); see `jit_compile`."""
    from rnnkit.layers import _kernels, _xla

    backend = keras.backend.backend()
    if layer.jit_compile is False or backend == "jax":
        return False, None  # JAX compiles the whole step anyway
    reason = None
    if backend != "tensorflow":
        reason = f"backend is {backend}"
    elif layer.unroll:
        reason = "unroll=True"
    elif training and not hand_written:
        reason = "the autodiff backward pass is not compiled"
    elif not _xla.available():
        reason = "this TensorFlow cannot compile with XLA"
    if layer.jit_compile:
        if reason:
            return False, (
                f"{layer.name}: jit_compile=True cannot be honoured: {reason}. "
                "Pass jit_compile=None to fall back to the uncompiled loop."
            )
        return True, None
    if reason:
        return False, None
    import tensorflow as tf

    # jit_compile=None: on a CPU, inside a traced function (Model.fit, predict,
    # tf.function; an eager call is a one-off that the compilation would slow down)
    # and for a static number of steps (XLA compiles once per shape: padding every
    # batch to its own length would compile again and again). As the loaded
    # calibration of this machine says where it has measured, else as the cell's
    # `xla_pays` says.
    if (
        tf.executing_eagerly()
        or sequences.shape[1] is None
        or tf.config.list_logical_devices("GPU")
        # This call's bfloat16 loop on a CPU with bfloat16 matrix instructions
        # (`_kernels.bfloat16_loop`): XLA's CPU backend runs bfloat16 matmuls slower
        # than float32 ones, TensorFlow's own use AMX or AVX512_BF16.
        or _kernels.in_bfloat16_loop(layer)
    ):
        return False, None
    from rnnkit.layers import calibration

    measured = calibration.measured_choice(
        layer.cell, bool(training), sequences.shape[1], sequences.shape[0]
    )
    if measured is None:
        batch = {"batch": sequences.shape[0]} if _takes_batch(layer.cell) else {}
        return layer.cell.xla_pays(bool(training), side_by_side, **batch), None
    return measured, None


def _takes_batch(cell) -> bool:
    """Whether the cell's `xla_pays` takes `batch` (a cell of one's own written before
    it did takes `training` and `side_by_side` only)."""
    import inspect

    try:
        return "batch" in inspect.signature(cell.xla_pays).parameters
    except (TypeError, ValueError):
        return False
