"""The Transformer's encoder and decoder blocks (Vaswani et al., 2017)."""

import keras
from keras import ops

from rnnkit.layers import _attention, _export, _transformer


@keras.saving.register_keras_serializable(package="rnnkit")
class TransformerEncoderBlock(_transformer.TransformerBlock):
    """One Transformer encoder block: self-attention, then a feed-forward network.

    For inputs X (batch, T, d), with MHA rnnkit's `MultiHeadAttention` (r heads,
    output projected back to d) and post-norm (`norm_first=False`):

        Z = LayerNorm(X + Dropout(MHA(X, X, X)))
        Y = LayerNorm(Z + Dropout(FFN(Z)))
        FFN(z) = activation(z W_1 + b_1) W_2 + b_2     (d -> d_ff -> d)

    and with pre-norm (`norm_first=True`):

        Z = X + Dropout(MHA(LN(X), LN(X), LN(X)))
        Y = Z + Dropout(FFN(LN(Z)))

    The feed-forward network acts on every position alone. The block adds no
    positions: add them to the embeddings before the first block
    (`PositionalEncoding`, or a learned embedding of positions).

    Masks: a padded position (False in `padding_mask`, or in the Keras mask of
    the inputs, e.g. from `Embedding(mask_zero=True)`) gets exactly zero weight
    as a key, so nothing flows from it to the other positions; its own output is
    computed like any other's and its Keras mask is passed on.
    `use_causal_mask=True` lets position i see positions j <= i only.

    Sublayers, with their Keras weights: `self_attention` (a
    `MultiHeadAttention`), `self_attention_norm`, `feedforward_inner`,
    `feedforward_output` (`Dense`) and `feedforward_norm` (`LayerNormalization`).
    They match `keras_hub.layers.TransformerEncoder`'s one for one.

    Args:
        num_heads: int, the number of attention heads r.
        feedforward_dim: int, the inner size of the feed-forward sublayer
            (d_ff; the paper's is 4 d).
        key_dim: int or None, default None (= d / num_heads, which must then be
            whole). The size of each head's query, key and value projection.
        activation: default "relu". The feed-forward sublayer's activation.
        norm_first: bool, default False. False: post-norm, the paper's
            LayerNorm(x + Sublayer(x)); True: pre-norm, x + Sublayer(LayerNorm(x)),
            which trains deep stacks more stably (Xiong et al. 2020) and wants
            a final LayerNorm after the last block (the model's, not the
            block's).
        dropout: float in [0, 1), default 0.0. Dropout on each sublayer's output
            before the residual sum (the paper's P_drop).
        attention_dropout: float in [0, 1), default 0.0. Dropout on the attention
            weights.
        feedforward_dropout: float in [0, 1), default 0.0. Dropout on the
            feed-forward sublayer's hidden activations.
        layer_norm_epsilon: float, default 1e-5. Added to the variance in every
            LayerNorm (keras-hub's and PyTorch's default).
        use_bias: bool, default True. Biases in the projections and the
            feed-forward sublayer.
        kernel_initializer: default "glorot_uniform".
        bias_initializer: default "zeros".
        seed: int or None, default None. Seed for the dropouts.
        **kwargs: base layer arguments, such as `name` and `dtype`.

    Call arguments:
        inputs: (batch, T, d).
        padding_mask: bool (batch, T); defaults to the Keras mask of `inputs`.
        attention_mask: bool (batch, T, T), which position may see which.
        use_causal_mask: bool, default False.
        return_attention_scores: bool, default False. Also return the weights.
        training: bool; dropout is applied only when True.

    Returns:
        The outputs (batch, T, d); with `return_attention_scores=True`, the pair
        `(outputs, weights)` with the self-attention weights (batch, heads, T, T).

    Example:
    >>> tokens = np.random.rand(2, 10, 64).astype("float32")
    >>> block = TransformerEncoderBlock(num_heads=8, feedforward_dim=256)
    >>> outputs, weights = block(tokens, return_attention_scores=True)
    >>> tuple(outputs.shape), tuple(weights.shape)
    ((2, 10, 64), (2, 8, 10, 10))

    Reference:
        - [Vaswani et al., 2017](https://arxiv.org/abs/1706.03762), section 3.1.
        - [Xiong et al., 2020](https://arxiv.org/abs/2002.04745) (pre-norm).
    """

    _sublayer_count = 2

    def build(self, inputs_shape):
        self._check_inputs_shape(inputs_shape)
        self.self_attention, self.self_attention_norm = self._build_attention(
            "self_attention", inputs_shape, inputs_shape
        )
        self._build_feedforward(inputs_shape)

    def call(
        self,
        inputs,
        padding_mask=None,
        attention_mask=None,
        use_causal_mask=False,
        return_attention_scores=False,
        training=None,
    ):
        padding_mask = _transformer.padding_or_keras_mask(inputs, padding_mask)
        mask = _attention.combine_masks(
            inputs,
            inputs,
            value_mask=padding_mask,
            attention_mask=attention_mask,
            use_causal_mask=use_causal_mask,
        )  # (batch or 1, T or 1, T)
        attended = self._sublayer_input(inputs, self.self_attention_norm)
        key, value = self.self_attention.project_key_value(attended)
        output, weights = self.self_attention.attend(
            attended, key, value, mask, return_attention_scores=True, training=training
        )  # (batch, T, d), (batch, heads, T, T)
        x = self._residual(inputs, output, self.self_attention_norm, 0, training)
        x = self._feedforward_sublayer(x, training)
        if return_attention_scores:
            return x, weights
        return x


