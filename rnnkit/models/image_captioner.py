"""An image captioner: CNN encoder, attentive RNN decoder (one-to-many).

    image -> CNN encoder -> feature map (h, w, D) -> annotations a_1..a_L (L = h w)
    h_0, c_0 = tanh(W_init mean_i a_i)          first state from the mean annotation
    decoder, one step per caption token:
        alpha_t = softmax_i(v^T tanh(W_q h_{t-1} + W_k a_i))   BahdanauAttention
        beta_t  = sigmoid(w_beta h_{t-1})                      optional gating
        z_t     = beta_t sum_i alpha_ti a_i                    context
        h_t     = cell([E y_{t-1}; z_t], h_{t-1})              rnnkit LSTM/GRU cell
        o_t     = tanh(W_o [h_t; z_t; E y_{t-1}])              deep output
        p(y_t | y_<t, image) = softmax(W_y o_t)

the model of Show, Attend and Tell (Xu et al. 2015, soft attention). Training adds the
"doubly stochastic" regulariser lambda * sum_i (1 - sum_t alpha_ti)^2 (their eq. 14;
per token, like the loss), which pushes the model to look at every part of the image
over the whole caption. With `attention="none"` the context is the mean annotation
vector at every step (the attention-free decoder of Show and Tell, Vinyals et al.
2015, as an ablation).

The encoder (`rnnkit.models.image_encoder`) is a `keras.applications` backbone
("mobilenet" v1, "mobilenet_v2", "efficientnet_b0", "resnet50") without its top, or
"small_cnn", four convolution blocks for training from scratch on a CPU. A frozen
encoder's annotation vectors can be computed once and fed instead of images (the
"features" input), so training skips the CNN.

Training runs the decoder under teacher forcing; inference runs one step at a time
through `encode`, `initial_decoder_state` and `decode_step`, the interface that
`rnnkit.decoding.greedy_search` and `beam_search` drive (with `max_length`, since an
image has no source length).
"""

from __future__ import annotations

from collections.abc import Sequence

import keras
from keras import ops

from rnnkit import layers as rnnkit_layers

# Keras' time loop `backend.rnn` is private (see rnnkit/_keras_private.py).
from rnnkit._keras_private import backend as keras_backend
from rnnkit._keras_private import variable_key
from rnnkit.models._arguments import positive_int
from rnnkit.models._recurrent import recurrent_cell_class, states_per_cell
from rnnkit.models.image_encoder import ENCODERS, image_encoder
from rnnkit.models.image_encoder import ImagePreprocessing as ImagePreprocessing

ATTENTION_TYPES = ("bahdanau", "none")


@keras.saving.register_keras_serializable(package="rnnkit")
class EncoderScaledAdam(keras.optimizers.Adam):
    """Adam whose steps for the encoder's weights are `encoder_rate` times smaller.

    Fine-tuning a pretrained backbone beside a decoder trained from scratch wants a
    smaller step for the backbone. Keras optimizers have one learning rate, so this
    one scales it per variable: call
    `scale_variables(model.encoder.trainable_variables)` once before training.
    (Adam's update does not depend on the gradient's scale, so scaling gradients
    would not do it.)

    Args:
        encoder_rate: factor of the learning rate for the registered variables.
            Defaults to 0.1.
        **kwargs: the arguments of `keras.optimizers.Adam`.
    """

    def __init__(self, encoder_rate=0.1, **kwargs):
        if not isinstance(encoder_rate, (int, float)) or encoder_rate <= 0:
            raise ValueError(
                "Argument `encoder_rate` must be a number > 0, received "
                f"encoder_rate={encoder_rate!r}."
            )
        super().__init__(**kwargs)
        self.encoder_rate = float(encoder_rate)
        self._scaled_keys = set()

    def scale_variables(self, variables):
        """Registers the variables whose steps are scaled by `encoder_rate`."""
        self._scaled_keys.update(variable_key(self, v) for v in variables)

    def update_step(self, gradient, variable, learning_rate):
        if variable_key(self, variable) in self._scaled_keys:
            learning_rate = learning_rate * self.encoder_rate
        super().update_step(gradient, variable, learning_rate)

    def get_config(self):
        return {**super().get_config(), "encoder_rate": self.encoder_rate}


