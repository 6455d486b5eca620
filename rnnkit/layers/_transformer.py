"""What the Transformer encoder and decoder blocks share: arguments, sublayers, masks.

Every sublayer of a block (attention or feed-forward) is wrapped the same way,
with the layer normalisation after the residual sum (post-norm, Vaswani et al.
2017) or before the sublayer (pre-norm, Xiong et al. 2020):

    post-norm:  y = LayerNorm(x + Dropout(Sublayer(x)))
    pre-norm:   y = x + Dropout(Sublayer(LayerNorm(x)))
"""

import keras
from keras import ops

from rnnkit._keras_private import get_keras_mask
from rnnkit.layers import _attention
from rnnkit.layers.multi_head_attention import MultiHeadAttention


class TransformerBlock(keras.layers.Layer):
    """Arguments, feed-forward sublayer and residual wrapping of both blocks."""

    def __init__(
        self,
        num_heads,
        feedforward_dim,
        key_dim=None,
        activation="relu",
        norm_first=False,
        dropout=0.0,
        attention_dropout=0.0,
        feedforward_dropout=0.0,
        layer_norm_epsilon=1e-5,
        use_bias=True,
        kernel_initializer="glorot_uniform",
        bias_initializer="zeros",
        seed=None,
        **kwargs,
    ):
        for name, size in [
            ("num_heads", num_heads),
            ("feedforward_dim", feedforward_dim),
        ]:
            if not _is_positive_int(size):
                raise ValueError(
                    f"`{name}` must be a positive integer. Received: {size!r}"
                )
        if key_dim is not None and not _is_positive_int(key_dim):
            raise ValueError(
                f"`key_dim` must be a positive integer or None. Received: {key_dim!r}"
            )
        for name, rate in [
            ("dropout", dropout),
            ("attention_dropout", attention_dropout),
            ("feedforward_dropout", feedforward_dropout),
        ]:
            if isinstance(rate, bool) or not isinstance(rate, (int, float)):
                raise ValueError(f"`{name}` must be in [0, 1). Received: {rate!r}")
            if not 0.0 <= rate < 1.0:
                raise ValueError(f"`{name}` must be in [0, 1). Received: {rate!r}")
        for name, flag in [("norm_first", norm_first), ("use_bias", use_bias)]:
            if not isinstance(flag, bool):
                raise ValueError(f"`{name}` must be True or False. Received: {flag!r}")
        if (
            isinstance(layer_norm_epsilon, bool)
            or not isinstance(layer_norm_epsilon, (int, float))
            or layer_norm_epsilon <= 0
        ):
            raise ValueError(
                "`layer_norm_epsilon` must be a positive number. "
                f"Received: {layer_norm_epsilon!r}"
            )
        super().__init__(**kwargs)
        self.num_heads = num_heads
        self.feedforward_dim = feedforward_dim
        self.key_dim = key_dim
        self.activation = keras.activations.get(activation)
        self.norm_first = norm_first
        self.dropout = dropout
        self.attention_dropout = attention_dropout
        self.feedforward_dropout = feedforward_dropout
        self.layer_norm_epsilon = layer_norm_epsilon
        self.use_bias = use_bias
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.bias_initializer = keras.initializers.get(bias_initializer)
        self.seed = seed
        self.supports_masking = True
        self._seed_offset = 0

    def _next_seed(self):
        """A seed per random sublayer, so that no two drop the same units."""
        if self.seed is None:
            return None
        self._seed_offset += 1
        return self.seed + self._seed_offset

    def _check_inputs_shape(self, inputs_shape, what="inputs"):
        if len(inputs_shape) != 3 or inputs_shape[-1] is None:
            raise ValueError(
                f"{self.name} expects `{what}` of shape (batch, T, d) with a known "
                f"d. Received: {what}_shape={inputs_shape}"
            )
        model_dim = inputs_shape[-1]
        if what == "inputs" and self.key_dim is None and model_dim % self.num_heads:
            raise ValueError(
                f"{self.name}: the model size d={model_dim} is not a multiple of "
                f"num_heads={self.num_heads}; pass `key_dim` explicitly."
            )
        return model_dim

    def _build_attention(self, name, query_shape, value_shape):
        """A MultiHeadAttention sublayer, its LayerNorm and its residual dropout."""
        model_dim = query_shape[-1]
        attention = MultiHeadAttention(
            self.num_heads,
            self.key_dim or model_dim // self.num_heads,
            dropout=self.attention_dropout,
            use_bias=self.use_bias,
            kernel_initializer=_attention.clone_initializer(self.kernel_initializer),
            bias_initializer=_attention.clone_initializer(self.bias_initializer),
            seed=self._next_seed(),
            dtype=self.dtype_policy,
            name=name,
        )
        attention.build(query_shape, value_shape)
        return attention, self._build_norm(f"{name}_norm", query_shape)

    def _build_norm(self, name, shape):
        norm = keras.layers.LayerNormalization(
            epsilon=self.layer_norm_epsilon, dtype=self.dtype_policy, name=name
        )
        norm.build(shape)
        return norm

    def _build_feedforward(self, inputs_shape):
        """FFN(x) = activation(x W_1 + b_1) W_2 + b_2, d -> feedforward_dim -> d."""
        model_dim = inputs_shape[-1]
        dense_options = {
            "use_bias": self.use_bias,
            "dtype": self.dtype_policy,
        }
        self.feedforward_inner = keras.layers.Dense(
            self.feedforward_dim,
            activation=self.activation,
            kernel_initializer=_attention.clone_initializer(self.kernel_initializer),
            bias_initializer=_attention.clone_initializer(self.bias_initializer),
            name="feedforward_inner",
            **dense_options,
        )
        self.feedforward_inner.build(inputs_shape)
        self.feedforward_output = keras.layers.Dense(
            model_dim,
            kernel_initializer=_attention.clone_initializer(self.kernel_initializer),
            bias_initializer=_attention.clone_initializer(self.bias_initializer),
            name="feedforward_output",
            **dense_options,
        )
        self.feedforward_output.build((*inputs_shape[:-1], self.feedforward_dim))
        self.feedforward_norm = self._build_norm("feedforward_norm", inputs_shape)
        self.feedforward_dropout_layer = keras.layers.Dropout(
            self.feedforward_dropout, seed=self._next_seed(), dtype=self.dtype_policy
        )
        # One residual dropout layer per sublayer: each draws its own units.
        self.residual_dropouts = [
            keras.layers.Dropout(
                self.dropout, seed=self._next_seed(), dtype=self.dtype_policy
            )
            for _ in range(self._sublayer_count)
        ]

    def _sublayer_input(self, x, norm):
        """What the sublayer reads: LayerNorm(x) before it (pre-norm), else x."""
        return norm(x) if self.norm_first else x

    def _residual(self, x, sublayer_output, norm, index, training):
        """x + Dropout(sublayer_output), normalised after the sum in post-norm."""
        dropped = self.residual_dropouts[index](sublayer_output, training=training)
        y = x + dropped  # (batch, T, d)
        return y if self.norm_first else norm(y)

    def _feedforward_sublayer(self, x, training):
        hidden = self.feedforward_inner(
            self._sublayer_input(x, self.feedforward_norm)
        )  # (batch, T, feedforward_dim)
        hidden = self.feedforward_dropout_layer(hidden, training=training)
        output = self.feedforward_output(hidden)  # (batch, T, d)
        return self._residual(
            x, output, self.feedforward_norm, self._sublayer_count - 1, training
        )

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "num_heads": self.num_heads,
                "feedforward_dim": self.feedforward_dim,
                "key_dim": self.key_dim,
                "activation": keras.activations.serialize(self.activation),
                "norm_first": self.norm_first,
                "dropout": self.dropout,
                "attention_dropout": self.attention_dropout,
                "feedforward_dropout": self.feedforward_dropout,
                "layer_norm_epsilon": self.layer_norm_epsilon,
                "use_bias": self.use_bias,
                "kernel_initializer": keras.initializers.serialize(
                    self.kernel_initializer
                ),
                "bias_initializer": keras.initializers.serialize(self.bias_initializer),
                "seed": self.seed,
            }
        )
        return config


def padding_or_keras_mask(tensor, padding_mask):
    """`padding_mask` as bool, or else the Keras mask `tensor` carries (or None)."""
    if padding_mask is None:
        padding_mask = get_keras_mask(tensor)
    return None if padding_mask is None else ops.cast(padding_mask, "bool")


def _is_positive_int(value):
    return isinstance(value, int) and not isinstance(value, bool) and value > 0
