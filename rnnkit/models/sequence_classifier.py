"""A many-to-one text classifier: raw strings in, class probabilities out.

    string -> TextVectorization -> TruncateSequence -> Embedding(mask_zero=True)
           -> [SpatialDropout1D] -> rnnkit LSTM/GRU/SimpleRNN stack (optionally
              Bidirectional) -> last state, or masked mean / max / both over time
           -> Dropout
           -> Dense(1, sigmoid) for two classes, Dense(K, softmax) for K > 2

The vocabulary and the text standardization live inside the model, so `model.keras`
alone turns raw text into a prediction, and `keras.saving.load_model` reloads it in
safe mode (every custom piece is a registered class, no `Lambda`).

`TextVectorization` pads each batch only to its longest text; `TruncateSequence` then
cuts texts longer than `sequence_length`. Batches of texts of similar length (see
`rnnkit_recipes.sentiment.data`) therefore run far fewer recurrent steps than padding
everything to `sequence_length`, and `mask_zero=True` makes the padding invisible.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import keras
import numpy as np
import tensorflow as tf
from keras import ops

from rnnkit.models._recurrent import recurrent_layer_class
from rnnkit.models.text_standardizer import TextStandardizer

POOLING = ("last", "mean", "max", "mean_max", "concat")
KEEP = ("first", "last")


@keras.saving.register_keras_serializable(package="rnnkit")
class TruncateSequence(keras.layers.Layer):
    """Cuts right-padded token ids to at most `max_length` steps.

    Rows longer than `max_length` keep their first (or last) `max_length` tokens; the
    output is as wide as the longest kept row, so a batch of short texts stays short.
    A row with no token at all (a text of punctuation only, say) becomes one
    out-of-vocabulary token (id 1, as `TextVectorization` numbers it): a row that is
    all padding would be fully masked, and has neither a last state nor a mean.

    Args:
        max_length: the most time steps a row keeps.
        keep: `"first"` keeps the beginning of long texts, `"last"` their end.
            Defaults to `"first"`.

    Call arguments:
        token_ids: integer tensor (batch, time), 0 = padding, padded on the right.

    Returns:
        Integer tensor (batch, min(time + 1, max_length)), padded on the right.

    Example:
    >>> tokens = np.array([[1, 2, 3, 4, 5], [6, 7, 0, 0, 0]])
    >>> keras.ops.convert_to_numpy(TruncateSequence(3, keep="last")(tokens)).tolist()
    [[3, 4, 5], [6, 7, 0]]
    """

    def __init__(self, max_length: int, keep: str = "first", **kwargs):
        if not isinstance(max_length, int) or max_length <= 0:
            raise ValueError(
                "Argument `max_length` must be a positive integer, received "
                f"max_length={max_length!r}."
            )
        if keep not in KEEP:
            raise ValueError(
                f"Argument `keep` must be one of {KEEP}, received keep={keep!r}."
            )
        super().__init__(**kwargs)
        self.max_length = max_length
        self.keep = keep

    def call(self, token_ids):
        # One padding column more, so that even a batch of empty texts has a step.
        token_ids = ops.pad(token_ids, [[0, 0], [0, 1]])  # (batch, time + 1)
        lengths = ops.sum(ops.cast(ops.not_equal(token_ids, 0), "int32"), axis=1)
        width = ops.minimum(ops.shape(token_ids)[1], self.max_length)
        if self.keep == "first":
            token_ids = token_ids[:, :width]  # (batch, width)
        else:
            starts = ops.maximum(lengths - width, 0)  # (batch,)
            positions = starts[:, None] + ops.arange(width)[None, :]  # (batch, width)
            token_ids = ops.take_along_axis(token_ids, positions, axis=1)
        is_first_step = ops.equal(ops.arange(width), 0)[None, :]  # (1, width)
        is_empty_row = ops.equal(lengths, 0)[:, None]  # (batch, 1)
        unknown = ops.ones_like(token_ids)  # the out-of-vocabulary id
        return ops.where(
            ops.logical_and(is_first_step, is_empty_row), unknown, token_ids
        )  # (batch, width)

    def compute_output_shape(self, input_shape):
        return (input_shape[0], None)

    def get_config(self) -> dict:
        return {
            **super().get_config(),
            "max_length": self.max_length,
            "keep": self.keep,
        }


@keras.saving.register_keras_serializable(package="rnnkit")
class ClassificationHead(keras.layers.Dense):
    """The output layer of a classifier, which also knows the names of its classes.

    Two classes give one sigmoid unit, P(class_names[1]); more give a softmax over
    `len(class_names)` units. The names are saved with the model, so a reloaded
    `model.keras` turns its output into labels without the training data.

    Args:
        class_names: the class names in index order (at least two, distinct).
        **kwargs: other `keras.layers.Dense` arguments (not `units`/`activation`).

    Call arguments:
        inputs: float tensor (batch, features).

    Returns:
        Probabilities (batch, 1) for two classes, (batch, num_classes) otherwise.

    Example:
    >>> tuple(ClassificationHead(["negative", "positive"])(np.ones((4, 8))).shape)
    (4, 1)
    """

    def __init__(self, class_names: Sequence[str], **kwargs):
        names = [str(name) for name in class_names]
        if len(names) < 2 or len(set(names)) != len(names):
            raise ValueError(
                "Argument `class_names` must hold at least two distinct names, "
                f"received class_names={list(class_names)!r}."
            )
        binary = len(names) == 2
        super().__init__(
            1 if binary else len(names),
            activation="sigmoid" if binary else "softmax",
            **kwargs,
        )
        self.class_names = names

    def get_config(self) -> dict:
        config = super().get_config()
        del config["units"], config["activation"]
        return {**config, "class_names": self.class_names}


@keras.saving.register_keras_serializable(package="rnnkit")
class MeanProbabilities(keras.layers.Average):
    """The output layer of an ensemble of classifiers: the mean of the members'
    probabilities, which also knows the names of their classes (as
    `ClassificationHead` does, so that `class_names_of` reads an ensemble too).

    Args:
        class_names: the members' class names in index order.
        **kwargs: other `keras.layers.Average` arguments.

    Call arguments:
        inputs: list of the members' probabilities, each (batch, 1) or
            (batch, num_classes).

    Example:
    >>> head = MeanProbabilities(["negative", "positive"])
    >>> mean = head([np.full((1, 1), 0.2), np.full((1, 1), 0.6)])
    >>> round(float(mean[0, 0]), 4)
    0.4
    """

    def __init__(self, class_names: Sequence[str], **kwargs):
        super().__init__(**kwargs)
        self.class_names = [str(name) for name in class_names]

    def get_config(self) -> dict:
        return {**super().get_config(), "class_names": self.class_names}


@keras.saving.register_keras_serializable(package="rnnkit")
class MaskedGlobalMaxPooling1D(keras.layers.Layer):
    """The maximum of each feature over the unmasked time steps.

    `keras.layers.GlobalMaxPooling1D` ignores the mask, so right-padded steps (whose
    recurrent outputs are copies of the last real step, or zeros) would take part in
    the maximum; here masked steps are left out. A row with every step masked gives
    zeros.

    Call arguments:
        inputs: float tensor (batch, time, features).
        mask: optional boolean tensor (batch, time), True for real steps; passed by
            Keras from an `Embedding(mask_zero=True)` upstream.

    Returns:
        Float tensor (batch, features).

    Example:
    >>> x = np.array([[[1.0], [5.0], [9.0]]])
    >>> pooled = MaskedGlobalMaxPooling1D()(x, mask=np.array([[True, True, False]]))
    >>> keras.ops.convert_to_numpy(pooled).tolist()
    [[5.0]]
    """

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.supports_masking = True

    def call(self, inputs, mask=None):
        if mask is None:
            return ops.max(inputs, axis=1)
        # expand_dims, not [:, :, None]: LiteRT's STRIDED_SLICE takes no new axis
        # of a boolean tensor.
        mask = ops.expand_dims(ops.cast(mask, "bool"), -1)  # (batch, time, 1)
        # Masked steps take the row's own minimum, not -inf: tf2onnx writes
        # `where` as cond * x + (1 - cond) * y, and 0 * -inf is NaN.
        lowest = ops.min(inputs, axis=1, keepdims=True)  # (batch, 1, features)
        maxima = ops.max(ops.where(mask, inputs, lowest), axis=1)  # (batch, features)
        has_steps = ops.any(mask, axis=1)  # (batch, 1)
        return ops.where(has_steps, maxima, ops.zeros_like(maxima))

    def compute_mask(self, inputs, mask=None):
        return None

    def compute_output_shape(self, input_shape):
        return (input_shape[0], input_shape[2])


def make_text_vectorizer(
    texts: Sequence[str] | np.ndarray,
    vocabulary_size: int = 20000,
    lowercase: bool = True,
) -> keras.layers.TextVectorization:
    """A `TextVectorization` adapted to `texts`: the `vocabulary_size` most frequent
    tokens (including padding and the out-of-vocabulary token), whitespace split,
    standardized by `TextStandardizer`, padded per batch."""
    if not isinstance(vocabulary_size, int) or vocabulary_size < 3:
        raise ValueError(
            "Argument `vocabulary_size` must be an integer >= 3, received "
            f"vocabulary_size={vocabulary_size!r}."
        )
    vectorizer = keras.layers.TextVectorization(
        max_tokens=vocabulary_size,
        standardize=TextStandardizer(lowercase=lowercase),
        split="whitespace",
        output_mode="int",
        name="vectorizer",
    )
    vectorizer.adapt(tf.constant(np.asarray(texts, dtype=str)), batch_size=1024)
    return vectorizer


def build_sequence_classifier(
    vectorizer: keras.layers.TextVectorization,
    class_names: Sequence[str],
    *,
    sequence_length: int = 400,
    keep: str = "first",
    embedding_dim: int = 128,
    cell_type: str = "lstm",
    units: int = 64,
    num_layers: int = 1,
    bidirectional: bool = True,
    pooling: str = "last",
    embedding_dropout: float = 0.0,
    dropout: float = 0.3,
    recurrent_dropout: float = 0.0,
    seed: int | None = None,
) -> keras.Model:
    """The classifier as a functional `keras.Model` (not compiled).

    Args:
        vectorizer: an adapted `TextVectorization` (see `make_text_vectorizer`).
        class_names: the class names in label order; two give one sigmoid unit
            (P(class 1)), more give a softmax (see `ClassificationHead`).
        sequence_length: the most tokens of a text the recurrent layers read.
        keep: which tokens of a longer text are kept: `"first"` or `"last"`.
        embedding_dim: size of the learned word vectors.
        cell_type: the name of a registered recurrent layer (`"lstm"`, `"gru"`,
            `"simple_rnn"`, ...; `rnnkit.layers.get_recurrent`).
        units: units per recurrent layer (per direction).
        num_layers: stacked recurrent layers.
        bidirectional: wrap each recurrent layer in `keras.layers.Bidirectional`.
        pooling: `"last"` reads the final state(s); `"mean"` averages the last
            layer's outputs over the unmasked time steps, `"max"` takes their
            maximum per feature, `"mean_max"` concatenates both, and `"concat"` the
            final state(s), the maximum and the mean (ULMFiT's "concat pooling",
            Howard & Ruder 2018: [h_T, maxpool(H), meanpool(H)]; h_T is the state
            after the last unmasked step, each direction's own when
            bidirectional).
        embedding_dropout: `SpatialDropout1D` rate on the word vectors (drops whole
            embedding channels).
        dropout: dropout rate on the recurrent inputs and before the output layer.
        recurrent_dropout: dropout rate on the recurrent state (slows the step loop).
        seed: seed of the weight initializers and dropout masks.

    Returns:
        A model that maps a batch of strings (batch,) to probabilities: (batch, 1)
        for two classes, (batch, len(class_names)) otherwise.
    """
    recurrent_class = recurrent_layer_class(cell_type)
    _check_choice("pooling", pooling, POOLING)
    for name, value in (
        ("embedding_dim", embedding_dim),
        ("units", units),
        ("num_layers", num_layers),
    ):
        if not isinstance(value, int) or value < 1:
            raise ValueError(
                f"Argument `{name}` must be a positive integer, received "
                f"{name}={value!r}."
            )
    texts = keras.Input(shape=(), dtype="string", name="text")
    token_ids = vectorizer(texts)  # (batch, time)
    token_ids = TruncateSequence(sequence_length, keep=keep, name="truncate")(token_ids)
    hidden = keras.layers.Embedding(
        vectorizer.vocabulary_size(),
        embedding_dim,
        mask_zero=True,
        embeddings_initializer=keras.initializers.RandomUniform(-0.05, 0.05, seed=seed),
        name="embedding",
    )(token_ids)  # (batch, width, embedding_dim)
    if embedding_dropout:
        hidden = keras.layers.SpatialDropout1D(embedding_dropout, seed=seed)(hidden)
    final_state = None
    for index in range(num_layers):
        is_last = index == num_layers - 1
        keep_state = is_last and pooling == "concat"
        layer = recurrent_class(
            units,
            dropout=dropout,
            recurrent_dropout=recurrent_dropout,
            return_sequences=not is_last or pooling != "last",
            return_state=keep_state,
            seed=None if seed is None else seed + index,
            name=f"{cell_type}_{index + 1}",
        )
        if bidirectional:
            layer = keras.layers.Bidirectional(layer, name=f"bidirectional_{index + 1}")
        hidden = layer(hidden)  # (batch, [width,] units * directions)
        if keep_state:
            # [outputs, *forward states, *backward states]: h is each direction's
            # first state (an LSTM's c follows it).
            hidden, *states = hidden
            if bidirectional:
                final_state = keras.layers.Concatenate(name="final_states")(
                    [states[0], states[len(states) // 2]]
                )  # (batch, 2 * units)
            else:
                final_state = states[0]  # (batch, units)
    if pooling != "last":
        summary = {
            "mean": lambda: keras.layers.GlobalAveragePooling1D(name="mean_over_time")(
                hidden
            ),
            "max": lambda: MaskedGlobalMaxPooling1D(name="max_over_time")(hidden),
            "final": lambda: final_state,
        }
        parts = {
            "mean": ("mean",),
            "max": ("max",),
            "mean_max": ("mean", "max"),
            "concat": ("final", "max", "mean"),
        }[pooling]
        summaries = [summary[part]() for part in parts]
        hidden = (
            summaries[0]
            if len(summaries) == 1
            else keras.layers.Concatenate(
                name="mean_and_max" if pooling == "mean_max" else "concat_pooling"
            )(summaries)
        )  # (batch, units * directions * len(summaries))
    hidden = keras.layers.Dropout(dropout, seed=seed, name="head_dropout")(hidden)
    probabilities = ClassificationHead(
        class_names, dtype="float32", name="probabilities"
    )(hidden)  # (batch, 1) or (batch, num_classes)
    return keras.Model(texts, probabilities, name="sequence_classifier")


def compile_sequence_classifier(
    model: keras.Model,
    learning_rate: float | keras.optimizers.schedules.LearningRateSchedule = 1e-3,
    factors: Mapping[str, float] | None = None,
) -> keras.Model:
    """Compiles with Adam, the matching cross-entropy and accuracy; returns `model`.

    `learning_rate` is a number or a Keras schedule (e.g. `CosineDecay`). `factors`
    (layer path -> factor, e.g. from `rnnkit.models.transfer.discriminative_factors`)
    scale it per layer through `rnnkit.optimizers.LayerwiseAdam`.

    Two classes: binary cross-entropy on labels 0/1 of shape (batch, 1). More:
    sparse categorical cross-entropy on integer labels (batch,).
    """
    binary = len(class_names_of(model)) == 2
    if factors is None:
        optimizer = keras.optimizers.Adam(learning_rate)
    else:
        from rnnkit.optimizers import LayerwiseAdam

        optimizer = LayerwiseAdam(learning_rate, factors=factors)
    model.compile(
        optimizer=optimizer,
        loss="binary_crossentropy" if binary else "sparse_categorical_crossentropy",
        metrics=["accuracy"],
    )
    return model


def class_names_of(model: keras.Model) -> list[str]:
    """The class names saved in the model's `ClassificationHead` (label order)."""
    return list(model.get_layer("probabilities").class_names)


def class_probabilities(
    model: keras.Model, texts: Sequence[str], **kwargs
) -> np.ndarray:
    """(n, num_classes) probabilities for raw texts, also for the one-unit binary head.

    `kwargs` go to `model.predict` (e.g. `batch_size`, `verbose`).
    """
    texts = tf.constant(np.asarray(texts, dtype=str).reshape(-1))
    probabilities = np.asarray(model.predict(texts, **kwargs), dtype="float64")
    if probabilities.shape[-1] == 1:
        probabilities = np.concatenate([1 - probabilities, probabilities], axis=-1)
    return probabilities


def _check_choice(name: str, value: str, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise ValueError(
            f"Argument `{name}` must be one of {choices}, received {name}={value!r}."
        )
