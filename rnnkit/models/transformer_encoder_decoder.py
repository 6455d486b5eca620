"""The Transformer encoder-decoder for translation (Vaswani et al. 2017).

    source ids -> sqrt(d) E_src + P -> N x TransformerEncoderBlock -> M (batch, S, d)
    target ids -> sqrt(d) E_tgt + P -> N x TransformerDecoderBlock(causal self-
               attention, cross-attention over M) -> h_t
    p(y_t | y_<t, x) = softmax(h_t E_tgt^T + b)     (tied; or a Dense layer of its own)

With pre-norm blocks (`norm_first=True`) a final LayerNorm follows each stack.

Training runs the decoder on the whole target behind a start token at once (teacher
forcing, causal mask). Inference offers the interface `rnnkit.decoding` drives
(`encode`, `initial_decoder_state`, `decode_step`) with a key/value cache: `encode`
computes the cross-attention keys and values of every decoder block once per source
sentence, and each `decode_step` projects only the new token and attends over the
keys and values cached for the earlier ones instead of running the decoder over the
whole prefix again. The cache has a fixed size (`max_length` positions, the later
ones masked), so every step attends over `max_length` keys: O(max_length) per step,
not O(t), which keeps the step one compiled shape. Beam search reorders the cache
with the beams like any other decoder state.
"""

from __future__ import annotations

import keras
from keras import ops

from rnnkit import layers as rnnkit_layers
from rnnkit.models import _transformer
from rnnkit.models._arguments import positive_int
from rnnkit.models._vocabularies import SourceTargetVocabularies


