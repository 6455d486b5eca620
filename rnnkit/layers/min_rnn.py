"""minGRU and minLSTM (Feng et al., 2024): a GRU and an LSTM whose gates read the
input only, so that a whole sequence trains with a parallel scan.

    minGRU:  z_t = sigmoid(x_t W_z + b_z)            h~_t = phi(x_t W_h + b_h)
             h_t = (1 - z_t) * h_{t-1} + z_t * h~_t
    minLSTM: f_t = sigmoid(x_t W_f + b_f)            i_t = sigmoid(x_t W_i + b_i)
             f'_t = f_t / (f_t + i_t)                i'_t = i_t / (f_t + i_t)
             h_t = f'_t * h_{t-1} + i'_t * h~_t      (h~_t as minGRU's)

with phi linear by default, as in the paper. Neither gate reads h_{t-1}, so every
step's a_t and b_t of h_t = a_t * h_{t-1} + b_t come from the inputs at once and the
states from `rnnkit.layers.scan.linear_scan`: as a prefix scan, or one step at a time
(`scan="sequential"`, which `scan="auto"` runs on a TensorFlow CPU, where it trained
faster than the prefix scan: `_ScanLayer.method`). The cells also run one step at a
time from the inputs (`step`): that is what export traces, what a step of generation
computes and what `keras.layers.RNN` runs.
"""

from __future__ import annotations

import keras
from keras import ops

from rnnkit.layers import _export
from rnnkit.layers._cell_math import STATE_DTYPE
from rnnkit.layers.recurrent import RecurrentCell, RecurrentLayer
from rnnkit.layers.scan import METHODS, linear_scan


class _InputGatedCell(RecurrentCell):
    """A cell whose gates read x_t only: `kernel` holds the gates' blocks side by
    side (Keras' layout), there is no `recurrent_kernel`, and `coefficients` gives a
    whole sequence's a_t and b_t."""

    def __init__(
        self,
        units,
        activation="linear",
        recurrent_dropout=0.0,
        weight_dropout=0.0,
        **kwargs,
    ):
        for name, rate in (
            ("recurrent_dropout", recurrent_dropout),
            ("weight_dropout", weight_dropout),
        ):
            if rate:
                raise ValueError(
                    f"{type(self).__name__} has no recurrent weights, so no {name} "
                    f"(received {rate!r}): use `dropout`, which drops inputs."
                )
        super().__init__(units, activation=activation, **kwargs)
        self.state_size = units

    def build(self, input_shape):
        self.kernel = self.add_weight(
            shape=(input_shape[-1], self.units * self.num_gates),
            name="kernel",
            initializer=self.kernel_initializer,
            regularizer=self.kernel_regularizer,
            constraint=self.kernel_constraint,
        )
        self._add_bias((self.units * self.num_gates,), self.bias_initializer)

    def gate_weights(self):
        """Each gate's [W_g; b_g], in the compute dtype (no recurrent blocks), then
        the cell's other weights (`extra_weights`): a step reads its weights from
        these only (a compiled loop hands them in)."""
        biases = (
            self._split_gates(self.bias) if self.use_bias else [None] * self.num_gates
        )
        return [
            *(
                self._with_bias_row(kernel, bias)
                for kernel, bias in zip(
                    self._split_gates(self.kernel), biases, strict=True
                )
            ),
            *self.extra_weights(),
        ]

    def extra_weights(self):
        """Weights beyond the gates' (e.g. the RG-LRU's decay), float32."""
        return []

    def projections(self, inputs):
        """x W_g + b_g for every gate, over a whole sequence (or one step)."""
        kernel = ops.cast(self.kernel, self.compute_dtype)
        projected = ops.matmul(ops.cast(inputs, self.compute_dtype), kernel)
        if self.use_bias:
            projected = projected + ops.cast(self.bias, self.compute_dtype)
        return ops.split(projected, self.num_gates, axis=-1)

    def step(self, inputs, states, weights, input_mask=None, recurrent_mask=None):
        """One step: `inputs` is [x_t, 1]; h_t = a_t * h_{t-1} + b_t."""
        (h_prev,) = states
        x_t = inputs if input_mask is None else inputs * input_mask
        gates, extra = weights[: self.num_gates], weights[self.num_gates :]
        projected = [ops.matmul(x_t, weight) for weight in gates]
        a_t, b_t = self.decay_and_input(projected, *extra)
        h_t = a_t * h_prev + b_t
        return ops.cast(h_t, self.compute_dtype), [h_t]

    def coefficients(self, inputs, log=False):
        """The a_t (or log a_t) and b_t of every step of `inputs`, float32."""
        projected = self.projections(inputs)
        extra = self.extra_weights()
        if log:
            return self.log_decay_and_input(projected, *extra)
        return self.decay_and_input(projected, *extra)

    def log_decay_and_input(self, projected, *extra):
        """(log a_t, b_t), float32; a cell whose two share work computes it once."""
        return (
            self.log_decay(projected, *extra),
            self.decay_and_input(projected, *extra)[1],
        )

    def candidate(self, projected):
        """h~_t = phi(x_t W_h + b_h), float32."""
        return ops.cast(self.activation(projected), STATE_DTYPE)

    def get_config(self):
        config = super().get_config()
        for key in (
            "recurrent_initializer",
            "recurrent_regularizer",
            "recurrent_constraint",
            "recurrent_dropout",
            "weight_dropout",
        ):
            config.pop(key)
        return config


