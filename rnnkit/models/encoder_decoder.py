"""An RNN encoder-decoder with attention, for translation (delayed many-to-many).

    source ids -> Embedding(mask_zero=True) -> [reverse] -> stack of rnnkit GRU/LSTM
               (bidirectional by default)                 -> encoder states h_1..h_S
    target ids -> Embedding -> decoder cell stack, one step per target token:
        x_t   = [embed(y_{t-1}); c_{t-1}]        input feeding: the previous context
        s_t   = cell(x_t, s_{t-1})               rnnkit GRUCell / LSTMCell, stacked
        c_t   = attention(s_t, h_1..h_S)         context: weighted sum of encoder states
        o_t   = tanh(W_o [s_t; c_t])             attentional vector
        p(y_t | y_<t, x) = softmax(W_y o_t)

`attention` picks the scorer: "bahdanau" (additive, v^T tanh(W_q s + W_k h); Bahdanau
et al. 2015), "dot" (scaled dot product against a learned projection of the encoder
states, Luong et al.'s "general" score), "multihead" (Vaswani et al. 2017) or "none":
the plain encoder-decoder of Cho et al. (2014), whose context is the final encoder
state, the same at every step. The first decoder state is
tanh(W_b [final encoder states]).

Training runs the decoder under teacher forcing: the whole target sentence, shifted
right behind a start token, is fed in one call. Inference runs one step at a time
through `encode`, `initial_decoder_state` and `decode_step`, the interface that
`rnnkit.decoding.greedy_search` and `beam_search` drive.
"""

from __future__ import annotations

import keras
from keras import ops

from rnnkit import layers as rnnkit_layers

# Keras' time loop `backend.rnn` is private (see rnnkit/_keras_private.py).
from rnnkit._keras_private import backend as keras_backend
from rnnkit.models._arguments import positive_int
from rnnkit.models._recurrent import (
    recurrent_cell_class,
    recurrent_layer_class,
    states_per_cell,
)
from rnnkit.models._vocabularies import SourceTargetVocabularies

ATTENTION_TYPES = ("none", "bahdanau", "dot", "multihead")


