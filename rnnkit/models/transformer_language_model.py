"""A decoder-only Transformer language model: next-token logits under a causal mask.

    ids (batch, T) -> sqrt(d) E + P -> N x TransformerDecoderBlock(causal
                   self-attention, no cross-attention) -> logits (batch, T, vocabulary)

Every position sees itself and the positions before it, within a window of at most
`context_length` tokens (the recipe's `train.bptt`): the model carries nothing from
one call to the next, so each training window is read on its own. With pre-norm
blocks (`norm_first=True`) a final LayerNorm follows the stack; with `tie_weights` the
output projection is the transposed token embedding plus a bias.

Generation goes through a key/value cache (`initial_cache`, then `decode` on the new
tokens only), so each new token costs one pass of that token through the blocks, not
a pass over the whole context.
"""

from __future__ import annotations

from collections.abc import Sequence

import keras
from keras import ops

from rnnkit import layers as rnnkit_layers
from rnnkit.models import _output_bias, _transformer
from rnnkit.models._arguments import positive_int


@keras.saving.register_keras_serializable(package="rnnkit")
class TransformerLanguageModel(keras.Model):
    """Causal Transformer blocks predicting the next token at every position.

    Args:
        tokens: the vocabulary, index order (saved with the model).
        model_dim: d, the size of the embeddings and of every block. Default: 256.
        num_heads: attention heads per block (must divide `model_dim`). Default: 8.
        feedforward_dim: inner size of the feed-forward sublayers. Default: 1024.
        num_layers: Transformer blocks. Default: 4.
        dropout: dropout on the embeddings, on every sublayer's output, on the
            attention weights and on the feed-forward hidden layer. Default: 0.1.
        norm_first: pre-norm blocks and a final LayerNorm (else post-norm).
            Default: `True`.
        positional_encoding: "sinusoidal" or "learned". Default: "sinusoidal".
        context_length: the longest window the model reads: the positions a
            learned encoding covers and the size of the generation cache.
            Default: 256.
        tie_weights: output projection = transposed token embedding (plus a bias).
            Default: `True`.
        seed: seed of the dropout masks.

    Call arguments:
        ids: (batch, T) integer token ids, T <= `context_length`.
        training: whether dropout is active.

    Returns:
        Logits (batch, T, vocabulary), float32.

    Example:
    >>> model = TransformerLanguageModel(list("abc"), model_dim=8, num_heads=2,
    ...                                  feedforward_dim=16, num_layers=1)
    >>> tuple(model(np.zeros((2, 5), "int32")).shape)
    (2, 5, 3)

    Reference:
        Vaswani et al. (2017), Attention Is All You Need; Radford et al. (2018),
        Improving Language Understanding by Generative Pre-Training (decoder-only).
    """

    architecture = "transformer"

    def __init__(
        self,
        tokens: Sequence[str],
        model_dim: int = 256,
        num_heads: int = 8,
        feedforward_dim: int = 1024,
        num_layers: int = 4,
        dropout: float = 0.1,
        norm_first: bool = True,
        positional_encoding: str = "sinusoidal",
        context_length: int = 256,
        tie_weights: bool = True,
        seed: int | None = None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        tokens = [str(token) for token in tokens]
        if not tokens:
            raise ValueError("Argument `tokens` must be a non-empty list of tokens.")
        _transformer.check_heads(model_dim, num_heads)
        self.tokens = tokens
        self.model_dim = model_dim
        self.num_heads = num_heads
        self.feedforward_dim = positive_int("feedforward_dim", feedforward_dim)
        self.num_layers = positive_int("num_layers", num_layers)
        self.dropout = _transformer.check_dropout(dropout)
        self.norm_first = bool(norm_first)
        self.positional_encoding = _transformer.check_positional_encoding(
            positional_encoding
        )
        self.context_length = positive_int("context_length", context_length)
        self.tie_weights = bool(tie_weights)
        self.seed = seed

        self.embedding = _transformer.TokenAndPositionEmbedding(
            len(tokens),
            model_dim,
            positional_encoding,
            context_length,
            dropout,
            seed=seed,
            name="embedding",
        )
        self.blocks = [
            rnnkit_layers.TransformerDecoderBlock(
                num_heads=num_heads,
                feedforward_dim=feedforward_dim,
                use_cross_attention=False,
                norm_first=self.norm_first,
                dropout=dropout,
                attention_dropout=dropout,
                feedforward_dropout=dropout,
                seed=None if seed is None else seed + 100 * (index + 1),
                name=f"block_{index}",
            )
            for index in range(num_layers)
        ]
        self.final_norm = None
        if self.norm_first:
            self.final_norm = keras.layers.LayerNormalization(
                epsilon=1e-5, name="final_norm"
            )
        self.output_projection = None
        if not self.tie_weights:
            self.output_projection = keras.layers.Dense(
                len(tokens), dtype="float32", name="output_projection"
            )

    @property
    def vocabulary_size(self) -> int:
        return len(self.tokens)

    def build(self, input_shape=None):
        if self.tie_weights:
            self.output_bias = self.add_weight(
                shape=(self.vocabulary_size,), initializer="zeros", name="output_bias"
            )
        self.call(ops.zeros((1, 2), "int32"))
        self.built = True

    def call(self, ids, training=False):
        x = self.embedding(ids, training=training)  # (batch, T, d)
        for block in self.blocks:
            x = block(x, training=training)  # causal self-attention
        return self.logits(x)

    def logits(self, hidden):
        """Next-token logits (..., vocabulary) from the last block's outputs."""
        if self.final_norm is not None:
            hidden = self.final_norm(hidden)
        if self.output_projection is not None:
            return ops.cast(self.output_projection(hidden), "float32")
        return _transformer.tied_logits(
            hidden, self.embedding.embeddings, self.output_bias
        )

    def set_output_bias(self, bias) -> None:
        """Sets the output bias, one value per token (e.g. the log unigram
        probabilities, so that training starts from the unigram baseline)."""
        _output_bias.set_output_bias(self, bias)

    # -- incremental decoding ----------------------------------------------------------

    def initial_cache(self, batch_size, max_length=None):
        """An empty key/value cache of `max_length` positions (default
        `context_length`) for every block."""
        length = self.context_length if max_length is None else max_length
        return [block.initial_cache(batch_size, length) for block in self.blocks]

    def decode(self, ids, caches, step):
        """Logits `(batch, T, vocabulary)` of T new tokens at positions
        step..step+T-1, reading the earlier positions from `caches`; returns them
        with the updated caches. Equal to `call` on the whole sequence so far."""
        x = self.embedding(ops.cast(ids, "int32"), start_index=step)  # (batch, T, d)
        new_caches = []
        for block, cache in zip(self.blocks, caches, strict=True):
            x, cache = block(x, cache=cache, step=step)
            new_caches.append(cache)
        return self.logits(x), new_caches

    def get_config(self):
        return {
            **super().get_config(),
            "tokens": list(self.tokens),
            "model_dim": self.model_dim,
            "num_heads": self.num_heads,
            "feedforward_dim": self.feedforward_dim,
            "num_layers": self.num_layers,
            "dropout": self.dropout,
            "norm_first": self.norm_first,
            "positional_encoding": self.positional_encoding,
            "context_length": self.context_length,
            "tie_weights": self.tie_weights,
            "seed": self.seed,
        }

    @classmethod
    def from_config(cls, config):
        return cls(**config)
