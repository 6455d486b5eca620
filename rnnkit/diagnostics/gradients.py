"""Gradient norms through time, spectral norms of the recurrent kernels, and the
gradient norm before and after clipping (the theory: `rnnkit.diagnostics`)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

import keras
import numpy as np

from rnnkit._keras_private import nested_layers


def state_gradient_norms(
    cells: Sequence[keras.layers.Layer],
    inputs: Any,
    loss: Callable[[Any], Any],
) -> np.ndarray:
    """||dL/dh_t|| for every example, layer and step, where L = loss(h_T).

    Args:
        cells: rnnkit (or Keras) RNN cells, stacked: the hidden state of one is the
            input of the next. Each is called as `cell(x_t, states)`.
        inputs: (batch, T, features) inputs of the first cell.
        loss: the scalar loss from the last cell's final hidden state h_T
            (batch, units). Sum over the batch (not the mean), so that each example's
            gradient is its own loss's.

    Returns:
        (batch, layers, T) float64 norms; index t - 1 holds step t, so the last column
        is ||dL/dh_T|| and column T - k the gradient k steps back.
    """
    import tensorflow as tf

    inputs = tf.convert_to_tensor(inputs, "float32")
    batch_size, steps = int(inputs.shape[0]), int(inputs.shape[1])
    with tf.GradientTape() as tape:
        states = [list(cell.get_initial_state(batch_size)) for cell in cells]
        hidden: list[list[Any]] = [[] for _ in cells]
        layer_input = None
        for t in range(steps):
            layer_input = inputs[:, t]  # (batch, features)
            for index, cell in enumerate(cells):
                _, new_states = cell(layer_input, states[index], training=False)
                if not isinstance(new_states, (list, tuple)):
                    new_states = [new_states]
                states[index] = list(new_states)
                # h_t feeds both the next step and the next layer.
                layer_input = states[index][0]  # (batch, units)
                hidden[index].append(layer_input)
        value = loss(layer_input)
    gradients = tape.gradient(value, hidden)
    norms = np.stack(
        [
            [
                np.zeros(batch_size) if g is None else np.linalg.norm(g, axis=-1)
                for g in layer
            ]
            for layer in gradients
        ]
    )  # (layers, T, batch)
    return norms.transpose(2, 0, 1).astype("float64")


def language_model_gradient_norms(model: Any, ids: np.ndarray) -> np.ndarray:
    """`state_gradient_norms` of a `LanguageModel` on windows of T + 1 token ids:
    L is the cross-entropy of predicting `ids[:, T]` from `ids[:, :T]`."""
    import tensorflow as tf

    ids = np.asarray(ids)
    inputs = model.embedding(ids[:, :-1])  # (batch, T, embedding_dim)
    targets = ids[:, -1]

    def loss(last_hidden):
        logits = model.logits(last_hidden)  # (batch, vocabulary)
        return tf.reduce_sum(
            keras.losses.sparse_categorical_crossentropy(
                targets, logits, from_logits=True
            )
        )

    cells = [layer.cell for layer in model.recurrent_layers]
    return state_gradient_norms(cells, inputs, loss)


def spectral_norms(layers: Iterable[Any]) -> list[dict[str, Any]]:
    """sigma_max of each recurrent layer's recurrent kernel, whole and per gate.

    Rows {"layer", "gate", "sigma_max"}; gate "all" is the whole (units, gates *
    units) kernel; LSTM gates are i, f, c, o and GRU gates z, r, h (Keras order).
    """
    gate_names = {1: ("h",), 3: ("z", "r", "h"), 4: ("i", "f", "c", "o")}
    rows = []
    for layer in layers:
        cell = getattr(layer, "cell", layer)
        kernel = keras.ops.convert_to_numpy(cell.recurrent_kernel).astype("float64")
        units = kernel.shape[0]
        gates = kernel.shape[1] // units
        rows.append(
            {"layer": layer.name, "gate": "all", "sigma_max": _sigma_max(kernel)}
        )
        if gates > 1:
            for name, block in zip(
                gate_names[gates], np.split(kernel, gates, axis=1), strict=True
            ):
                rows.append(
                    {"layer": layer.name, "gate": name, "sigma_max": _sigma_max(block)}
                )
    return rows


def _sigma_max(matrix: np.ndarray) -> float:
    return float(np.linalg.norm(matrix, ord=2))


class SpectralNormTracker(keras.callbacks.Callback):
    """Records sigma_max of the recurrent kernels every `every` training batches.

    Args:
        layers: the recurrent layers to watch (default: every layer of the model
            that has a cell with a `recurrent_kernel`).
        every: record after every this many batches (and at the end of each epoch).

    After training, `rows` holds {"step", "layer", "gate", "sigma_max"} rows.
    """

    def __init__(self, layers: Sequence[Any] | None = None, every: int = 50):
        super().__init__()
        if every < 1:
            raise ValueError(f"every must be >= 1; received {every}")
        self.watched = layers
        self.every = every
        self.rows: list[dict[str, Any]] = []
        self.step = 0

    def _layers(self) -> list[Any]:
        if self.watched is not None:
            return list(self.watched)
        return [
            layer
            for layer in nested_layers(self.model)
            if hasattr(getattr(layer, "cell", None), "recurrent_kernel")
        ]

    def record(self, step: int) -> None:
        for row in spectral_norms(self._layers()):
            self.rows.append({"step": step, **row})

    def on_train_begin(self, logs=None):
        if not self.rows:
            self.record(0)

    def on_train_batch_end(self, batch, logs=None):
        self.step += 1
        if self.step % self.every == 0:
            self.record(self.step)

    def on_epoch_end(self, epoch, logs=None):
        if self.step % self.every:
            self.record(self.step)


def train_with_clipping(
    model: Any,
    batches: Iterable[tuple[np.ndarray, np.ndarray]],
    optimizer: keras.optimizers.Optimizer,
    clipnorm: float,
    tracker: SpectralNormTracker | None = None,
) -> list[dict[str, float]]:
    """Trains `model` (next-token logits) on `batches`, clipping the gradients to the
    global norm `clipnorm` (0: no clipping) as `global_clipnorm` would.

    Returns one row per step: {"step", "loss", "norm_before", "norm_after",
    "clipped"}; `tracker.record(step)` runs after every `tracker.every` steps.
    """
    import tensorflow as tf

    loss_function = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    variables = model.trainable_variables

    @tf.function
    def gradients(inputs, targets):
        with tf.GradientTape() as tape:
            loss = loss_function(targets, model(inputs, training=True))
        grads = tape.gradient(loss, variables)
        norm = tf.linalg.global_norm(grads)
        if clipnorm:
            grads, _ = tf.clip_by_global_norm(grads, clipnorm, use_norm=norm)
        return loss, grads, norm

    rows = []
    if tracker is not None:
        tracker.record(0)
    for step, (inputs, targets) in enumerate(batches, start=1):
        loss, grads, norm = gradients(inputs, targets)
        optimizer.apply_gradients(zip(grads, variables, strict=True))
        norm = float(norm)
        rows.append(
            {
                "step": step,
                "loss": float(loss),
                "norm_before": norm,
                "norm_after": min(norm, clipnorm) if clipnorm else norm,
                "clipped": float(bool(clipnorm) and norm > clipnorm),
            }
        )
        if tracker is not None and step % tracker.every == 0:
            tracker.record(step)
    return rows