@keras.saving.register_keras_serializable(package="rnnkit")
class TransformerEncoderDecoder(SourceTargetVocabularies, keras.Model):
    """Sequence-to-sequence Transformer: encoder blocks, causal decoder blocks.

    Id 0 is padding in both languages. The vocabularies, when given as token lists,
    are stored in the model's config, so a saved `.keras` file carries them.

    Args:
        source_vocabulary: the source tokens (a list, id = position) or just the
            vocabulary size.
        target_vocabulary: the target tokens or the target vocabulary size.
        model_dim: d, the size of the embeddings and of every block. Defaults to 256.
        num_heads: attention heads of every block (must divide `model_dim`).
            Defaults to 8.
        feedforward_dim: inner size of the feed-forward sublayers. Defaults to 1024.
        encoder_layers: encoder blocks. Defaults to 3.
        decoder_layers: decoder blocks. Defaults to 3.
        dropout: dropout on the embeddings, on every sublayer's output before its
            residual sum, on the attention weights and on the feed-forward hidden
            layer. Defaults to 0.1.
        norm_first: pre-norm blocks (and a final LayerNorm per stack) instead of the
            paper's post-norm. Defaults to True.
        positional_encoding: "sinusoidal" (`rnnkit.layers.PositionalEncoding`) or
            "learned" (an embedding of positions). Defaults to "sinusoidal".
        max_positions: positions a learned encoding covers; later positions share
            the last one's vector. Defaults to 512.
        tie_embeddings: the output projection is the transposed target embedding
            plus a bias. Defaults to True.
        seed: seed of the dropout masks. Defaults to None.

    Call arguments:
        inputs: a dict with "source" `(batch, source_length)` and "target_in"
            `(batch, target_length)` int ids, or the tuple (source, target_in).
        training: whether dropout is active.

    Returns:
        Next-token logits `(batch, target_length, target_vocabulary_size)`, float32.

    Example:
    >>> model = TransformerEncoderDecoder(1000, 800, model_dim=32, num_heads=4,
    ...                                   feedforward_dim=64)
    >>> tuple(model({"source": np.ones((2, 7), "int32"),
    ...              "target_in": np.ones((2, 5), "int32")}).shape)
    (2, 5, 800)

    Reference:
        Vaswani et al. (2017), Attention Is All You Need. Press & Wolf (2017), Using
        the Output Embedding to Improve Language Models.
    """

    architecture = "transformer"

    def __init__(
        self,
        source_vocabulary,
        target_vocabulary,
        model_dim=256,
        num_heads=8,
        feedforward_dim=1024,
        encoder_layers=3,
        decoder_layers=3,
        dropout=0.1,
        norm_first=True,
        positional_encoding="sinusoidal",
        max_positions=512,
        tie_embeddings=True,
        seed=None,
        **kwargs,
    ):
        self._set_vocabularies(source_vocabulary, target_vocabulary)
        _transformer.check_heads(model_dim, num_heads)
        self.model_dim = model_dim
        self.num_heads = num_heads
        self.feedforward_dim = positive_int("feedforward_dim", feedforward_dim)
        self.encoder_layers = positive_int("encoder_layers", encoder_layers)
        self.decoder_layers = positive_int("decoder_layers", decoder_layers)
        self.dropout = _transformer.check_dropout(dropout)
        self.norm_first = bool(norm_first)
        self.positional_encoding = _transformer.check_positional_encoding(
            positional_encoding
        )
        self.max_positions = positive_int("max_positions", max_positions)
        self.tie_embeddings = bool(tie_embeddings)
        self.seed = seed
        super().__init__(**kwargs)

        def seed_of(index):
            return None if seed is None else seed + 100 * index

        def embedding(vocabulary_size, name, index):
            return _transformer.TokenAndPositionEmbedding(
                vocabulary_size,
                model_dim,
                positional_encoding,
                max_positions,
                dropout,
                seed=seed_of(index),
                name=name,
            )

        self.source_embedding = embedding(self.source_vocabulary_size, "source", 1)
        self.target_embedding = embedding(self.target_vocabulary_size, "target", 2)
        block_options = dict(
            num_heads=num_heads,
            feedforward_dim=feedforward_dim,
            norm_first=self.norm_first,
            dropout=dropout,
            attention_dropout=dropout,
            feedforward_dropout=dropout,
        )
        self.encoder_blocks = [
            rnnkit_layers.TransformerEncoderBlock(
                seed=seed_of(10 + index), name=f"encoder_block_{index}", **block_options
            )
            for index in range(encoder_layers)
        ]
        self.decoder_blocks = [
            rnnkit_layers.TransformerDecoderBlock(
                seed=seed_of(20 + index), name=f"decoder_block_{index}", **block_options
            )
            for index in range(decoder_layers)
        ]
        self.encoder_norm = self.decoder_norm = None
        if self.norm_first:
            self.encoder_norm = keras.layers.LayerNormalization(
                epsilon=1e-5, name="encoder_norm"
            )
            self.decoder_norm = keras.layers.LayerNormalization(
                epsilon=1e-5, name="decoder_norm"
            )
        self.output_dense = None
        if not self.tie_embeddings:
            self.output_dense = keras.layers.Dense(
                self.target_vocabulary_size, dtype="float32", name="output_projection"
            )

    # -- building and saving ---------------------------------------------------------

    def build(self, input_shape=None):
        if self.tie_embeddings:
            self.output_bias = self.add_weight(
                shape=(self.target_vocabulary_size,),
                initializer="zeros",
                name="output_bias",
            )
        dummy = ops.ones((1, 2), "int32")
        self.call({"source": dummy, "target_in": dummy})
        self.built = True

    def get_config(self):
        base = super().get_config()
        return {
            "name": base["name"],
            "trainable": base["trainable"],
            **self._vocabulary_config(),
            "model_dim": self.model_dim,
            "num_heads": self.num_heads,
            "feedforward_dim": self.feedforward_dim,
            "encoder_layers": self.encoder_layers,
            "decoder_layers": self.decoder_layers,
            "dropout": self.dropout,
            "norm_first": self.norm_first,
            "positional_encoding": self.positional_encoding,
            "max_positions": self.max_positions,
            "tie_embeddings": self.tie_embeddings,
            "seed": self.seed,
        }

    @classmethod
    def from_config(cls, config):
        return cls(**config)

    # -- teacher forcing --------------------------------------------------------------

    def call(self, inputs, training=False):
        if isinstance(inputs, dict):
            source_ids, target_in = inputs["source"], inputs["target_in"]
        else:
            source_ids, target_in = inputs
        logits, _ = self._forward(source_ids, target_in, training)
        return logits

    def cross_attention_weights(self, source_ids, target_in):
        """The last decoder block's cross-attention weights, every head, under
        teacher forcing: `(batch, heads, target_length, source_length)`."""
        return self._forward(source_ids, target_in, training=False)[1]

    def _forward(self, source_ids, target_in, training):
        encoded, source_mask = self._encode(source_ids, training)
        return self._decode(target_in, encoded, source_mask, training)

    def _decode(self, target_in, encoded, source_mask, training):
        """Logits and the last block's cross-attention weights for whole targets."""
        target_in = ops.cast(target_in, "int32")
        target_mask = ops.not_equal(target_in, 0)  # (batch, T)
        x = self.target_embedding(target_in, training=training)  # (batch, T, d)
        for block in self.decoder_blocks:
            x, weights = block(
                x,
                encoded,
                padding_mask=target_mask,
                encoder_padding_mask=source_mask,
                return_attention_scores=True,
                training=training,
            )
        return self._logits(x), weights["cross_attention"]

    def _encode(self, source_ids, training):
        """Encoder outputs `(batch, S, d)` and the source mask `(batch, S)`."""
        source_ids = ops.cast(source_ids, "int32")
        mask = ops.not_equal(source_ids, 0)  # (batch, S)
        x = self.source_embedding(source_ids, training=training)  # (batch, S, d)
        for block in self.encoder_blocks:
            x = block(x, padding_mask=mask, training=training)
        if self.encoder_norm is not None:
            x = self.encoder_norm(x)
        return x, mask

    def _logits(self, hidden):
        if self.decoder_norm is not None:
            hidden = self.decoder_norm(hidden)
        if self.output_dense is not None:
            return ops.cast(self.output_dense(hidden), "float32")
        return _transformer.tied_logits(
            hidden, self.target_embedding.embeddings, self.output_bias
        )

    # -- the three inference methods -------------------------------------------------

    def encode(self, source_ids, training=False):
        """Runs the encoder once per source sentence.

        Returns:
            The memory: "values" `(batch, S, d)`, "mask" `(batch, S)` and the
            cross-attention keys and values of every decoder block, "cross_keys"
            and "cross_values" (lists of `(batch, heads, S, d / heads)`).
        """
        values, mask = self._encode(source_ids, training)
        cross_keys, cross_values = [], []
        for block in self.decoder_blocks:
            # Outside the block's `__call__` no autocast scope casts its weights:
            # project in their dtype, keep the result in the compute dtype.
            key, value = block.cross_attention.project_key_value(
                ops.cast(values, block.variable_dtype)
            )  # (batch, heads, S, key_dim) each
            cross_keys.append(ops.cast(key, block.compute_dtype))
            cross_values.append(ops.cast(value, block.compute_dtype))
        return {
            "values": values,
            "mask": mask,
            "cross_keys": cross_keys,
            "cross_values": cross_values,
        }

    def initial_decoder_state(self, memory, max_length):
        """An empty self-attention cache of `max_length` positions per decoder block
        and the position of the next token (the same in every row)."""
        batch_size = ops.shape(memory["values"])[0]
        caches = [
            block.initial_cache(batch_size, max_length) for block in self.decoder_blocks
        ]
        return {"step": ops.zeros((batch_size,), "int32"), "caches": caches}

    def decode_step(self, token_ids, state, memory, training=False):
        """One decoder step for the previous tokens `(batch,)`.

        Returns:
            (logits `(batch, target_vocabulary_size)`, new state, the last block's
            cross-attention weights averaged over the heads `(batch, S)`).
        """
        step = state["step"][0]
        x = self.target_embedding(
            ops.cast(token_ids, "int32")[:, None], start_index=step, training=training
        )  # (batch, 1, d)
        caches = []
        for index, block in enumerate(self.decoder_blocks):
            cache = {
                **state["caches"][index],
                "cross_key": memory["cross_keys"][index],
                "cross_value": memory["cross_values"][index],
            }
            x, cache, weights = block(
                x,
                memory["values"],
                encoder_padding_mask=memory["mask"],
                cache=cache,
                step=step,
                return_attention_scores=True,
                training=training,
            )
            caches.append({k: cache[k] for k in ("key", "value", "written")})
        logits = self._logits(x)[:, 0]  # (batch, vocabulary)
        attention = ops.mean(weights["cross_attention"], axis=1)[:, 0]  # (batch, S)
        return logits, {"step": state["step"] + 1, "caches": caches}, attention