@keras.saving.register_keras_serializable(package="rnnkit")
class TransformerDecoderBlock(_transformer.TransformerBlock):
    """One Transformer decoder block: causal self-attention, cross-attention, FFN.

    For target inputs X (batch, T, d) and encoder outputs M (batch, S, d_M),
    post-norm (`norm_first=False`):

        Z_1 = LayerNorm(X   + Dropout(MHA_self(X, X, X)))      query i sees j <= i
        Z_2 = LayerNorm(Z_1 + Dropout(MHA_cross(Z_1, M, M)))   over the source
        Y   = LayerNorm(Z_2 + Dropout(FFN(Z_2)))
        FFN(z) = activation(z W_1 + b_1) W_2 + b_2             (d -> d_ff -> d)

    and pre-norm (`norm_first=True`) as `TransformerEncoderBlock`:
    Z = X + Dropout(Sublayer(LN(X))) for each of the three sublayers. With
    `use_cross_attention=False` the block has no cross-attention (a decoder-only
    language model) and takes no encoder outputs.

    Masks: padded target positions (`padding_mask`, or the Keras mask of
    `inputs`) and padded source positions (`encoder_padding_mask`, or the Keras
    mask of `encoder_outputs`) get exactly zero weight as keys, and
    `use_causal_mask=True` (the default) hides the future, so nothing flows from
    padding or from later positions. The Keras mask of `inputs` is passed on.

    Incremental decoding: with a `cache` from `initial_cache` and the position
    `step` of the first of the T new tokens, the block runs on those tokens
    alone, writes their self-attention keys and values into the cache at
    positions step..step+T-1 and attends over every position written so far, so
    a decoding step projects only its new tokens instead of re-running the
    prefix; the cache's shapes never change, so a compiled decoding loop traces
    once. The outputs equal those of the full causal recomputation. Positions
    are the caller's: add `PositionalEncoding()(x, start_index=step)` first.

    Sublayers: `self_attention` and `cross_attention` (`MultiHeadAttention`),
    `self_attention_norm`, `cross_attention_norm`, `feedforward_inner`,
    `feedforward_output` and `feedforward_norm`, one for one those of
    `keras_hub.layers.TransformerDecoder`.

    Args:
        use_cross_attention: bool, default True. Attend over encoder outputs.
        num_heads: int, the number of attention heads r.
        feedforward_dim: int, the inner size of the feed-forward sublayer
            (d_ff; the paper's is 4 d).
        key_dim: int or None, default None (= d / num_heads, which must then be
            whole). The size of each head's query, key and value projection.
        activation: default "relu". The feed-forward sublayer's activation.
        norm_first: bool, default False. False: post-norm, the paper's
            LayerNorm(x + Sublayer(x)); True: pre-norm, x + Sublayer(LayerNorm(x)),
            which trains deep stacks more stably (Xiong et al. 2020) and wants
            a final LayerNorm after the last block (the model's, not the
            block's).
        dropout: float in [0, 1), default 0.0. Dropout on each sublayer's output
            before the residual sum (the paper's P_drop).
        attention_dropout: float in [0, 1), default 0.0. Dropout on the attention
            weights.
        feedforward_dropout: float in [0, 1), default 0.0. Dropout on the
            feed-forward sublayer's hidden activations.
        layer_norm_epsilon: float, default 1e-5. Added to the variance in every
            LayerNorm (keras-hub's and PyTorch's default).
        use_bias: bool, default True. Biases in the projections and the
            feed-forward sublayer.
        kernel_initializer: default "glorot_uniform".
        bias_initializer: default "zeros".
        seed: int or None, default None. Seed for the dropouts.
        **kwargs: base layer arguments, such as `name` and `dtype`.

    Call arguments:
        inputs: (batch, T, d), the target tokens (T new ones with a cache).
        encoder_outputs: (batch, S, d_M); required with cross-attention, else
            not allowed.
        padding_mask: bool (batch, T); defaults to the Keras mask of `inputs`.
        encoder_padding_mask: bool (batch, S); defaults to the Keras mask of
            `encoder_outputs`.
        attention_mask: bool (batch, T, T) (with a cache: (batch, T,
            max_length)), which target position may see which.
        use_causal_mask: bool, default True.
        cache: dict from `initial_cache` (or returned by the previous step), or
            None to run on whole sequences.
        step: int or scalar int tensor, the position of the first new token;
            required with a cache.
        return_attention_scores: bool, default False. Also return the weights.
        training: bool; dropout is applied only when True.

    Returns:
        The outputs (batch, T, d); then, with a cache, the updated cache; then,
        with `return_attention_scores=True`, a dict of weights:
        "self_attention" (batch, heads, T, T) (with a cache: (batch, heads, T,
        max_length)) and "cross_attention" (batch, heads, T, S).

    Example:
    >>> source = np.random.rand(2, 7, 64).astype("float32")
    >>> target = np.random.rand(2, 5, 64).astype("float32")
    >>> block = TransformerDecoderBlock(num_heads=8, feedforward_dim=256)
    >>> tuple(block(target, source).shape)
    (2, 5, 64)
    >>> cache = block.initial_cache(batch_size=2, max_length=5)
    >>> first, cache = block(target[:, :1], source, cache=cache, step=0)
    >>> tuple(first.shape), tuple(cache["key"].shape)
    ((2, 1, 64), (2, 8, 5, 8))

    Reference:
        - [Vaswani et al., 2017](https://arxiv.org/abs/1706.03762), section 3.1.
        - [Xiong et al., 2020](https://arxiv.org/abs/2002.04745) (pre-norm).
    """

    def __init__(self, num_heads, feedforward_dim, use_cross_attention=True, **kwargs):
        if not isinstance(use_cross_attention, bool):
            raise ValueError(
                "`use_cross_attention` must be True or False. "
                f"Received: {use_cross_attention!r}"
            )
        super().__init__(num_heads, feedforward_dim, **kwargs)
        self.use_cross_attention = use_cross_attention
        self._sublayer_count = 3 if use_cross_attention else 2

    def build(self, inputs_shape, encoder_outputs_shape=None):
        self._check_inputs_shape(inputs_shape)
        self.self_attention, self.self_attention_norm = self._build_attention(
            "self_attention", inputs_shape, inputs_shape
        )
        if self.use_cross_attention:
            if encoder_outputs_shape is None:
                raise ValueError(self._cross_attention_error(given=False))
            self._check_inputs_shape(encoder_outputs_shape, "encoder_outputs")
            self.cross_attention, self.cross_attention_norm = self._build_attention(
                "cross_attention", inputs_shape, encoder_outputs_shape
            )
        self._build_feedforward(inputs_shape)

    def _cross_attention_error(self, given):
        if given:
            return (
                f"{self.name} has no cross-attention (use_cross_attention=False); "
                "call it without `encoder_outputs`."
            )
        return (
            f"{self.name} attends over the encoder outputs "
            "(use_cross_attention=True); call it with `encoder_outputs`."
        )

    def initial_cache(self, batch_size, max_length, encoder_outputs=None):
        """An empty cache for decoding at most `max_length` target tokens.

        Args:
            batch_size: int or scalar int tensor.
            max_length: int, the number of positions the cache holds.
            encoder_outputs: (batch, S, d_M) or None. Given, the cross-attention
                keys and values of the source are computed here once, instead of
                at every step.

        Returns:
            A dict of batch-major tensors: "key" (batch, heads, max_length,
            key_dim) and "value" (the same shape), "written" (batch, max_length),
            1 where a position holds a real token, and with `encoder_outputs`,
            "cross_key" and "cross_value" (batch, heads, S, key_dim).
        """
        if not self.built:
            raise ValueError(
                f"{self.name} must be built (called once, or `build`) before "
                "`initial_cache`: the cache's size depends on the input size."
            )
        heads, key_dim = self.num_heads, self.self_attention.key_dim
        dtype = self.compute_dtype
        cache = {
            "key": ops.zeros((batch_size, heads, max_length, key_dim), dtype),
            "value": ops.zeros((batch_size, heads, max_length, key_dim), dtype),
            "written": ops.zeros((batch_size, max_length), "int32"),
        }
        if encoder_outputs is not None:
            if not self.use_cross_attention:
                raise ValueError(self._cross_attention_error(given=True))
            # Outside `__call__` no autocast scope casts the weights: project in
            # the weights' dtype, keep the result in the compute dtype.
            cross_key, cross_value = self.cross_attention.project_key_value(
                ops.cast(encoder_outputs, self.variable_dtype)
            )  # (batch, heads, S, key_dim) each
            cross_key, cross_value = (
                ops.cast(cross_key, dtype),
                ops.cast(cross_value, dtype),
            )
            cache.update({"cross_key": cross_key, "cross_value": cross_value})
        return cache

    def call(
        self,
        inputs,
        encoder_outputs=None,
        padding_mask=None,
        encoder_padding_mask=None,
        attention_mask=None,
        use_causal_mask=True,
        cache=None,
        step=None,
        return_attention_scores=False,
        training=None,
    ):
        if (encoder_outputs is not None) != self.use_cross_attention:
            raise ValueError(
                self._cross_attention_error(given=encoder_outputs is not None)
            )
        if (cache is None) != (step is None):
            raise ValueError(
                f"{self.name}: `cache` and `step` go together (both or neither). "
                f"Received: cache={'a dict' if cache else None}, step={step!r}"
            )
        padding_mask = _transformer.padding_or_keras_mask(inputs, padding_mask)
        attended = self._sublayer_input(inputs, self.self_attention_norm)
        key, value = self.self_attention.project_key_value(attended)
        if cache is None:
            mask = _attention.combine_masks(
                inputs,
                inputs,
                value_mask=padding_mask,
                attention_mask=attention_mask,
                use_causal_mask=use_causal_mask,
            )  # (batch or 1, T or 1, T)
        else:
            cache, key, value, mask = self._write_cache(
                cache, step, key, value, padding_mask, attention_mask, use_causal_mask
            )
        output, self_weights = self.self_attention.attend(
            attended, key, value, mask, return_attention_scores=True, training=training
        )  # (batch, T, d), (batch, heads, T, T or max_length)
        x = self._residual(inputs, output, self.self_attention_norm, 0, training)
        weights = {"self_attention": self_weights}
        if self.use_cross_attention:
            x, weights["cross_attention"] = self._cross_attention_sublayer(
                x, encoder_outputs, encoder_padding_mask, cache, training
            )
        x = self._feedforward_sublayer(x, training)
        outputs = (x,) if cache is None else (x, cache)
        if return_attention_scores:
            outputs = (*outputs, weights)
        return outputs[0] if len(outputs) == 1 else outputs

    def _write_cache(
        self, cache, step, key, value, padding_mask, attention_mask, use_causal_mask
    ):
        """The cache with the new tokens' keys and values written at `step`, and
        the (batch, T, max_length) mask of what each new token may see."""
        length = ops.shape(key)[2]
        max_length = ops.shape(cache["key"])[2]
        written = (
            ops.ones_like(key[:, 0, :, 0], "int32")
            if padding_mask is None
            else ops.cast(padding_mask, "int32")
        )  # (batch, T)
        if _export.active():
            cache = {
                **cache,
                "key": _export.write_positions(cache["key"], step, key, axis=2),
                "value": _export.write_positions(cache["value"], step, value, axis=2),
                "written": _export.write_positions(
                    cache["written"], step, written, axis=1
                ),
            }
        else:
            cache = {
                **cache,
                "key": ops.slice_update(cache["key"], (0, 0, step, 0), key),
                "value": ops.slice_update(cache["value"], (0, 0, step, 0), value),
                "written": ops.slice_update(cache["written"], (0, step), written),
            }
        query_positions = ops.arange(length) + step  # (T,)
        key_positions = ops.arange(max_length)  # (max_length,)
        if use_causal_mask:
            visible = key_positions[None, :] <= query_positions[:, None]
        else:
            visible = key_positions[None, :] < step + length  # written so far
        mask = ops.logical_and(
            ops.expand_dims(visible, 0),  # (1, T, max_length)
            ops.expand_dims(ops.cast(cache["written"], "bool"), 1),  # (batch, 1, L)
        )  # (batch, T, max_length)
        if attention_mask is not None:
            mask = ops.logical_and(mask, ops.cast(attention_mask, "bool"))
        return cache, cache["key"], cache["value"], mask

    def _cross_attention_sublayer(
        self, x, encoder_outputs, encoder_padding_mask, cache, training
    ):
        encoder_padding_mask = _transformer.padding_or_keras_mask(
            encoder_outputs, encoder_padding_mask
        )
        mask = _attention.combine_masks(
            x, encoder_outputs, value_mask=encoder_padding_mask
        )  # (batch, 1, S) or None
        query = self._sublayer_input(x, self.cross_attention_norm)
        if cache is not None and "cross_key" in cache:
            key, value = cache["cross_key"], cache["cross_value"]
        else:
            key, value = self.cross_attention.project_key_value(encoder_outputs)
        output, weights = self.cross_attention.attend(
            query, key, value, mask, return_attention_scores=True, training=training
        )  # (batch, T, d), (batch, heads, T, S)
        return self._residual(
            x, output, self.cross_attention_norm, 1, training
        ), weights

    def get_config(self):
        config = super().get_config()
        config["use_cross_attention"] = self.use_cross_attention
        return config