@keras.saving.register_keras_serializable(package="rnnkit")
class TokenCrossEntropy(keras.metrics.Metric):
    """Mean cross-entropy per real token of next-token logits, padding excluded.

    The caption likelihood without the attention regulariser, which the training
    loss includes: compare models (and tune the regulariser's weight) on this.

    Args:
        pad_id: the target id that is not a token. Defaults to 0.
        name: defaults to "crossentropy" (so Keras Tuner minimises it).
    """

    def __init__(self, pad_id=0, name="crossentropy", **kwargs):
        super().__init__(name=name, **kwargs)
        self.pad_id = int(pad_id)
        self.total = self.add_variable((), initializer="zeros", name="total")
        self.count = self.add_variable((), initializer="zeros", name="count")

    def update_state(self, y_true, y_pred, sample_weight=None):
        y_true = ops.cast(y_true, "int32")
        real = ops.not_equal(y_true, self.pad_id)
        cross_entropy = keras.losses.sparse_categorical_crossentropy(
            ops.where(real, y_true, 0), ops.cast(y_pred, "float32"), from_logits=True
        )  # (..., T)
        real = ops.cast(real, "float32")
        self.total.assign_add(ops.sum(cross_entropy * real))
        self.count.assign_add(ops.sum(real))

    def result(self):
        return self.total / ops.maximum(self.count, 1.0)

    def reset_state(self):
        self.total.assign(0.0)
        self.count.assign(0.0)

    def get_config(self):
        return {**super().get_config(), "pad_id": self.pad_id}