@keras.saving.register_keras_serializable(package="rnnkit")
class MinGRUCell(_InputGatedCell):
    """One step of minGRU (Feng et al., 2024): `kernel` is [W_z W_h], `bias`
    [b_z b_h]; h_t = (1 - z_t) * h_{t-1} + z_t * phi(x_t W_h + b_h).

    Args:
        units: Positive integer, the size of the state.
        activation: phi of the candidate state. Default: linear (the paper's).
        use_bias, kernel_initializer, bias_initializer: As for `GRUCell`.
        kernel_regularizer, bias_regularizer, kernel_constraint: As for `GRUCell`.
        bias_constraint, dropout, seed: As for `GRUCell` (there are no recurrent
            weights, so no recurrent initializer, regularizer, constraint or
            dropout).
    """

    num_gates = 2

    def decay_and_input(self, projected):
        gate, candidate = projected
        z = ops.sigmoid(ops.cast(gate, STATE_DTYPE))
        return 1.0 - z, z * self.candidate(candidate)

    def log_decay(self, projected):
        # log(1 - sigmoid(g)) = -softplus(g), without rounding 1 - z to 0.
        return -ops.softplus(ops.cast(projected[0], STATE_DTYPE))


@keras.saving.register_keras_serializable(package="rnnkit")
class MinLSTMCell(_InputGatedCell):
    """One step of minLSTM (Feng et al., 2024): `kernel` is [W_f W_i W_h], `bias`
    [b_f b_i b_h]; the forget and input gates normalised to sum to one,
    h_t = f'_t * h_{t-1} + i'_t * phi(x_t W_h + b_h).

    Args: as for `MinGRUCell`.
    """

    num_gates = 3

    def decay_and_input(self, projected):
        # f' = f / (f + i) = sigmoid(log f - log i), and i' = sigmoid(log i - log f):
        # the quotient is 0 / 0 where both sigmoids underflow (gates below -88).
        odds = self._log_odds(projected)
        return ops.sigmoid(odds), self._input(odds, projected)

    def log_decay(self, projected):
        return _log_sigmoid(self._log_odds(projected))

    def log_decay_and_input(self, projected):
        odds = self._log_odds(projected)
        return _log_sigmoid(odds), self._input(odds, projected)

    def _input(self, odds, projected):
        """b_t = i'_t * h~_t, with i'_t = sigmoid(log i_t - log f_t)."""
        return ops.sigmoid(-odds) * self.candidate(projected[2])

    def _log_odds(self, projected):
        """log f_t - log i_t, finite for any gates."""
        forget, update = (ops.cast(g, STATE_DTYPE) for g in projected[:2])
        return _log_sigmoid(forget) - _log_sigmoid(update)


def _log_sigmoid(x):
    """log sigmoid(x) = -softplus(-x) = -(m + log(exp(-m) + exp(-x - m))) with
    m = max(-x, 0) held constant: finite for every x (the sum is in [1, 2]), its
    gradient sigmoid(-x) everywhere, and built from ops every runtime has (LiteRT
    turns `softplus` into log(1 + exp(x)), which overflows beyond 88)."""
    m = ops.stop_gradient(ops.maximum(-x, 0.0))
    return -(m + ops.log(ops.exp(-m) + ops.exp(-x - m)))


# The arguments that belong to the layer; the others are the cell's.
_LAYER_OPTIONS = (
    "return_sequences", "return_state", "go_backwards", "stateful", "unroll",
    "zero_output_for_mask", "use_cudnn", "jit_compile", "batch_shards",
    "activity_regularizer", "name", "dtype", "trainable",
)  # fmt: skip


