"""The diagonal linear recurrence h_t = a_t * h_{t-1} + b_t over a whole sequence.

Recurrences whose gates read the input only (minGRU and minLSTM, LRU, RG-LRU) reduce to
this one: the coefficients a_t and b_t of every step are computed at once from the
inputs, and the states follow from them without a loop over time. Three forms, with
the same numbers:

- `"parallel"`: a prefix scan (Blelloch 1990) under the associative operator
  (a_1, b_1) . (a_2, b_2) = (a_1 a_2, a_2 b_1 + b_2), on `keras.ops.associative_scan`:
  O(log T) sequential depth, every backend.
- `"log"`: the same sums in log space (Heinsen 2023), h_t = exp(A_t) (h_0 +
  sum_k b_k exp(-A_k)) with A_t = sum_{j<=t} log a_j, the sums as cumulative
  log-sum-exps of the positive and the negative parts of b; for coefficients given
  as logarithms (`log_a`, e.g. minGRU's -softplus). A long sequence with strong
  decay loses digits here (A_t and the log-sums are large and cancel): prefer
  `"parallel"` unless the coefficients come as logarithms.
- `"sequential"`: one step at a time, what a step of inference computes: on
  TensorFlow an XLA-compiled loop whose gradient is the same recurrence run backwards
  (`_scan_tf`), elsewhere `keras.ops.scan`.

All three take (batch, steps, units) coefficients and an optional initial state
(batch, units), and return every step's state, (batch, steps, units).
"""

from __future__ import annotations

import keras
from keras import ops

METHODS = ("parallel", "log", "sequential")

# A finite stand-in for log(0): logaddexp(-inf, -inf) is NaN on some backends.
_LOG_ZERO = -1e30


def _combine(earlier, later):
    """(a_1, b_1) . (a_2, b_2) = (a_1 a_2, a_2 b_1 + b_2): two steps as one."""
    a_1, b_1 = earlier
    a_2, b_2 = later
    return a_1 * a_2, a_2 * b_1 + b_2


def _with_initial_state(a, b, initial_state):
    """b with a_0 h_0 folded into its first step, so that every form starts from 0."""
    if initial_state is None:
        return b
    first = a[:, :1] * ops.cast(initial_state, b.dtype)[:, None, :] + b[:, :1]
    return ops.concatenate([first, b[:, 1:]], axis=1)


def linear_scan(a, b, initial_state=None, method="parallel"):
    """Every h_t of h_t = a_t * h_{t-1} + b_t, h_{-1} = `initial_state` (or 0).

    Args:
        a, b: (batch, steps, units) tensors; `a` the decay of each step. With
            `method="log"`, `a` is given as its logarithm (any real number).
        initial_state: (batch, units), or None for zeros.
        method: "parallel", "log" or "sequential" (the module docstring).

    Returns:
        (batch, steps, units): the state after every step.
    """
    if method not in METHODS:
        raise ValueError(
            f"Argument `method` must be one of {METHODS}, received {method!r}."
        )
    if len(a.shape) != 3 or len(b.shape) != 3:
        raise ValueError(
            "Arguments `a` and `b` must be (batch, steps, units) tensors, received "
            f"shapes {tuple(a.shape)} and {tuple(b.shape)}."
        )
    if method == "log":
        return _log_scan(a, b, initial_state)
    b = _with_initial_state(a, b, initial_state)
    if method == "parallel":
        _, h = _prefix_scan(_combine, (a, b), (1.0, 0.0))
        return h
    return _sequential_scan(a, b)


def _prefix_scan(combine, elems, identity):
    """The inclusive prefix scan of `elems` (a tuple of (batch, steps, units)
    tensors) along the steps under `combine(earlier, later)`.

    With the number of steps known when traced, `keras.ops.associative_scan`
    (Blelloch's, O(T) work). Without it (a TensorFlow graph of `keras.Input((None,
    features))`, which that op cannot take), Hillis and Steele's doubling: after the
    round with offset d every step holds the combination of the 2d steps up to it,
    ceil(log2 T) rounds, O(T log T) work, each step beyond the start combined with
    `identity` (one value per element)."""
    if elems[0].shape[1] is not None:
        return _shaped_like(ops.associative_scan(combine, elems, axis=1), elems)
    steps = ops.shape(elems[0])[1]
    position = ops.reshape(ops.arange(steps), (1, -1, 1))

    def body(offset, *current):
        inside = position >= offset
        earlier = tuple(
            ops.where(inside, ops.roll(x, offset, axis=1), ops.cast(value, x.dtype))
            for x, value in zip(current, identity, strict=True)
        )
        return (offset * 2, *combine(earlier, current))

    def more(offset, *_):
        return offset < steps

    _, *scanned = ops.while_loop(more, body, (ops.convert_to_tensor(1), *elems))
    return _shaped_like(scanned, elems)


def _shaped_like(results, elems):
    """`results` with the static shapes of `elems`, which TensorFlow's scans lose
    (a layer after them needs at least the number of features)."""
    for result, elem in zip(results, elems, strict=True):
        if hasattr(result, "set_shape"):
            result.set_shape(elem.shape)
    return tuple(results)


def _sequential_scan(a, b):
    if keras.backend.backend() == "tensorflow":
        from rnnkit.layers._scan_tf import sequential_scan

        return sequential_scan(a, b)

    def step(h, coefficients):
        a_t, b_t = coefficients
        h = a_t * h + b_t
        return h, h

    time_major = (ops.transpose(a, (1, 0, 2)), ops.transpose(b, (1, 0, 2)))
    _, h = ops.scan(step, ops.zeros_like(b[:, 0]), time_major)
    return ops.transpose(h, (1, 0, 2))


def _log_cumsum_exp(x):
    """log(cumsum(exp(x))) along axis 1, without overflow."""

    def add(earlier, later):
        return (ops.logaddexp(earlier[0], later[0]),)

    (total,) = _prefix_scan(add, (x,), (_LOG_ZERO,))
    return total


def _safe_log(x):
    """log(x) where x > 0, `_LOG_ZERO` elsewhere, with finite gradients."""
    positive = x > 0
    return ops.where(positive, ops.log(ops.where(positive, x, 1.0)), _LOG_ZERO)


def _log_scan(log_a, b, initial_state):
    """h_t = exp(A_t) sum_{k<=t} b'_k exp(-A_k), A_t = cumsum(log a), b' = b with
    a_0 h_0 folded in, the sum split by sign so that each part has a logarithm (a
    b'_k of exactly 0 is in neither part, and passes no gradient)."""
    b = _with_initial_state(ops.exp(log_a), b, initial_state)
    decay = ops.cumsum(log_a, axis=1)  # A_t
    positive = _log_cumsum_exp(_safe_log(b) - decay)
    negative = _log_cumsum_exp(_safe_log(-b) - decay)
    return ops.exp(decay + positive) - ops.exp(decay + negative)


__all__ = ["METHODS", "linear_scan"]
