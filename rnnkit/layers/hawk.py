"""Hawk's residual block (De et al., 2024), the model around the RG-LRU:

    x^ = RMSNorm(x)
    y  = x + [GeLU(x^ W_g) * RNN(conv(x^ W_x))] W_o           (temporal mixing)
    y^ = RMSNorm(y)
    z  = y + [GeLU(y^ W_1) * (y^ W_2)] W_3                     (gated MLP)

`conv` is a causal depthwise temporal convolution: conv(u)_t = sum_k w_k * u_{t-K+1+k}
+ b (K = `conv_width` taps per channel, u_s = 0 before the first step), and RNN the
recurrent layer `cell_type` names (Hawk's RG-LRU by default; any registered layer can
do the temporal mixing). rnnkit's RG-LRU projects its input once more (x~_t = x_t W_h +
b_h, `rnnkit.layers.rg_lru`), one linear map the paper's block does not have. The
residual stream keeps the input's width; the recurrence is `units` wide and the MLP
`expansion` x the input's width.
"""

from __future__ import annotations

import keras
from keras import ops

from rnnkit.layers.registry import recurrent_layer_class


@keras.saving.register_keras_serializable(package="rnnkit")
class HawkBlock(keras.layers.Layer):
    """One residual block of Hawk (De et al., 2024, "Griffin: Mixing Gated Linear
    Recurrences with Local Attention for Efficient Language Models", figure 2):
    a gated recurrent branch and a gated MLP, each after an RMSNorm and added to
    the residual stream.

    Args:
        units: width of the recurrence (the paper's D_RNN).
        cell_type: the registered recurrent layer of the temporal-mixing branch
            (`rnnkit.layers.get_recurrent`). Default: "rglru".
        conv_width: taps of the causal temporal convolution (0: none). Default: 4.
        expansion: the MLP's width over the input's. Default: 3.
        dropout: dropout rate on each branch's output before it joins the residual
            stream. Default: 0.
        stateful: carry the recurrent state and the convolution's last
            `conv_width - 1` inputs from one call to the next (a fixed batch size;
            `reset_state()` clears them). Default: `False`.
        seed: seed of the dropout masks (the block's and its recurrent layer's).

    Call arguments:
        inputs: (batch, time, features).
        training: whether dropout is active.

    Returns:
        (batch, time, features): the residual stream after the block. Masks are not
        supported (the block is for streams of tokens, such as a language model's).

    Example:
    >>> tuple(HawkBlock(8)(np.zeros((2, 5, 6))).shape)
    (2, 5, 6)
    """

    def __init__(
        self,
        units: int,
        cell_type: str = "rglru",
        conv_width: int = 4,
        expansion: int = 3,
        dropout: float = 0.0,
        stateful: bool = False,
        seed: int | None = None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        for name, value, least in (
            ("units", units, 1),
            ("conv_width", conv_width, 0),
            ("expansion", expansion, 1),
        ):
            if not isinstance(value, int) or isinstance(value, bool) or value < least:
                raise ValueError(
                    f"Argument `{name}` must be an integer of at least {least}, "
                    f"received {name}={value!r}."
                )
        if not 0.0 <= dropout < 1.0:
            raise ValueError(
                f"Argument `dropout` must be in [0, 1), received dropout={dropout!r}."
            )
        layer_class = recurrent_layer_class(cell_type)
        self.units = units
        self.cell_type = cell_type
        self.conv_width = conv_width
        self.expansion = expansion
        self.dropout = float(dropout)
        self.stateful = bool(stateful)
        self.seed = seed
        self.recurrent = layer_class(
            units,
            return_sequences=True,
            stateful=stateful,
            seed=seed,
            name=f"{cell_type}",
        )
        self.temporal_norm = keras.layers.RMSNormalization(name="temporal_norm")
        self.mlp_norm = keras.layers.RMSNormalization(name="mlp_norm")
        self.dropouts = [
            keras.layers.Dropout(
                dropout, seed=None if seed is None else seed + index, name=name
            )
            for index, name in enumerate(("temporal_dropout", "mlp_dropout"))
        ]
        self.supports_masking = False
        self._carried = _Carried()

    def build(self, input_shape):
        features = int(input_shape[-1])
        batch = input_shape[0]
        hidden = self.expansion * features

        def dense(name, shape):
            return self.add_weight(shape=shape, name=name, initializer="glorot_uniform")

        self.temporal_norm.build(input_shape)
        self.mlp_norm.build(input_shape)
        self.gate_kernel = dense("gate_kernel", (features, self.units))
        self.input_kernel = dense("input_kernel", (features, self.units))
        self.output_kernel = dense("output_kernel", (self.units, features))
        self.mlp_gate_kernel = dense("mlp_gate_kernel", (features, hidden))
        self.mlp_input_kernel = dense("mlp_input_kernel", (features, hidden))
        self.mlp_output_kernel = dense("mlp_output_kernel", (hidden, features))
        self.conv_kernel = self.conv_bias = None
        if self.conv_width:
            # Each channel starts as the identity on the current step (its last tap).
            self.conv_kernel = self.add_weight(
                shape=(self.conv_width, self.units),
                name="conv_kernel",
                initializer=_last_tap,
            )
            self.conv_bias = self.add_weight(
                shape=(self.units,), name="conv_bias", initializer="zeros"
            )
            if self.stateful:
                if batch is None:
                    raise ValueError(
                        "A stateful HawkBlock needs a fixed batch size: build it on "
                        "an input shape whose first entry is the batch size."
                    )
                # Kept out of the layer's weights, as keras.layers.RNN keeps its
                # states: a copy for another batch size takes the same weights.
                self._carried.inputs = keras.Variable(
                    ops.zeros((batch, self.conv_width - 1, self.units)),
                    trainable=False,
                    name="conv_state",
                )
        self.recurrent.build((batch, None, self.units))
        for dropout in self.dropouts:
            dropout.build(input_shape)
        self.built = True

    def convolve(self, u):
        """The causal depthwise convolution of u, (batch, time, units); a stateful
        block starts from the previous call's last inputs and keeps this call's."""
        if not self.conv_width:
            return u
        taps = self.conv_width - 1
        carried = self._carried.inputs
        if carried is not None:
            before = ops.cast(carried.value, u.dtype)
        else:
            before = ops.zeros((ops.shape(u)[0], taps, self.units), dtype=u.dtype)
        padded = ops.concatenate([before, u], axis=1)  # (batch, taps + time, units)
        out = self._taps(padded, ops.shape(u)[1])
        if carried is not None and taps:
            carried.assign(ops.cast(padded[:, -taps:, :], carried.dtype))
        return out

    def _taps(self, padded, steps):
        """The convolution's `steps` outputs, (batch, steps, units), over `padded`,
        (batch, conv_width - 1 + steps, units): each output the bias plus the
        kernel's taps over its window."""
        kernel = ops.cast(self.conv_kernel, padded.dtype)
        out = ops.cast(self.conv_bias, padded.dtype)
        for k in range(self.conv_width):
            out = out + padded[:, k : k + steps, :] * kernel[k]
        return out

    def call(self, inputs, training=False):
        def mix(u):  # the convolution, then the recurrent layer
            return self.recurrent(self.convolve(u), training=training)

        def drop(index, branch):
            return self.dropouts[index](branch, training=training)

        return self._residual(inputs, mix, _exact_gelu, drop)

    def step(self, inputs, conv_inputs, states):
        """One step of the block, for generation one token at a time (no dropout).

        Args:
            inputs: (batch, features), the step's input.
            conv_inputs: (batch, conv_width - 1, units), the convolution's inputs at
                the previous steps, oldest first (zeros at the start of a sequence);
                None for a block that keeps none (`conv_width` 0 or 1).
            states: the recurrent cell's states (`[h]`, or `[h, c]` for an LSTM),
                each (batch, units), float32.

        Returns:
            `(outputs, conv_inputs, states)`: the block's output (batch, features)
            and what the next step takes. Fed a sequence step by step from zeros,
            the outputs are the block's `call` on the whole sequence.
        """
        carried = {"conv": conv_inputs, "states": list(states)}

        def mix(u):  # (batch, units): one step of the convolution and the cell
            if self.conv_width:
                before = carried["conv"]
                if before is None:
                    before = ops.zeros((ops.shape(u)[0], 0, self.units), u.dtype)
                window = ops.concatenate(
                    [ops.cast(before, u.dtype), u[:, None, :]], axis=1
                )  # (batch, conv_width, units), oldest first
                u = self._taps(window, 1)[:, 0, :]
                carried["conv"] = window[:, 1:, :]
            cell = self.recurrent.cell
            mixed, carried["states"] = cell.step(
                cell.augment_inputs(ops.cast(u, cell.compute_dtype)),
                carried["states"],
                cell.gate_weights(),
            )
            return mixed

        inputs = ops.cast(inputs, self.compute_dtype)
        outputs = self._residual(inputs, mix, _gelu, lambda index, branch: branch)
        return outputs, carried["conv"], carried["states"]

    def _residual(self, x, mix, gelu, drop):
        """The block's equations around `mix` (convolution and recurrence) with the
        GeLU `gelu` and the branch dropout `drop(index, branch)`: call and step."""
        normed = self.temporal_norm(x)
        gate = gelu(ops.matmul(normed, self._weight(self.gate_kernel)))
        mixed = mix(ops.matmul(normed, self._weight(self.input_kernel)))
        branch = ops.matmul(
            gate * ops.cast(mixed, gate.dtype), self._weight(self.output_kernel)
        )
        y = x + drop(0, branch)
        normed = self.mlp_norm(y)
        hidden = gelu(
            ops.matmul(normed, self._weight(self.mlp_gate_kernel))
        ) * ops.matmul(normed, self._weight(self.mlp_input_kernel))
        return y + drop(1, ops.matmul(hidden, self._weight(self.mlp_output_kernel)))

    def _weight(self, variable):
        return ops.cast(variable, self.compute_dtype)

    def reset_state(self) -> None:
        """Clears the carried recurrent state and convolution inputs (stateful)."""
        if self.stateful:
            self.recurrent.reset_state()
            carried = self._carried.inputs
            if carried is not None:
                carried.assign(ops.zeros_like(carried.value))

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        return {
            **super().get_config(),
            "units": self.units,
            "cell_type": self.cell_type,
            "conv_width": self.conv_width,
            "expansion": self.expansion,
            "dropout": self.dropout,
            "stateful": self.stateful,
            "seed": self.seed,
        }


class _Carried:
    """Holds the convolution's carried inputs outside Keras' weight tracking."""

    inputs = None


def _exact_gelu(x):
    """TensorFlow's exact GeLU (`ops.gelu`), what `call` trains with."""
    return ops.gelu(x, approximate=False)


def _gelu(x):
    """The exact GeLU, x Phi(x) = x (1 + erf(x / sqrt 2)) / 2, written with erf for
    the step, which is exported: TensorFlow's own (`ops.gelu`, what `call` runs)
    takes erfc, which ONNX lacks. The two agree to float32 rounding."""
    return 0.5 * x * (1.0 + ops.erf(x * 0.7071067811865476))


def _last_tap(shape, dtype=None):
    """A depthwise kernel (taps, channels) that passes the current step through."""
    return ops.concatenate(
        [ops.zeros((shape[0] - 1, shape[1]), dtype), ops.ones((1, shape[1]), dtype)]
    )


__all__ = ["HawkBlock"]
