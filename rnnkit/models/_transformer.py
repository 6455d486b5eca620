"""What the Transformer models share: the token embedding with its positions, the
output projection (tied or not) and the checks of their arguments.

    x_t = sqrt(d) * E[y_t] + P(t)          P: sinusoidal (`PositionalEncoding`) or
                                           a learned embedding of positions
    logits_t = h_t E^T + b                 tied (Press & Wolf 2017), else a Dense
"""

from __future__ import annotations

import math

import keras
from keras import ops

from rnnkit import layers as rnnkit_layers
from rnnkit.models._arguments import positive_int

POSITIONAL_ENCODINGS = ("sinusoidal", "learned")


def check_dropout(dropout):
    if (
        isinstance(dropout, bool)
        or not isinstance(dropout, (int, float))
        or not 0.0 <= dropout < 1.0
    ):
        raise ValueError(
            "Argument `dropout` must be a float in [0, 1), received "
            f"dropout={dropout!r}."
        )
    return float(dropout)


def check_heads(model_dim, num_heads):
    positive_int("model_dim", model_dim)
    positive_int("num_heads", num_heads)
    if model_dim % num_heads:
        raise ValueError(
            f"Argument `num_heads` must divide model_dim={model_dim}, "
            f"received num_heads={num_heads}."
        )


def check_positional_encoding(positional_encoding):
    if positional_encoding not in POSITIONAL_ENCODINGS:
        raise ValueError(
            f"Argument `positional_encoding` must be one of {POSITIONAL_ENCODINGS}, "
            f"received positional_encoding={positional_encoding!r}."
        )
    return positional_encoding


class TokenAndPositionEmbedding(keras.layers.Layer):
    """sqrt(d) E[ids] + P(positions), then dropout.

    The embeddings start at N(0, 1/d), so that the scaled embeddings are about unit
    sized, as the positions are (Vaswani et al. 2017, section 3.4). Learned positions
    cover `max_positions` positions; a later position reads the last one's vector.
    """

    def __init__(
        self,
        vocabulary_size,
        model_dim,
        positional_encoding="sinusoidal",
        max_positions=512,
        dropout=0.0,
        seed=None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.model_dim = model_dim
        self.positional_encoding = positional_encoding
        self.max_positions = max_positions
        self.token_embedding = keras.layers.Embedding(
            vocabulary_size,
            model_dim,
            embeddings_initializer=keras.initializers.RandomNormal(
                stddev=model_dim**-0.5
            ),
            name="token_embedding",
        )
        if positional_encoding == "learned":
            self.position_embedding = keras.layers.Embedding(
                max_positions,
                model_dim,
                embeddings_initializer=keras.initializers.RandomNormal(stddev=0.02),
                name="position_embedding",
            )
        else:
            self.position_embedding = rnnkit_layers.PositionalEncoding(
                name="position_encoding"
            )
        self.dropout_layer = keras.layers.Dropout(dropout, seed=seed)

    def build(self, ids_shape):
        self.token_embedding.build(ids_shape)
        if self.positional_encoding == "learned":
            self.position_embedding.build((None,))
        else:
            self.position_embedding.build((*ids_shape, self.model_dim))

    @property
    def embeddings(self):
        """The token embedding matrix (vocabulary, d), for a tied output layer."""
        return self.token_embedding.embeddings

    def call(self, ids, start_index=0, training=False):
        scale = math.sqrt(self.model_dim)
        x = self.token_embedding(ops.cast(ids, "int32"))  # (batch, T, d)
        x = x * ops.cast(scale, x.dtype)
        if self.positional_encoding == "learned":
            positions = ops.arange(ops.shape(ids)[1], dtype="int32") + start_index
            positions = ops.minimum(positions, self.max_positions - 1)  # (T,)
            x = x + ops.cast(self.position_embedding(positions), x.dtype)[None]
        else:
            x = self.position_embedding(x, start_index=start_index)  # (batch, T, d)
        return self.dropout_layer(x, training=training)


def tied_logits(hidden, embeddings, bias):
    """h E^T + b, float32: next-token logits through the token embedding E."""
    embeddings = ops.cast(embeddings, hidden.dtype)
    logits = ops.matmul(hidden, ops.transpose(embeddings))  # (..., vocabulary)
    return ops.cast(logits, "float32") + ops.cast(bias, "float32")
