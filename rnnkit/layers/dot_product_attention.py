"""Dot-product attention, scaled (Vaswani et al., 2017) or not (Luong et al., 2015)."""

import math

import keras
from keras import ops

from rnnkit.layers import _attention


@keras.saving.register_keras_serializable(package="rnnkit")
class DotProductAttention(keras.layers.Layer):
    """Key-value attention scored by the dot product of query and key.

    For each query q_i and keys k_j, values v_j:

        score_ij = q_i . k_j / sqrt(d)       (scaled=True; d is the key size)
        score_ij = q_i . k_j                 (scaled=False, Luong's "dot")
        a_ij     = softmax_j(score_ij)
        c_i      = sum_j a_ij v_j

    The layer has no weights, so query and key must have the same size. Masks follow
    `keras.layers.MultiHeadAttention`: padded keys (`value_mask`/`key_mask`) get
    exactly zero weight, padded queries (`query_mask`) attend to nothing and get a
    zero context, `attention_mask` (batch, Tq, Tv) says which query may see which key,
    and `use_causal_mask=True` lets query i see keys j <= i only. Keras masks on the
    inputs (e.g. from `Embedding(mask_zero=True)`) are used the same way, and the
    query's mask is passed on to the output.

    Args:
        scaled: bool, default True. Divide the scores by sqrt(key size).
        dropout: float in [0, 1), default 0.0. Fraction of the attention weights to
            drop during training.
        seed: int or None, default None. Seed for the dropout.
        **kwargs: base layer arguments, such as `name` and `dtype`.

    Call arguments:
        query: (batch, Tq, dim), or (batch, dim) for a single decoder step.
        value: (batch, Tv, value_dim).
        key: (batch, Tv, dim); defaults to `value`.
        query_mask: bool (batch, Tq) (or (batch,) for a single step).
        value_mask: bool (batch, Tv).
        key_mask: bool (batch, Tv).
        attention_mask: bool (batch, Tq, Tv) (or (batch, Tv) for a single step).
        use_causal_mask: bool, default False.
        return_attention_scores: bool, default False. Also return the weights.
        training: bool; dropout is applied only when True.

    Returns:
        The context, (batch, Tq, value_dim) or (batch, value_dim) for a single step;
        with `return_attention_scores=True`, the pair `(context, weights)` with
        weights (batch, Tq, Tv) or (batch, Tv), taken before dropout.

    Example:
    >>> query = np.random.rand(2, 5, 8).astype("float32")
    >>> value = np.random.rand(2, 7, 8).astype("float32")
    >>> context, weights = DotProductAttention()(
    ...     query, value, return_attention_scores=True)
    >>> tuple(context.shape), tuple(weights.shape)
    ((2, 5, 8), (2, 5, 7))

    Reference:
        - [Luong et al., 2015](https://arxiv.org/abs/1508.04025)
        - [Vaswani et al., 2017](https://arxiv.org/abs/1706.03762)
    """

    def __init__(self, scaled=True, dropout=0.0, seed=None, **kwargs):
        if not isinstance(scaled, bool):
            raise ValueError(f"`scaled` must be True or False. Received: {scaled!r}")
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"`dropout` must be in [0, 1). Received: {dropout!r}")
        super().__init__(**kwargs)
        self.scaled = scaled
        self.dropout = dropout
        self.seed = seed
        self.seed_generator = keras.random.SeedGenerator(seed) if dropout else None
        self.supports_masking = True

    def build(self, query_shape, value_shape, key_shape=None):
        key_shape = value_shape if key_shape is None else key_shape
        _attention.check_value_and_key(self.name, value_shape, key_shape)
        if len(query_shape) not in (2, 3) or query_shape[-1] != key_shape[-1]:
            raise ValueError(
                f"{self.name} needs a query of shape (batch, Tq, dim) or (batch, dim) "
                "whose size equals the key size (it has no projection). Received: "
                f"query_shape={query_shape}, key_shape={key_shape}"
            )

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
        query, query_mask, attention_mask, single_step = _attention.as_query_sequence(
            query, query_mask, attention_mask, use_causal_mask
        )
        mask = _attention.combine_masks(
            query,
            value,
            query_mask,
            value_mask,
            key_mask,
            attention_mask,
            use_causal_mask,
        )
        if self.scaled:
            # Scaling the query instead of the scores: Tq * d products, not Tq * Tv.
            query = query * ops.cast(1.0 / math.sqrt(query.shape[-1]), query.dtype)
        scores = ops.matmul(query, ops.swapaxes(key, -1, -2))  # (batch, Tq, Tv)
        weights = _attention.masked_softmax(scores, mask)  # (batch, Tq, Tv)
        kept_weights = weights
        if training and self.dropout:
            kept_weights = keras.random.dropout(
                weights, self.dropout, seed=self.seed_generator
            )
        context = ops.matmul(kept_weights, value)  # (batch, Tq, value_dim)
        if single_step:
            context = ops.squeeze(context, 1)  # (batch, value_dim)
            weights = ops.squeeze(weights, 1)  # (batch, Tv)
        if return_attention_scores:
            return context, weights
        return context

    def get_config(self):
        config = super().get_config()
        config.update(
            {"scaled": self.scaled, "dropout": self.dropout, "seed": self.seed}
        )
        return config
