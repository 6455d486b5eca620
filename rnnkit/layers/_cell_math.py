"""What the cells, their loops and the kernels share: the dtype of the carried state,
activation names, and activation derivatives written through their outputs."""

from __future__ import annotations

import keras
from keras import ops

# Under a mixed-precision policy the products run in the compute dtype (bfloat16 or
# float16) and the gates in `activation_dtype`, but the state carried from step to
# step stays float32, so that small updates are not rounded away over long sequences.
STATE_DTYPE = "float32"


def activation_dtype(compute_dtype: str) -> str:
    """The dtype a cell applies its activations and gate arithmetic in: float32
    where it computes in bfloat16, else its compute dtype. The products (the
    matmuls) stay in bfloat16, which a CPU with AMX or AVX512_BF16 runs faster; the
    element-wise work after them does not gain from bfloat16 on a CPU (TensorFlow
    converts each element to float32 and back) and loses precision (8 bits of
    mantissa): docs/performance.md, "The gates in float32"."""
    return STATE_DTYPE if compute_dtype == "bfloat16" else compute_dtype


def check_rate(name: str, value: float) -> float:
    """`value` as a float, or a ValueError naming the argument if not in [0, 1)."""
    if not isinstance(value, (int, float)) or not 0.0 <= value < 1.0:
        raise ValueError(
            f"Argument `{name}` must be a float in [0, 1), received {name}={value!r}."
        )
    return float(value)


def activation_name(function) -> str:
    """The serialized name of an activation ("linear" for None)."""
    return keras.activations.serialize(function) if function else "linear"


# The derivative of an activation written through its output y = phi(a), phi'(a) = f(y),
# for the activations the hand-written backward pass knows.
_DERIVATIVE_FROM_OUTPUT = {
    "tanh": lambda y: 1.0 - y * y,
    "sigmoid": lambda y: y * (1.0 - y),
    "relu": lambda y: ops.cast(y > 0, y.dtype),
    "linear": lambda y: ops.ones_like(y),
}


def derivative_from_output(function):
    """f with phi'(a) = f(phi(a)) for `function` = phi, or None when not known."""
    return _DERIVATIVE_FROM_OUTPUT.get(activation_name(function))