class _ScanLayer(RecurrentLayer):
    """A `RecurrentLayer` whose cell's gates read the input only: a call computes
    every step's coefficients at once and runs `linear_scan` over them in the form
    `scan` names; export traces the cell's step loop instead."""

    def __init__(self, units, scan="auto", **kwargs):
        if scan not in ("auto", *METHODS):
            raise ValueError(
                f"Argument `scan` must be 'auto' or one of {METHODS}, received "
                f"scan={scan!r}."
            )
        options = {key: kwargs.pop(key) for key in _LAYER_OPTIONS if key in kwargs}
        cell = self.cell_class(
            units,
            dtype=options.get("dtype"),
            trainable=options.get("trainable", True),
            name=f"{self.cell_class.__name__[:-4].lower()}_cell",
            **kwargs,
        )
        super().__init__(cell, **options)
        self.scan = scan

    def method(self) -> str:
        """The form a call runs: `scan`, or for "auto" the sequential form on
        TensorFlow with no GPU visible (there the prefix scan's passes over the whole
        sequence are bound by memory, and the XLA-compiled loop trained faster at
        every size measured: docs/performance.md, "Scan recurrences") and the prefix
        scan elsewhere."""
        if self.scan != "auto":
            return self.scan
        if keras.backend.backend() == "tensorflow":
            import tensorflow as tf

            if not tf.config.get_visible_devices("GPU"):
                return "sequential"
        return "parallel"

    def inner_loop(self, sequences, initial_state, mask, training=False):
        if isinstance(mask, (list, tuple)):
            mask = mask[0]
        method = self.method()
        if _export.active():
            return super().inner_loop(sequences, initial_state, mask, training)
        self.execution_path = f"{method} scan: the gates read the inputs only"
        return self._scan(sequences, initial_state[0], mask, training, method)

    def _scan(self, sequences, h_0, mask, training, method):
        """Keras' (last output, outputs, states) of the loop, from one scan."""
        cell = self.cell
        if self.go_backwards:
            sequences = ops.flip(sequences, axis=1)
            mask = None if mask is None else ops.flip(mask, axis=1)
        input_mask, _ = cell.dropout_masks(sequences[:, 0, :], h_0, training)
        if input_mask is not None:
            sequences = sequences * ops.expand_dims(input_mask, 1)
        a, b = cell.coefficients(sequences, log=method == "log")
        if mask is not None:
            # A masked step keeps the state: a_t = 1 (log a_t = 0), b_t = 0.
            keep = ops.expand_dims(ops.cast(mask, STATE_DTYPE), -1)
            a = a * keep if method == "log" else a * keep + (1.0 - keep)
            b = b * keep
        h = linear_scan(a, b, ops.cast(h_0, STATE_DTYPE), method=method)
        outputs = h
        if mask is not None and (
            self.zero_output_for_mask or keras.backend.backend() != "jax"
        ):
            # As Keras' loop on this backend: a masked step outputs zeros
            # (zero_output_for_mask) or the previous output, which before the first
            # unmasked step is zeros (TensorFlow, PyTorch) or, on JAX, the state
            # carried (h, as here).
            shown = keep if self.zero_output_for_mask else ops.cumsum(keep, axis=1) > 0
            outputs = ops.where(shown, h, 0.0)
        outputs = ops.cast(outputs, cell.compute_dtype)
        return outputs[:, -1], outputs, [h[:, -1]]

    def get_config(self):
        return {**super().get_config(), "scan": self.scan}


@keras.saving.register_keras_serializable(package="rnnkit")
class MinGRU(_ScanLayer):
    """minGRU over a sequence (Feng et al., 2024, "Were RNNs All We Needed?").

    `MinGRUCell`'s recurrence h_t = (1 - z_t) * h_{t-1} + z_t * h~_t, whose gate and
    candidate read x_t only, so that the whole sequence can run as one prefix scan
    (`rnnkit.layers.scan.linear_scan`), with no loop over time, or as the cell's
    step loop (`scan`; `execution_path` says which ran). Masks,
    `return_sequences`, `return_state`, initial states, `stateful`, `go_backwards`
    and `keras.layers.Bidirectional` work as for `GRU`.

    Args:
        units, activation, use_bias: As for `MinGRUCell`.
        kernel_initializer, bias_initializer: As for `MinGRUCell`.
        kernel_regularizer, bias_regularizer: As for `MinGRUCell`.
        kernel_constraint, bias_constraint, dropout, seed: As for `MinGRUCell`.
        scan: "parallel" (a prefix scan), "log" (the same in log space, Heinsen's
            form), "sequential" (one step at a time over the coefficients, on
            TensorFlow an XLA-compiled loop with its gradient written out) or
            "auto" (default: "sequential" on TensorFlow with no GPU visible, where
            it trained faster, else the prefix scan; `method()`).
        return_sequences, return_state, go_backwards, stateful: As for `GRU`.
        unroll, activity_regularizer: As for `GRU` (`unroll` for the step loop).

    Call arguments, returns: as for `GRU`.

    Example:
    >>> tuple(MinGRU(4, return_sequences=True)(np.zeros((2, 10, 8))).shape)
    (2, 10, 4)
    """

    cell_class = MinGRUCell


@keras.saving.register_keras_serializable(package="rnnkit")
class MinLSTM(_ScanLayer):
    """minLSTM over a sequence (Feng et al., 2024): `MinLSTMCell`'s recurrence, run
    as one scan like `MinGRU`, with the same arguments. One state, h_t (the paper
    drops the LSTM's output gate and its cell state)."""

    cell_class = MinLSTMCell


__all__ = ["MinGRU", "MinGRUCell", "MinLSTM", "MinLSTMCell"]
