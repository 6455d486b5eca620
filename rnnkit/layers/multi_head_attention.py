"""Multi-head scaled dot-product attention (Vaswani et al., 2017)."""

import math

import keras
from keras import ops

from rnnkit.layers import _attention


@keras.saving.register_keras_serializable(package="rnnkit")
class MultiHeadAttention(keras.layers.Layer):
    """r heads of scaled dot-product attention over learned projections.

    For each head h = 1..r, with learned projections of query, key and value:

        Q_h = query W_h^Q + b_h^Q           (Tq, key_dim)
        K_h = key   W_h^K + b_h^K           (Tv, key_dim)
        V_h = value W_h^V + b_h^V           (Tv, value_dim)
        A_h = softmax(Q_h K_h^T / sqrt(key_dim))       (Tq, Tv)
        head_h = A_h V_h                    (Tq, value_dim)
        output = concat(head_1..head_r) W^O + b^O      (Tq, output_dim)

    Weight-compatible with `keras.layers.MultiHeadAttention` (rank-3 inputs):
    weights `query_kernel` (query_dim, heads, key_dim), `query_bias` (heads,
    key_dim), `key_kernel`, `key_bias`, `value_kernel` (value_in_dim, heads,
    value_dim), `value_bias`, `output_kernel` (heads, value_dim, output_dim),
    `output_bias` (output_dim,), in Keras' order, so
    `layer.set_weights(keras_layer.get_weights())` works both ways.

    Masks follow Keras: padded keys (`value_mask`/`key_mask`) get exactly zero
    weight; a padded query (`query_mask`) attends to nothing, so its heads are zero
    and its output is `output_bias`; `attention_mask` (batch, Tq, Tv) says which
    query may see which key; `use_causal_mask=True` lets query i see keys j <= i.
    Keras masks on the inputs (e.g. from `Embedding(mask_zero=True)`) are used the
    same way and the query's mask is passed on. Two differences from Keras: an
    explicit `query_mask` argument is honoured (Keras reads only the query's Keras
    mask), and a padded query's weights are always zero (Keras' fused path, taken
    when no scores are returned, gives it uniform weights instead).

    `call` is `project_key_value` (K_h and V_h of every head) followed by
    `attend`; a decoder that caches K and V, such as `TransformerDecoderBlock`,
    calls the two itself.

    Args:
        num_heads: int, the number of heads r.
        key_dim: int, the size of each head's query and key projection.
        value_dim: int or None, default None (= key_dim). The size of each head's
            value projection.
        output_dim: int or None, default None (= the query's size). The size of the
            output (Keras' `output_shape` for rank-3 inputs).
        dropout: float in [0, 1), default 0.0. Dropout on the attention weights.
        use_bias: bool, default True. Learn the four biases.
        kernel_initializer: default "glorot_uniform".
        bias_initializer: default "zeros".
        kernel_regularizer, bias_regularizer: default None.
        kernel_constraint, bias_constraint: default None.
        seed: int or None, default None. Seed for the dropout.
        **kwargs: base layer arguments, such as `name` and `dtype`.

    Call arguments:
        query: (batch, Tq, query_dim).
        value: (batch, Tv, value_in_dim).
        key: (batch, Tv, key_in_dim); defaults to `value`.
        query_mask: bool (batch, Tq).
        value_mask: bool (batch, Tv).
        key_mask: bool (batch, Tv).
        attention_mask: bool (batch, Tq, Tv).
        use_causal_mask: bool, default False.
        return_attention_scores: bool, default False. Also return the weights.
        training: bool; dropout is applied only when True.

    Returns:
        The output (batch, Tq, output_dim); with `return_attention_scores=True`,
        the pair `(output, weights)` with weights (batch, heads, Tq, Tv), taken
        before dropout.

    Example:
    >>> tokens = np.random.rand(2, 10, 64).astype("float32")
    >>> output, weights = MultiHeadAttention(num_heads=8, key_dim=16)(
    ...     tokens, tokens, use_causal_mask=True, return_attention_scores=True)
    >>> tuple(output.shape), tuple(weights.shape)
    ((2, 10, 64), (2, 8, 10, 10))

    Reference:
        - [Vaswani et al., 2017](https://arxiv.org/abs/1706.03762)
    """

    def __init__(
        self,
        num_heads,
        key_dim,
        value_dim=None,
        output_dim=None,
        dropout=0.0,
        use_bias=True,
        kernel_initializer="glorot_uniform",
        bias_initializer="zeros",
        kernel_regularizer=None,
        bias_regularizer=None,
        kernel_constraint=None,
        bias_constraint=None,
        seed=None,
        **kwargs,
    ):
        for name, size in [("num_heads", num_heads), ("key_dim", key_dim)]:
            if not _is_positive_int(size):
                raise ValueError(
                    f"`{name}` must be a positive integer. Received: {size!r}"
                )
        for name, size in [("value_dim", value_dim), ("output_dim", output_dim)]:
            if size is not None and not _is_positive_int(size):
                raise ValueError(
                    f"`{name}` must be a positive integer or None. Received: {size!r}"
                )
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"`dropout` must be in [0, 1). Received: {dropout!r}")
        if not isinstance(use_bias, bool):
            raise ValueError(
                f"`use_bias` must be True or False. Received: {use_bias!r}"
            )
        super().__init__(**kwargs)
        self.num_heads = num_heads
        self.key_dim = key_dim
        self.value_dim = value_dim
        self.output_dim = output_dim
        self.dropout = dropout
        self.use_bias = use_bias
        _attention.set_weight_options(
            self,
            kernel_initializer=kernel_initializer,
            bias_initializer=bias_initializer,
            kernel_regularizer=kernel_regularizer,
            bias_regularizer=bias_regularizer,
            kernel_constraint=kernel_constraint,
            bias_constraint=bias_constraint,
        )
        self.seed = seed
        self.seed_generator = keras.random.SeedGenerator(seed) if dropout else None
        self.supports_masking = True

    def build(self, query_shape, value_shape, key_shape=None):
        key_shape = value_shape if key_shape is None else key_shape
        _attention.check_value_and_key(self.name, value_shape, key_shape)
        if len(query_shape) != 3:
            raise ValueError(
                f"{self.name} needs a query of shape (batch, Tq, dim). "
                f"Received: query_shape={query_shape}"
            )
        heads = self.num_heads
        value_dim = self.value_dim or self.key_dim
        output_dim = self.output_dim or query_shape[-1]
        # Keras' order: query, key, value, output; kernel before bias.
        self.query_kernel, self.query_bias = self._add_projection(
            "query", (query_shape[-1], heads, self.key_dim), (heads, self.key_dim)
        )
        self.key_kernel, self.key_bias = self._add_projection(
            "key", (key_shape[-1], heads, self.key_dim), (heads, self.key_dim)
        )
        self.value_kernel, self.value_bias = self._add_projection(
            "value", (value_shape[-1], heads, value_dim), (heads, value_dim)
        )
        self.output_kernel, self.output_bias = self._add_projection(
            "output", (heads, value_dim, output_dim), (output_dim,)
        )

    def _add_projection(self, name, kernel_shape, bias_shape):
        """Creates `{name}_kernel` and, with `use_bias`, `{name}_bias` (else None)."""
        kernel = self.add_weight(
            name=f"{name}_kernel",
            shape=kernel_shape,
            initializer=_attention.clone_initializer(self.kernel_initializer),
            regularizer=self.kernel_regularizer,
            constraint=self.kernel_constraint,
        )
        if not self.use_bias:
            return kernel, None
        bias = self.add_weight(
            name=f"{name}_bias",
            shape=bias_shape,
            initializer=_attention.clone_initializer(self.bias_initializer),
            regularizer=self.bias_regularizer,
            constraint=self.bias_constraint,
        )
        return kernel, bias

    def _project(self, inputs, kernel, bias):
        """inputs W_h + b_h for every head h: (batch, T, dim) -> (batch, heads, T, d).

        Heads-first output, so that attention is a batched matmul per head: on CPU
        that trains faster than Keras' layout on TensorFlow and JAX alike (see
        `benchmarks/attention.py`).
        """
        projected = ops.einsum("btd,dhk->bhtk", inputs, kernel)  # (batch, heads, T, d)
        if bias is not None:
            projected = projected + ops.expand_dims(bias, 1)  # + (heads, 1, d)
        return projected

    def call(
        self,
        query,
        value,
        key=None,
        query_mask=None,
        value_mask=None,
        key_mask=None,
        attention_mask=None,
        use_causal_mask=False,
        return_attention_scores=False,
        training=None,
    ):
        key = value if key is None else key
        mask = _attention.combine_masks(
            query,
            value,
            query_mask,
            value_mask,
            key_mask,
            attention_mask,
            use_causal_mask,
        )
        projected_key, projected_value = self.project_key_value(value, key)
        return self.attend(
            query,
            projected_key,
            projected_value,
            mask,
            return_attention_scores=return_attention_scores,
            training=training,
        )

    def project_key_value(self, value, key=None):
        """K_h and V_h of every head, heads first, for `attend`.

        What a decoder computes once per source sentence (cross-attention) or
        once per new token and keeps in its cache (self-attention).

        Args:
            value: (batch, Tv, value_in_dim).
            key: (batch, Tv, key_in_dim); defaults to `value`.

        Returns:
            The pair (K, V): (batch, heads, Tv, key_dim), (batch, heads, Tv,
            value_dim).
        """
        key = value if key is None else key
        projected_key = self._project(key, self.key_kernel, self.key_bias)
        projected_value = self._project(value, self.value_kernel, self.value_bias)
        return projected_key, projected_value

    def attend(
        self,
        query,
        projected_key,
        projected_value,
        mask=None,
        return_attention_scores=False,
        training=None,
    ):
        """Attention of `query` over keys and values already projected.

        `call` is `project_key_value` followed by this; a decoder that caches K and
        V calls it directly. The layer must be built.

        Args:
            query: (batch, Tq, query_dim), not yet projected.
            projected_key: (batch, heads, Tv, key_dim), from `project_key_value`.
            projected_value: (batch, heads, Tv, value_dim).
            mask: bool, broadcastable to (batch, Tq, Tv), or None: which query may
                see which key (True: may attend).
            return_attention_scores: bool, default False.
            training: bool; dropout is applied only when True.

        Returns:
            As `call`.
        """
        if mask is not None:
            mask = ops.expand_dims(mask, 1)  # (batch, 1, Tq, Tv): same for all heads
        query = self._project(query, self.query_kernel, self.query_bias)
        # Scaling the query instead of the scores: Tq * key_dim products per head,
        # not Tq * Tv.
        query = query * ops.cast(1.0 / math.sqrt(self.key_dim), query.dtype)
        scores = ops.matmul(
            query, ops.swapaxes(projected_key, -1, -2)
        )  # (batch, heads, Tq, Tv)
        weights = _attention.masked_softmax(scores, mask)  # (batch, heads, Tq, Tv)
        kept_weights = weights
        if training and self.dropout:
            kept_weights = keras.random.dropout(
                weights, self.dropout, seed=self.seed_generator
            )
        heads = ops.matmul(kept_weights, projected_value)  # (batch, heads, Tq, v_dim)
        # concat(head_1..head_r) W^O, without materialising the concatenation.
        output = ops.einsum(
            "bhtv,hvo->bto", heads, self.output_kernel
        )  # (batch, Tq, output_dim)
        if self.use_bias:
            output = output + self.output_bias
        if return_attention_scores:
            return output, weights
        return output

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "num_heads": self.num_heads,
                "key_dim": self.key_dim,
                "value_dim": self.value_dim,
                "output_dim": self.output_dim,
                "dropout": self.dropout,
                "use_bias": self.use_bias,
                **_attention.weight_options_config(self),
                "seed": self.seed,
            }
        )
        return config


def _is_positive_int(value):
    return isinstance(value, int) and not isinstance(value, bool) and value > 0
