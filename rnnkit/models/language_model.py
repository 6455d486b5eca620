"""A recurrent language model: next-token logits at every step of a token sequence.

    ids (batch, time) -> Embedding -> Dropout -> [rnnkit LSTM/GRU/SimpleRNN -> Dropout]
                      x num_layers -> logits (batch, time, vocabulary)

or, with `block="hawk"`, Hawk's residual blocks (`rnnkit.layers.HawkBlock`: an
RMSNorm, a gated branch around the recurrent layer and a temporal convolution, a
gated MLP, residual connections) on the embeddings' width, then an RMSNorm:

    ids -> Embedding -> Dropout -> [HawkBlock(cell_type)] x num_layers -> RMSNorm
        -> Dropout -> logits

Dropout sits on the non-recurrent connections only (Zaremba, Sutskever & Vinyals 2014):
on the embeddings, between layers and before the output projection; with
`locked_dropout` each sequence keeps one mask for all its steps (variational dropout,
Gal & Ghahramani 2016), and `embedding_dropout` drops whole tokens (every position of
a dropped token, as AWD-LSTM's embedding dropout does; Merity et al. 2018). With
`tie_weights` the output projection is the transposed embedding matrix plus a bias
(Press & Wolf 2017; Inan et al. 2017), which needs the last layer's `units` equal to
`embedding_dim`. With `init_scale > 0` every weight starts uniform in
[-init_scale, init_scale], as in Zaremba et al. (the LSTM forget-gate bias too, without
the +1 of `unit_forget_bias`); otherwise the Keras defaults apply.

A `stateful` model (fixed `batch_size`) carries its recurrent states from one call to
the next: that is truncated BPTT when the batches continue each other's streams
(`rnnkit.data.token_stream`). `reset_states()` clears them; `with_batch_size` makes a
copy of the same architecture and weights for another batch size (evaluation over a
whole split, generation one token at a time).
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence

import keras
from keras import ops

from rnnkit.layers.hawk import HawkBlock
from rnnkit.models import _output_bias
from rnnkit.models._recurrent import recurrent_layer_class

# The `block` argument's values: stacked layers, or Hawk's residual blocks.
BLOCKS = ("none", "hawk")


@keras.saving.register_keras_serializable(package="rnnkit")
class LanguageModel(keras.Model):
    """Stacked rnnkit recurrent layers predicting the next token at every step.

    Args:
        tokens: the vocabulary, index order (saved with the model, so that a reloaded
            model can encode prompts and decode samples).
        cell_type: the name of a registered recurrent layer ("lstm", "gru",
            "simple_rnn", ...; `rnnkit.layers.get_recurrent`). Default: "lstm".
        embedding_dim: size of the token embeddings. Default: 128.
        units: recurrent units per layer. Default: 256.
        num_layers: stacked recurrent layers (or blocks). Default: 2.
        block: "none" (stacked recurrent layers) or "hawk" (Hawk's residual blocks
            around them, `units` wide inside, on the embeddings' width; their
            dropout on each branch). Default: "none".
        dropout: dropout rate on embeddings, between layers and before the output.
            Default: 0.
        locked_dropout: one `dropout` mask per sequence and feature, shared by all
            its steps (variational dropout), instead of one per step; with Hawk's
            blocks it applies to the embeddings and the final states (the blocks'
            own dropout stays per step). Default: `False`.
        embedding_dropout: the rate at which whole tokens are dropped: in training,
            one draw per vocabulary entry and batch zeroes every position of a
            dropped token's embedding, the others scaled by 1 / (1 - rate) (before
            `dropout`). Default: 0.
        weight_dropout: the recurrent layers' `weight_dropout`: DropConnect on each
            recurrent kernel, one mask per call (AWD-LSTM's weight drop; cells with
            a recurrent kernel, stacked layers only). Default: 0.
        tie_weights: use the transposed embedding matrix as the output projection.
            Default: `False`.
        init_scale: > 0: uniform initialisation in [-init_scale, init_scale] of every
            weight; 0: the Keras default initialisers. Default: 0.
        stateful: carry the recurrent states from one call to the next (needs
            `batch_size`). Default: `False`.
        batch_size: the fixed batch size of a stateful model. Default: `None`.
        seed: seed of the dropout masks.

    Call arguments:
        ids: (batch, time) integer token ids.
        training: whether dropout is active.

    Returns:
        Logits (batch, time, vocabulary), float32.

    Example:
    >>> model = LanguageModel(list("abc"), units=8, embedding_dim=4, num_layers=1)
    >>> tuple(model(np.zeros((2, 5), "int32")).shape)
    (2, 5, 3)

    Reference:
        Zaremba, Sutskever & Vinyals (2014), "Recurrent Neural Network
        Regularization"; Press & Wolf (2017), "Using the Output Embedding to Improve
        Language Models".
    """

    def __init__(
        self,
        tokens: Sequence[str],
        cell_type: str = "lstm",
        embedding_dim: int = 128,
        units: int = 256,
        num_layers: int = 2,
        block: str = "none",
        dropout: float = 0.0,
        weight_dropout: float = 0.0,
        locked_dropout: bool = False,
        embedding_dropout: float = 0.0,
        tie_weights: bool = False,
        init_scale: float = 0.0,
        stateful: bool = False,
        batch_size: int | None = None,
        seed: int | None = None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        tokens = [str(token) for token in tokens]
        if not tokens:
            raise ValueError("Argument `tokens` must be a non-empty list of tokens.")
        layer_class = recurrent_layer_class(cell_type)
        for name, value in (
            ("embedding_dim", embedding_dim),
            ("units", units),
            ("num_layers", num_layers),
        ):
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(
                    f"Argument `{name}` must be a positive integer, "
                    f"received {name}={value!r}."
                )
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"Argument `dropout` must be in [0, 1), got {dropout}.")
        if init_scale < 0:
            raise ValueError(f"Argument `init_scale` must be >= 0, got {init_scale}.")
        if block not in BLOCKS:
            raise ValueError(
                f"Argument `block` must be one of {BLOCKS}, received block={block!r}."
            )
        for name, value in (
            ("weight_dropout", weight_dropout),
            ("embedding_dropout", embedding_dropout),
        ):
            if not 0.0 <= value < 1.0:
                raise ValueError(f"Argument `{name}` must be in [0, 1), got {value}.")
        if block == "hawk" and weight_dropout > 0:
            raise ValueError(
                "weight_dropout drops the recurrent kernels of stacked layers "
                "(block='none'); pass weight_dropout=0 with Hawk's blocks."
            )
        if block == "hawk" and init_scale > 0:
            raise ValueError(
                "init_scale applies to the plain stack (block='none'); Hawk's blocks "
                "keep their own initialisers: pass init_scale=0."
            )
        if tie_weights and block == "none" and units != embedding_dim:
            raise ValueError(
                "tie_weights needs units == embedding_dim (the output projection is "
                f"the transposed embedding matrix); received units={units}, "
                f"embedding_dim={embedding_dim}."
            )
        if stateful and batch_size is None:
            raise ValueError("A stateful LanguageModel needs a fixed `batch_size`.")
        self.tokens = tokens
        self.cell_type = cell_type
        self.embedding_dim = embedding_dim
        self.units = units
        self.num_layers = num_layers
        self.block = block
        self.dropout = float(dropout)
        self.weight_dropout = float(weight_dropout)
        self.locked_dropout = bool(locked_dropout)
        self.embedding_dropout = float(embedding_dropout)
        self.tie_weights = bool(tie_weights)
        self.init_scale = float(init_scale)
        self.stateful = bool(stateful)
        self.batch_size = batch_size
        self.seed = seed

        vocabulary_size = len(tokens)
        self.embedding = keras.layers.Embedding(
            vocabulary_size,
            embedding_dim,
            embeddings_initializer=self._initializer("uniform"),
            name="embedding",
        )
        if block == "hawk":
            self.recurrent_layers = [
                HawkBlock(
                    units,
                    cell_type=cell_type,
                    dropout=dropout,
                    stateful=stateful,
                    seed=None if seed is None else seed + 100 * (index + 1),
                    name=f"hawk_{index + 1}",
                )
                for index in range(num_layers)
            ]
            self.final_norm = keras.layers.RMSNormalization(name="final_norm")
        else:
            self.recurrent_layers = [
                layer_class(
                    units,
                    return_sequences=True,
                    stateful=stateful,
                    name=f"{cell_type}_{index + 1}",
                    **self._recurrent_initializers(),
                    # Passed only when set: cells without a recurrent kernel refuse it.
                    **({"weight_dropout": weight_dropout} if weight_dropout else {}),
                )
                for index in range(num_layers)
            ]
        self.dropouts = [
            keras.layers.Dropout(
                dropout,
                # (batch, 1, features): one mask for every step of a sequence.
                noise_shape=(None, 1, None) if self.locked_dropout else None,
                seed=None if seed is None else seed + index,
                name=f"dropout_{index}",
            )
            for index in range(num_layers + 1)
        ]
        self._token_seeds = keras.random.SeedGenerator(
            None if seed is None else seed + 1000
        )
        self.output_projection = None
        if not tie_weights:
            self.output_projection = keras.layers.Dense(
                vocabulary_size,
                kernel_initializer=self._initializer("glorot_uniform"),
                bias_initializer=self._initializer("zeros"),
                dtype="float32" if self.dtype_policy.name != "float32" else None,
                name="output_projection",
            )

    def _initializer(self, default):
        # A new initializer per weight: one instance would give every weight the
        # same values. Unseeded, it draws from the global seed (set by the runner).
        if self.init_scale > 0:
            return keras.initializers.RandomUniform(-self.init_scale, self.init_scale)
        return default

    def _recurrent_initializers(self) -> dict:
        if self.init_scale <= 0:
            return {}
        names = ("kernel_initializer", "recurrent_initializer", "bias_initializer")
        options = {name: self._initializer(None) for name in names}
        layer_class = recurrent_layer_class(self.cell_type)
        if "unit_forget_bias" in inspect.signature(layer_class).parameters:
            options["unit_forget_bias"] = False  # the forget bias is uniform too
        return options

    @property
    def vocabulary_size(self) -> int:
        return len(self.tokens)

    def build(self, input_shape=None):
        batch_size = self.batch_size if self.stateful else None
        shape = (batch_size, None)
        self.embedding.build(shape)
        features = (batch_size, None, self.embedding_dim)
        for layer in self.recurrent_layers:
            layer.build(features)
            if self.block == "none":
                features = (batch_size, None, self.units)
        if self.block == "hawk":
            self.final_norm.build(features)
        if self.output_projection is not None:
            self.output_projection.build(features)
        else:
            self.output_bias = self.add_weight(
                shape=(self.vocabulary_size,),
                initializer=self._initializer("zeros"),
                name="output_bias",
            )
        self.built = True

    def call(self, ids, training=False):
        hidden = self.embed(ids, training=training)
        if self.block == "hawk":
            for layer in self.recurrent_layers:
                hidden = layer(hidden, training=training)
            hidden = self.final_norm(hidden)
            return self.logits(self.dropouts[-1](hidden, training=training))
        for layer, dropout in zip(
            self.recurrent_layers, self.dropouts[1:], strict=True
        ):
            hidden = layer(hidden, training=training)  # (batch, time, units)
            hidden = dropout(hidden, training=training)
        return self.logits(hidden)

    def embed(self, ids, training=False):
        """The embeddings of `ids` (batch, time, embedding_dim) after the
        embedding dropout and the first dropout (both in training only)."""
        hidden = self.embedding(ids)
        if training and self.embedding_dropout > 0:
            rate = self.embedding_dropout
            draws = keras.random.uniform(
                (self.vocabulary_size,), seed=self._token_seeds
            )
            scale = ops.cast(draws >= rate, hidden.dtype) / (1.0 - rate)
            hidden = hidden * ops.take(scale, ids)[..., None]
        return self.dropouts[0](hidden, training=training)

    def logits(self, hidden):
        """Next-token logits (..., vocabulary) from last-layer states (..., units)."""
        if self.output_projection is not None:
            return ops.cast(self.output_projection(hidden), "float32")
        embeddings = ops.cast(self.embedding.embeddings, hidden.dtype)
        logits = ops.matmul(hidden, ops.transpose(embeddings))  # (..., vocabulary)
        return ops.cast(logits, "float32") + self.output_bias

    def set_output_bias(self, bias) -> None:
        """Sets the bias of the output projection, one value per vocabulary token.

        Setting it to the log of the training tokens' unigram probabilities starts a
        fresh model at the unigram baseline: with Adam, which moves every weight by
        about the learning rate per step, a large vocabulary otherwise spends hundreds
        of steps learning word frequencies before it learns anything from context.
        """
        _output_bias.set_output_bias(self, bias)

    def reset_states(self) -> None:
        """Clears the carried recurrent states (a stateful model only)."""
        for layer in self.recurrent_layers:
            if layer.stateful:
                layer.reset_state()

    def with_batch_size(
        self, batch_size: int | None, stateful: bool = True
    ) -> LanguageModel:
        """A copy with the same weights for another (fixed) batch size."""
        config = {**self.get_config(), "batch_size": batch_size, "stateful": stateful}
        config.pop("name", None)
        config.pop("trainable", None)
        copy = LanguageModel.from_config(config)
        copy.build()
        copy.set_weights(self.get_weights())
        return copy

    def get_config(self):
        return {
            **super().get_config(),
            "tokens": list(self.tokens),
            "cell_type": self.cell_type,
            "embedding_dim": self.embedding_dim,
            "units": self.units,
            "num_layers": self.num_layers,
            "block": self.block,
            "dropout": self.dropout,
            "weight_dropout": self.weight_dropout,
            "locked_dropout": self.locked_dropout,
            "embedding_dropout": self.embedding_dropout,
            "tie_weights": self.tie_weights,
            "init_scale": self.init_scale,
            "stateful": self.stateful,
            "batch_size": self.batch_size,
            "seed": self.seed,
        }

    @classmethod
    def from_config(cls, config):
        return cls(**config)