@keras.saving.register_keras_serializable(package="rnnkit")
class ImageCaptioner(keras.Model):
    """Show, Attend and Tell: CNN annotation vectors, attentive rnnkit decoder cell.

    Id 0 is padding. The vocabulary, when given as a token list, is stored in the
    model's config, so a saved `.keras` file carries it.

    Args:
        vocabulary: the caption tokens (a list, id = position) or the vocabulary size.
        encoder: one of "small_cnn", "mobilenet", "mobilenet_v2", "efficientnet_b0",
            "resnet50". Defaults to "small_cnn".
        image_size: side of the square input images. Defaults to 128.
        encoder_width: first-block filters of "small_cnn". Defaults to 32.
        encoder_alpha: width multiplier of "mobilenet". Defaults to 1.0.
        encoder_trainable: train the encoder with the decoder. Defaults to True.
        embedding_dim: size of the word embeddings. Defaults to 256.
        units: units of the decoder cell. Defaults to 512.
        cell_type: the name of a registered recurrent layer whose cell decodes
            (`"lstm"`, `"gru"`, ...; `rnnkit.layers.get_recurrent`). Defaults to
            "lstm".
        attention: "bahdanau" or "none" (mean annotation vector). Defaults to
            "bahdanau".
        attention_units: size of the Bahdanau scoring layer. Defaults to `units`.
        attention_penalty: lambda of the doubly stochastic regulariser. Defaults to 1.
        gating: scale the context by beta_t = sigmoid(w h_{t-1}). Defaults to True.
        dropout: dropout rate on the embeddings and on the deep output. Defaults to 0.
        seed: seed of the dropout masks. Defaults to None.

    Call arguments:
        inputs: a dict with "image" `(batch, size, size, 3)` 0-255 pixels, or
            "features" `(batch, L, D)` annotation vectors from `encoder`, and
            "caption_in" `(batch, T)` or `(batch, K, T)` token ids (captions behind
            a start token; K captions of the same image share its encoding).
        training: whether dropout is active (and a trainable encoder's batch norm).

    Returns:
        Next-token logits `(batch, [K,] T, vocabulary_size)`, float32.

    Example:
    >>> model = ImageCaptioner(500, image_size=32, units=64, embedding_dim=32)
    >>> tuple(model({"image": np.zeros((2, 32, 32, 3)),
    ...              "caption_in": np.ones((2, 5, 9), "int32")}).shape)
    (2, 5, 9, 500)

    Reference:
        Xu et al. (2015), Show, Attend and Tell: Neural Image Caption Generation
        with Visual Attention. Vinyals et al. (2015), Show and Tell: A Neural Image
        Caption Generator.
    """

    def __init__(
        self,
        vocabulary,
        encoder="small_cnn",
        image_size=128,
        encoder_width=32,
        encoder_alpha=1.0,
        encoder_trainable=True,
        embedding_dim=256,
        units=512,
        cell_type="lstm",
        attention="bahdanau",
        attention_units=None,
        attention_penalty=1.0,
        gating=True,
        dropout=0.0,
        seed=None,
        **kwargs,
    ):
        if isinstance(vocabulary, int) and not isinstance(vocabulary, bool):
            self.vocabulary_size, self.tokens = (
                positive_int("vocabulary", vocabulary),
                None,
            )
        elif isinstance(vocabulary, Sequence) and not isinstance(vocabulary, str):
            self.tokens = [str(token) for token in vocabulary]
            self.vocabulary_size = positive_int("vocabulary", len(self.tokens))
        else:
            raise ValueError(
                "Argument `vocabulary` must be a vocabulary size or a list of tokens, "
                f"received vocabulary={vocabulary!r:.80}."
            )
        if encoder not in ENCODERS:
            raise ValueError(
                f"Argument `encoder` must be one of {ENCODERS}, received "
                f"encoder={encoder!r}."
            )
        cell_class = recurrent_cell_class(cell_type)
        if attention not in ATTENTION_TYPES:
            raise ValueError(
                f"Argument `attention` must be one of {ATTENTION_TYPES}, received "
                f"attention={attention!r}."
            )
        if not isinstance(attention_penalty, (int, float)) or attention_penalty < 0:
            raise ValueError(
                "Argument `attention_penalty` must be a number >= 0, received "
                f"attention_penalty={attention_penalty!r}."
            )
        if not isinstance(dropout, (int, float)) or not 0.0 <= dropout < 1.0:
            raise ValueError(
                f"Argument `dropout` must be a float in [0, 1), received "
                f"dropout={dropout!r}."
            )
        self.encoder_name = encoder
        self.image_size = positive_int("image_size", image_size)
        self.encoder_width = positive_int("encoder_width", encoder_width)
        self.encoder_alpha = float(encoder_alpha)
        self.encoder_trainable = bool(encoder_trainable)
        self.embedding_dim = positive_int("embedding_dim", embedding_dim)
        self.units = positive_int("units", units)
        self.cell_type = cell_type
        self.attention = attention
        self.attention_units = (
            units
            if attention_units is None
            else positive_int("attention_units", attention_units)
        )
        self.attention_penalty = float(attention_penalty)
        self.gating = bool(gating)
        self.dropout = float(dropout)
        self.seed = seed
        super().__init__(**kwargs)

        self.encoder = image_encoder(
            encoder, image_size, encoder_width, self.encoder_alpha
        )
        self.encoder.trainable = self.encoder_trainable
        self.feature_dim = self.encoder.output_shape[-1]
        self.num_locations = self.encoder.output_shape[1]
        cell = cell_class(units, name=f"decoder_{cell_type}_cell")
        self.states_per_cell = states_per_cell(cell)
        self.initial_state_layer = keras.layers.Dense(
            self.states_per_cell * units, activation="tanh", name="initial_state"
        )
        # N(0, 1) embeddings, as in `EncoderDecoder` (Keras' tiny default lets the
        # decoder saturate towards the unigram distribution early in training).
        self.embedding = keras.layers.Embedding(
            self.vocabulary_size,
            embedding_dim,
            embeddings_initializer=keras.initializers.RandomNormal(stddev=1.0),
            name="embedding",
        )
        self.cell = cell
        if attention == "bahdanau":
            self.attention_layer = rnnkit_layers.BahdanauAttention(
                self.attention_units, name="attention"
            )
            if self.gating:
                self.gate = keras.layers.Dense(1, activation="sigmoid", name="gate")
        self.deep_output = keras.layers.Dense(
            embedding_dim, activation="tanh", name="deep_output"
        )
        self.output_projection = keras.layers.Dense(
            self.vocabulary_size, dtype="float32", name="output_projection"
        )
        self.dropout_layer = keras.layers.Dropout(self.dropout, seed=seed)

    # -- building and saving ---------------------------------------------------------

    def build(self, input_shape=None):
        # Every weight's shape follows from the constructor arguments alone.
        self.cell.build((None, self.embedding_dim + self.feature_dim))
        if self.attention == "bahdanau":
            self.attention_layer.build(
                (None, self.units), (None, self.num_locations, self.feature_dim)
            )
        size = self.image_size
        self.call(
            {
                "image": ops.zeros((1, size, size, 3)),
                "caption_in": ops.ones((1, 2), "int32"),
            }
        )
        self.built = True

    def get_config(self):
        config = {
            "vocabulary": self.tokens or self.vocabulary_size,
            "encoder": self.encoder_name,
            "image_size": self.image_size,
            "encoder_width": self.encoder_width,
            "encoder_alpha": self.encoder_alpha,
            "encoder_trainable": self.encoder_trainable,
            "embedding_dim": self.embedding_dim,
            "units": self.units,
            "cell_type": self.cell_type,
            "attention": self.attention,
            "attention_units": self.attention_units,
            "attention_penalty": self.attention_penalty,
            "gating": self.gating,
            "dropout": self.dropout,
            "seed": self.seed,
        }
        base = super().get_config()
        return {"name": base["name"], "trainable": base["trainable"], **config}

    @classmethod
    def from_config(cls, config):
        return cls(**config)

    # -- the inference interface of rnnkit.decoding ----------------------------------

    def encode(self, source, training=False):
        """Annotation vectors of images `(batch, size, size, 3)` or of precomputed
        features `(batch, L, D)`, computed once per image.

        Returns:
            The memory: a dict of batch-major tensors, "annotations" `(batch, L, D)`,
            "mean" `(batch, D)` and, with attention, "keys" `(batch, L, A)`.
        """
        if len(source.shape) == 4:
            annotations = self.encoder(
                source, training=bool(training) and self.encoder_trainable
            )  # (batch, L, D)
        else:
            annotations = ops.cast(source, self.compute_dtype)  # (batch, L, D)
        memory = {
            "annotations": annotations,
            "mean": ops.mean(annotations, axis=1),  # (batch, D)
        }
        if self.attention == "bahdanau":
            memory["keys"] = self.attention_layer.precompute_keys(annotations)
        return memory

    def attention_length(self, memory):
        """The number of image positions the attention weights cover (L)."""
        return memory["annotations"].shape[1]

    def initial_decoder_state(self, memory):
        """[h_0] or [h_0, c_0] = tanh(W_init mean annotation)."""
        initial = self.initial_state_layer(memory["mean"])  # (batch, states * units)
        return [
            ops.cast(state, "float32")
            for state in ops.split(initial, self.states_per_cell, axis=-1)
        ]

    def decoder_weights(self):
        """The decoder cell's `gate_weights()`, computed once per search
        (`rnnkit.decoding`) instead of once per step."""
        return self.cell.gate_weights()

    def decode_step(self, token_ids, state, memory, training=False, weights=None):
        """One decoder step for the previous tokens `(batch,)`.

        `weights` are `decoder_weights()` computed before the time loop (computed
        here when not given).

        Returns:
            (logits `(batch, vocabulary_size)`, new state, attention weights
            `(batch, L)`; zeros for `attention="none"`).
        """
        embedded = self.embedding(ops.cast(token_ids, "int32"))  # (batch, E)
        output, state, weights = self._step(
            embedded,
            state,
            memory,
            self.decoder_weights() if weights is None else weights,
            training,
        )
        return self.output_projection(output), state, weights

    # -- teacher forcing --------------------------------------------------------------

    def call(self, inputs, training=False):
        logits, weights, mask = self.teacher_forced(inputs, training=training)
        if self.attention == "bahdanau" and self.attention_penalty > 0:
            self.add_loss(self.attention_regularizer(weights, mask))
        return logits

    def teacher_forced(self, inputs, training=False):
        """The decoder over whole captions.

        Returns:
            (logits `(batch, [K,] T, vocabulary)`, attention weights
            `(batch * K, T, L)`, token mask `(batch * K, T)` of the non-padding
            positions of "caption_in").
        """
        source = inputs["image"] if "image" in inputs else inputs["features"]
        captions = ops.cast(inputs["caption_in"], "int32")
        grouped = len(captions.shape) == 3
        memory = self.encode(source, training=training)
        if grouped:
            per_image = captions.shape[1]
            captions = ops.reshape(captions, (-1, captions.shape[2]))  # (b * K, T)
            # Each image encoded once, its memory shared by its K captions.
            memory = {
                key: ops.repeat(value, per_image, axis=0)
                for key, value in memory.items()
            }
        state = self.initial_decoder_state(memory)
        embedded = self.dropout_layer(
            self.embedding(captions), training=training
        )  # (batch * K, T, E)
        weights = self.decoder_weights()

        def step(embedded_t, states):
            output, states, alpha = self._step(
                embedded_t, states, memory, weights, training
            )
            # One output tensor per step: the deep output and the attention weights.
            return ops.concatenate([output, ops.cast(alpha, output.dtype)], -1), states

        _, outputs, _ = keras_backend.rnn(
            step, embedded, list(state), input_length=embedded.shape[1]
        )  # (batch * K, T, E + L)
        deep_output = outputs[..., : self.embedding_dim]
        attention = ops.cast(outputs[..., self.embedding_dim :], "float32")
        logits = self.output_projection(deep_output)  # (batch * K, T, vocabulary)
        if grouped:
            logits = ops.reshape(
                logits, (-1, per_image, logits.shape[1], self.vocabulary_size)
            )  # (batch, K, T, vocabulary)
        mask = ops.not_equal(captions, 0)  # (batch * K, T)
        return logits, attention, mask

    def attention_regularizer(self, weights, mask):
        """lambda * sum_c sum_i (1 - sum_t alpha_cti)^2 / (real tokens of the batch).

        Xu et al. (2015, eq. 14) add lambda sum_i (1 - sum_t alpha_ti)^2 to the
        caption's summed negative log-likelihood; the Keras loss here is the
        likelihood averaged over tokens, so the regulariser is divided by the same
        token count, which keeps the paper's balance between the two. Only real
        (non-padding) tokens count in sum_t.

        Args:
            weights: attention weights `(captions, T, L)`.
            mask: `(captions, T)`, true at the real (non-padding) tokens.
        """
        mask = ops.cast(mask, weights.dtype)
        attention_per_location = ops.sum(weights * mask[:, :, None], axis=1)  # (c, L)
        penalty = ops.sum(ops.square(1.0 - attention_per_location))
        return self.attention_penalty * penalty / ops.maximum(ops.sum(mask), 1.0)

    # -- one decoder step, shared by training and inference ---------------------------

    def _step(self, embedded, state, memory, cell_weights, training):
        """(deep output `(batch, E)`, new state, attention weights `(batch, L)`)."""
        h_prev = ops.cast(state[0], self.compute_dtype)
        if self.attention == "bahdanau":
            context, alpha = self.attention_layer(
                h_prev,
                memory["annotations"],
                projected_key=memory["keys"],
                return_attention_scores=True,
            )  # (batch, D), (batch, L)
            if self.gating:
                context = self.gate(h_prev) * context  # beta_t z_t
        else:
            context = memory["mean"]  # (batch, D)
            alpha = ops.zeros_like(memory["annotations"][:, :, 0])  # (batch, L)
        context = ops.cast(context, embedded.dtype)
        x = self.cell.augment_inputs(
            ops.concatenate([embedded, context], axis=-1)
        )  # (batch, E + D [+ 1])
        hidden, state = self.cell.step(x, list(state), cell_weights)
        output = self.deep_output(ops.concatenate([hidden, context, embedded], -1))
        output = self.dropout_layer(output, training=training)  # (batch, E)
        return output, state, alpha