@keras.saving.register_keras_serializable(package="rnnkit")
class EncoderDecoder(SourceTargetVocabularies, keras.Model):
    """Sequence-to-sequence model: RNN encoder, attentive RNN decoder.

    Id 0 is padding in both languages. The vocabularies, when given as token lists,
    are stored in the model's config, so a saved `.keras` file carries them.

    Args:
        source_vocabulary: the source tokens (a list, id = position) or just the
            vocabulary size.
        target_vocabulary: the target tokens or the target vocabulary size.
        embedding_dim: size of the token embeddings. Defaults to 256.
        units: units of every recurrent layer (per direction). Defaults to 512.
        cell_type: the name of a registered recurrent layer (`"gru"`, `"lstm"`,
            ...; `rnnkit.layers.get_recurrent`). Defaults to "gru".
        encoder_layers: stacked encoder layers. Defaults to 1.
        decoder_layers: stacked decoder cells. Defaults to 1.
        bidirectional: read the source both ways. Defaults to True.
        attention: "bahdanau", "dot", "multihead" or "none". Defaults to "bahdanau".
        attention_units: size of the Bahdanau scoring layer. Defaults to `units`.
        num_heads: heads of "multihead" attention (must divide `units`). Defaults to 4.
        dropout: dropout rate on the embeddings, on every encoder layer's outputs
            and on the attentional vector before the output layer. Defaults to 0.
        input_feeding: feed the previous context into the next decoder step.
            Defaults to True. Without it, training runs the decoder recurrence over
            the whole target first and attends for all steps at once (faster).
        reverse_source: read the source backwards (Sutskever et al. 2014).
            Defaults to False. Attention weights are still returned in source order.
        seed: seed of the dropout masks. Defaults to None.

    Call arguments:
        inputs: a dict with "source" `(batch, source_length)` and "target_in"
            `(batch, target_length)` int ids (the target behind a start token), or
            the tuple (source, target_in).
        training: whether dropout is active.

    Returns:
        Next-token logits `(batch, target_length, target_vocabulary_size)`, float32.

    Example:
    >>> model = EncoderDecoder(1000, 800, embedding_dim=32, units=64)
    >>> tuple(model({"source": np.ones((2, 7), "int32"),
    ...              "target_in": np.ones((2, 5), "int32")}).shape)
    (2, 5, 800)

    Reference:
        Bahdanau, Cho & Bengio (2015), Neural Machine Translation by Jointly
        Learning to Align and Translate. Luong, Pham & Manning (2015), Effective
        Approaches to Attention-based Neural Machine Translation.
    """

    def __init__(
        self,
        source_vocabulary,
        target_vocabulary,
        embedding_dim=256,
        units=512,
        cell_type="gru",
        encoder_layers=1,
        decoder_layers=1,
        bidirectional=True,
        attention="bahdanau",
        attention_units=None,
        num_heads=4,
        dropout=0.0,
        input_feeding=True,
        reverse_source=False,
        seed=None,
        **kwargs,
    ):
        self._set_vocabularies(source_vocabulary, target_vocabulary)
        self.embedding_dim = positive_int("embedding_dim", embedding_dim)
        self.units = positive_int("units", units)
        layer_class = recurrent_layer_class(cell_type)
        self.cell_type = cell_type
        self.encoder_layers = positive_int("encoder_layers", encoder_layers)
        self.decoder_layers = positive_int("decoder_layers", decoder_layers)
        self.bidirectional = bool(bidirectional)
        if attention not in ATTENTION_TYPES:
            raise ValueError(
                f"Argument `attention` must be one of {ATTENTION_TYPES}, "
                f"received attention={attention!r}."
            )
        self.attention = attention
        self.attention_units = (
            units
            if attention_units is None
            else positive_int("attention_units", attention_units)
        )
        self.num_heads = positive_int("num_heads", num_heads)
        if attention == "multihead" and units % num_heads:
            raise ValueError(
                f"Argument `num_heads` must divide units={units}, "
                f"received num_heads={num_heads}."
            )
        if not isinstance(dropout, (int, float)) or not 0.0 <= dropout < 1.0:
            raise ValueError(
                f"Argument `dropout` must be a float in [0, 1), received "
                f"dropout={dropout!r}."
            )
        self.dropout = float(dropout)
        self.input_feeding = bool(input_feeding)
        self.reverse_source = bool(reverse_source)
        self.seed = seed
        super().__init__(**kwargs)

        cell_class = recurrent_cell_class(cell_type)
        decoder_cells = [
            cell_class(units, name=f"decoder_{cell_type}_cell_{index}")
            for index in range(decoder_layers)
        ]
        self.states_per_cell = states_per_cell(decoder_cells[0])
        # Encoder states, and the summary that the plain model uses as its context.
        self.encoder_dim = units * (2 if self.bidirectional else 1)

        # Embeddings start at N(0, 1), as in PyTorch, not at Keras' U(-0.05, 0.05): with
        # inputs that small, training on real sentence pairs drives every encoder and
        # decoder state into tanh saturation within one epoch (each example's gradient
        # first points the same way, towards the unigram distribution), and the model
        # never leaves the unigram loss (docs/performance.md, "Recipe figures:
        # history").
        self.source_embedding = keras.layers.Embedding(
            self.source_vocabulary_size,
            embedding_dim,
            embeddings_initializer=keras.initializers.RandomNormal(stddev=1.0),
            mask_zero=True,
            name="source_embedding",
        )
        self.target_embedding = keras.layers.Embedding(
            self.target_vocabulary_size,
            embedding_dim,
            embeddings_initializer=keras.initializers.RandomNormal(stddev=1.0),
            name="target_embedding",
        )
        self.encoder_rnns = []
        for index in range(encoder_layers):
            rnn = layer_class(
                units,
                return_sequences=True,
                return_state=True,
                name=f"encoder_{cell_type}_{index}",
            )
            if self.bidirectional:
                rnn = keras.layers.Bidirectional(
                    rnn, name=f"encoder_bidirectional_{index}"
                )
            self.encoder_rnns.append(rnn)
        self.bridge = keras.layers.Dense(
            decoder_layers * self.states_per_cell * units,
            activation="tanh",
            name="bridge",
        )
        self.decoder_cells = decoder_cells
        if attention == "bahdanau":
            self.attention_layer = rnnkit_layers.BahdanauAttention(
                self.attention_units, name="attention"
            )
        elif attention == "dot":
            self.key_projection = keras.layers.Dense(
                units, use_bias=False, name="key_projection"
            )
            self.attention_layer = rnnkit_layers.DotProductAttention(
                scaled=True, name="attention"
            )
        elif attention == "multihead":
            self.attention_layer = rnnkit_layers.MultiHeadAttention(
                num_heads, key_dim=units // num_heads, name="attention"
            )
        self.context_dim = units if attention == "multihead" else self.encoder_dim
        self.attentional = keras.layers.Dense(
            units, activation="tanh", name="attentional"
        )
        self.output_projection = keras.layers.Dense(
            self.target_vocabulary_size, dtype="float32", name="output_projection"
        )
        self.dropout_layer = keras.layers.Dropout(self.dropout, seed=seed)

    # -- building and saving ---------------------------------------------------------

    def build(self, input_shape=None):
        # The weights' shapes follow from the constructor arguments alone, so one call
        # on a dummy batch builds every sublayer, also when a saved model reloads.
        feeds_context = self.input_feeding or self.attention == "none"
        input_dim = self.embedding_dim + (self.context_dim if feeds_context else 0)
        for index, cell in enumerate(self.decoder_cells):
            # Built ahead of the call: it splits their weights before the first step.
            cell.build((None, input_dim if index == 0 else self.units))
        if self.attention == "bahdanau":
            # `encode` projects the keys before the first query reaches the layer.
            self.attention_layer.build(
                (None, self.units), (None, None, self.encoder_dim)
            )
        dummy = ops.ones((1, 2), "int32")
        self.call({"source": dummy, "target_in": dummy})
        self.built = True

    def get_config(self):
        config = {
            **self._vocabulary_config(),
            "embedding_dim": self.embedding_dim,
            "units": self.units,
            "cell_type": self.cell_type,
            "encoder_layers": self.encoder_layers,
            "decoder_layers": self.decoder_layers,
            "bidirectional": self.bidirectional,
            "attention": self.attention,
            "attention_units": self.attention_units,
            "num_heads": self.num_heads,
            "dropout": self.dropout,
            "input_feeding": self.input_feeding,
            "reverse_source": self.reverse_source,
            "seed": self.seed,
        }
        base = super().get_config()
        return {"name": base["name"], "trainable": base["trainable"], **config}

    @classmethod
    def from_config(cls, config):
        return cls(**config)

    # -- the three inference methods -------------------------------------------------

    def encode(self, source_ids, training=False):
        """Runs the encoder once per source sentence.

        Returns:
            The memory: a dict of batch-major tensors, "values" `(batch, S,
            encoder_dim)`, "mask" `(batch, S)`, "summary" `(batch, encoder_dim)`,
            "keys" (the projected keys, when the scorer has them) and "order"
            (source positions in reading order, with `reverse_source`).
        """
        source_ids = ops.cast(source_ids, "int32")
        mask = ops.not_equal(source_ids, 0)  # (batch, S)
        memory = {"mask": mask}
        if self.reverse_source:
            # Reverse the tokens, not the padding: position i reads token L - 1 - i.
            lengths = ops.sum(ops.cast(mask, "int32"), axis=1, keepdims=True)
            positions = ops.arange(ops.shape(source_ids)[1], dtype="int32")[None, :]
            order = ops.where(positions < lengths, lengths - 1 - positions, positions)
            source_ids = ops.take_along_axis(source_ids, order, axis=1)
            memory["order"] = order  # (batch, S), its own inverse
        x = self.dropout_layer(self.source_embedding(source_ids), training=training)
        for rnn in self.encoder_rnns:
            x, *final_states = rnn(x, mask=mask, training=training)
            x = self.dropout_layer(x, training=training)
        # The final hidden state of each direction of the top layer (LSTMs also return
        # their cell states, which the summary leaves out).
        directions = 2 if self.bidirectional else 1
        per_direction = len(final_states) // directions
        summary = ops.concatenate(
            [
                ops.cast(final_states[d * per_direction], x.dtype)
                for d in range(directions)
            ],
            axis=-1,
        )  # (batch, encoder_dim)
        memory.update(values=x, summary=summary)
        if self.attention == "bahdanau":
            memory["keys"] = self.attention_layer.precompute_keys(x)  # (b, S, A)
        elif self.attention == "dot":
            memory["keys"] = self.key_projection(x)  # (batch, S, units)
        return memory

    def initial_decoder_state(self, memory):
        """The first decoder state: tanh(W_b summary) for every cell, and a context."""
        initial = self.bridge(memory["summary"])  # (batch, layers * states * units)
        cell_states = [
            ops.cast(state, "float32")
            for state in ops.split(
                initial, self.decoder_layers * self.states_per_cell, axis=-1
            )
        ]
        if self.attention == "none":
            context = memory["summary"]
        else:
            context = ops.zeros((ops.shape(initial)[0], self.context_dim))
        return {"cells": cell_states, "context": ops.cast(context, "float32")}

    def decoder_weights(self):
        """Every decoder cell's `gate_weights()`: what `decode_step` reads from the
        cells' variables, split per gate, computed once per search (`rnnkit.decoding`)
        instead of once per step."""
        return [cell.gate_weights() for cell in self.decoder_cells]

    def decode_step(self, token_ids, state, memory, training=False, weights=None):
        """One decoder step for the previous tokens `(batch,)`.

        `weights` are `decoder_weights()` computed before the time loop (computed
        here when not given).

        Returns:
            (logits `(batch, target_vocabulary_size)`, new state, attention weights
            `(batch, S)` in source order; zeros for `attention="none"`).
        """
        embedded = self.target_embedding(ops.cast(token_ids, "int32"))  # (batch, E)
        hidden, cell_states = self._cell_stack(
            self._decoder_input(embedded, state["context"]),
            state["cells"],
            self.decoder_weights() if weights is None else weights,
        )
        context, weights = self._attend_step(hidden, memory)
        attentional = self.attentional(ops.concatenate([hidden, context], axis=-1))
        logits = self.output_projection(attentional)  # (batch, target vocabulary)
        new_state = {"cells": cell_states, "context": ops.cast(context, "float32")}
        return logits, new_state, weights

    # -- teacher forcing --------------------------------------------------------------

    def call(self, inputs, training=False):
        if isinstance(inputs, dict):
            source_ids, target_in = inputs["source"], inputs["target_in"]
        else:
            source_ids, target_in = inputs
        memory = self.encode(source_ids, training=training)
        state = self.initial_decoder_state(memory)
        embedded = self.dropout_layer(
            self.target_embedding(ops.cast(target_in, "int32")), training=training
        )  # (batch, T, E)
        cell_weights = self.decoder_weights()
        if self.input_feeding and self.attention != "none":
            # The context of step t enters step t + 1: attention runs inside the loop.
            def step(embedded_t, states):
                *cell_states, context = states
                hidden, cell_states = self._cell_stack(
                    self._decoder_input(embedded_t, context), cell_states, cell_weights
                )
                context, _ = self._attend_step(hidden, memory)
                attentional = self.attentional(ops.concatenate([hidden, context], -1))
                return attentional, [*cell_states, ops.cast(context, "float32")]

            initial = [*state["cells"], state["context"]]
            attentional = self._run_loop(step, embedded, initial)  # (batch, T, units)
        else:
            context = state["context"]

            def step(embedded_t, cell_states):
                return self._cell_stack(
                    self._decoder_input(embedded_t, context), cell_states, cell_weights
                )

            hidden = self._run_loop(step, embedded, state["cells"])  # (batch, T, units)
            contexts = self._attend_sequence(hidden, memory)  # (batch, T, context)
            attentional = self.attentional(ops.concatenate([hidden, contexts], -1))
        attentional = self.dropout_layer(attentional, training=training)
        return self.output_projection(attentional)  # (batch, T, target vocabulary)

    # -- pieces shared by training and inference --------------------------------------

    def _decoder_input(self, embedded, context):
        if self.input_feeding or self.attention == "none":
            context = ops.cast(context, embedded.dtype)
            return ops.concatenate([embedded, context], axis=-1)  # (batch, E + ctx)
        return embedded

    def _cell_stack(self, inputs, cell_states, cell_weights):
        """Runs the stacked decoder cells for one step; states are a flat list.

        Each cell runs its `step` on weights split once by `gate_weights()` and on
        inputs with the ones column of `augment_inputs`, as the rnnkit recurrent
        layers do: calling the cell as a layer would cast its states
        to the compute dtype, and under mixed precision they must stay float32.
        """
        new_states = []
        x = inputs
        for index, (cell, weights) in enumerate(
            zip(self.decoder_cells, cell_weights, strict=True)
        ):
            start = index * self.states_per_cell
            states = list(cell_states[start : start + self.states_per_cell])
            x = cell.augment_inputs(ops.cast(x, cell.compute_dtype))  # [x_t, 1]
            x, states = cell.step(x, states, weights)
            new_states.extend(states)
        return x, new_states

    def _run_loop(self, step, embedded, initial_states):
        _, outputs, _ = keras_backend.rnn(
            step, embedded, list(initial_states), input_length=embedded.shape[1]
        )
        return outputs

    def _attend_step(self, query, memory):
        """Context `(batch, context_dim)` and weights `(batch, S)` for one query."""
        if self.attention == "none":
            weights = ops.zeros_like(ops.cast(memory["mask"], "float32"))
            return ops.cast(memory["summary"], query.dtype), weights
        context, weights = self._attention_call(query, memory)
        return context, self._in_source_order(weights, memory)

    def _attend_sequence(self, queries, memory):
        """Contexts `(batch, T, context_dim)` for a sequence of queries."""
        if self.attention == "none":
            summary = ops.cast(memory["summary"], queries.dtype)[:, None, :]
            return summary + ops.zeros_like(queries[:, :, :1])  # (batch, T, enc_dim)
        return self._attention_call(queries, memory)[0]

    def _attention_call(self, queries, memory):
        """(contexts, weights) for queries `(batch, dim)` or `(batch, T, dim)`."""
        options = {"value_mask": memory["mask"], "return_attention_scores": True}
        if self.attention == "bahdanau":
            options["projected_key"] = memory["keys"]
        elif self.attention == "dot":
            options["key"] = memory["keys"]
        single_step = len(queries.shape) == 2
        if self.attention == "multihead" and single_step:
            queries = queries[:, None, :]  # (batch, 1, units)
        context, weights = self.attention_layer(queries, memory["values"], **options)
        if self.attention == "multihead":
            weights = ops.mean(weights, axis=1)  # (batch, T, S): heads averaged
            if single_step:
                context, weights = context[:, 0], weights[:, 0]
        return context, weights

    def _in_source_order(self, weights, memory):
        if self.reverse_source:
            return ops.take_along_axis(weights, memory["order"], axis=-1)
        return weights
