"""Gradient-flow diagnostics: why a vanilla RNN forgets and an LSTM or GRU does not.

Backpropagation through time multiplies the gradient of the loss at the last step T by
one Jacobian per step it travels back:

    dL_T/dh_t = dL_T/dh_T * prod_{s=t+1..T} dh_s/dh_{s-1}

For a simple RNN, h_s = phi(x_s W + h_{s-1} U + b), so dh_s/dh_{s-1} = U diag(phi'),
and ||dL_T/dh_t|| <= ||dL_T/dh_T|| (gamma sigma_max(U))^(T-t), with gamma the bound of
|phi'| (1 for tanh): below 1 the gradient vanishes exponentially with T - t
(Bengio et al. 1994; Pascanu et al. 2013). The LSTM's additive cell state (and the
GRU's interpolation) gives the gradient a path whose factor is the forget (update) gate
instead.

- `state_gradient_norms` measures ||dL/dh_t|| for every step t of a stack of rnnkit
  cells, stepped one at a time under a `tf.GradientTape` (TensorFlow backend).
- `language_model_gradient_norms` does it for a `LanguageModel`, with L the
  cross-entropy of the next token after the window.
- `spectral_norms` gives sigma_max of every recurrent kernel (per gate too);
  `SpectralNormTracker` records them during training (a Keras callback).
- `train_with_clipping` trains with global-norm clipping and records the gradient norm
  before and after clipping at every step.
- `diagnose_language_model` puts it together for `rnnkit diagnose` and writes
  `diagnostics/*.csv` and `*.png`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import keras
import numpy as np

from rnnkit.files import write_csv

__all__ = [
    "SpectralNormTracker",
    "compare_models",
    "diagnose_language_model",
    "language_model_gradient_norms",
    "probe_windows",
    "spectral_norms",
    "state_gradient_norms",
    "train_with_clipping",
    "write_spectral_norms",
]


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
            for layer in self.model._flatten_layers(include_self=False)
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


# -- rnnkit diagnose -------------------------------------------------------------------


def probe_windows(ids: np.ndarray, count: int, length: int) -> np.ndarray:
    """`count` windows of `length` ids spread evenly over `ids` (no randomness)."""
    ids = np.asarray(ids)
    if len(ids) < length + count:
        raise ValueError(
            f"need at least {length + count} tokens for {count} windows of {length}; "
            f"have {len(ids)}"
        )
    starts = np.linspace(0, len(ids) - length, count).astype(int)
    return np.stack([ids[start : start + length] for start in starts])


def random_batches(
    ids: np.ndarray, batch_size: int, bptt: int, steps: int, seed: int
) -> Iterable[tuple[np.ndarray, np.ndarray]]:
    """`steps` batches of windows at random places of `ids` (inputs, next tokens)."""
    rng = np.random.default_rng(seed)
    for _ in range(steps):
        starts = rng.integers(0, len(ids) - bptt - 1, size=batch_size)
        windows = np.stack([ids[s : s + bptt + 1] for s in starts]).astype("int32")
        yield windows[:, :-1], windows[:, 1:]


def diagnose_language_model(
    models: dict[str, tuple[Any, Any]],
    probe_ids: np.ndarray,
    output_dir: Path,
    clipping: dict[str, list[dict[str, float]]] | None = None,
    spectral: dict[str, list[dict[str, Any]]] | None = None,
) -> dict[str, Path]:
    """Writes the gradient-flow figures and tables of `models` into `output_dir`.

    Args:
        models: {label: (fresh model, trained model)}, `LanguageModel`s (either may
            be None).
        probe_ids: (windows, T + 1) ids on which the gradient norms are measured.
        clipping: {label: rows of `train_with_clipping`}.
        spectral: {label: rows of `SpectralNormTracker`}.

    Returns:
        {name: path} of the files written: gradient_norms.csv/png and, when given,
        clipping.csv/png and spectral_norms.csv/png.
    """
    from rnnkit import plots

    output_dir = Path(output_dir)
    written = {}
    rows = []
    curves = {}
    for label, pair in models.items():
        for state, model in zip(("fresh", "trained"), pair, strict=True):
            if model is None:
                continue
            norms = language_model_gradient_norms(model, probe_ids)  # (b, layers, T)
            mean = norms.mean(axis=0)[-1][::-1]  # top layer, by distance T - t
            sigma = spectral_norms(model.recurrent_layers[-1:])[0]["sigma_max"]
            bound = mean[0] * sigma ** np.arange(len(mean))
            curves[f"{label} {state}"] = (mean, bound if "simple" in label else None)
            for distance, (value, limit) in enumerate(zip(mean, bound, strict=True)):
                rows.append(
                    {
                        "model": label,
                        "state": state,
                        "distance": distance,
                        "mean_norm": float(value),
                        "sigma_max": sigma,
                        "sigma_bound": float(limit),
                    }
                )
    written["gradient_norms.csv"] = write_csv(output_dir / "gradient_norms.csv", rows)
    figure, axis = plots.plt.subplots(figsize=(8, 5))
    for index, (name, (mean, bound)) in enumerate(curves.items()):
        color = f"C{index // 2 if len(curves) > 1 else 0}"
        style = "-" if name.endswith("trained") else "--"
        axis.semilogy(mean, style, color=color, label=name)
        if bound is not None:
            axis.semilogy(bound, ":", color=color, label=f"{name}: sigma_max^(T-t)")
    axis.set_xlabel("T - t (steps back from the loss)")
    axis.set_ylabel("mean ||dL_T / dh_t||")
    axis.set_title("Gradient reaching h_t from the loss at step T")
    # A bound above 1 grows exponentially: keep the measured curves readable.
    highest = max(float(mean.max()) for mean, _ in curves.values())
    axis.set_ylim(max(axis.get_ylim()[0], 1e-20), highest * 100)
    axis.legend(fontsize=8)
    axis.grid(True, which="both", alpha=0.3)
    written["gradient_norms.png"] = plots.save_figure(
        figure, output_dir / "gradient_norms.png"
    )

    if clipping:
        table = [{"model": k, **row} for k, rs in clipping.items() for row in rs]
        written["clipping.csv"] = write_csv(output_dir / "clipping.csv", table)
        figure, axis = plots.plt.subplots(figsize=(8, 4))
        for index, (label, steps) in enumerate(clipping.items()):
            before = [row["norm_before"] for row in steps]
            after = [row["norm_after"] for row in steps]
            fired = 100 * np.mean([row["clipped"] for row in steps])
            axis.semilogy(
                before,
                color=f"C{index}",
                alpha=0.5,
                label=f"{label}: before clipping ({fired:.0f}% clipped)",
            )
            axis.semilogy(after, "--", color=f"C{index}", label=f"{label}: after")
        axis.set_xlabel("training step")
        axis.set_ylabel("global gradient norm")
        axis.legend(fontsize=8)
        written["clipping.png"] = plots.save_figure(figure, output_dir / "clipping.png")

    if spectral:
        written.update(write_spectral_norms(spectral, output_dir))
    return written


def write_spectral_norms(
    spectral: dict[str, list[dict[str, Any]]], output_dir: Path
) -> dict[str, Path]:
    """spectral_norms.csv and .png from {label: rows of `SpectralNormTracker`}: one
    curve of sigma_max(W_hh) per label and recurrent layer."""
    from rnnkit import plots

    output_dir = Path(output_dir)
    table = [{"model": k, **row} for k, rows in spectral.items() for row in rows]
    written = {
        "spectral_norms.csv": write_csv(output_dir / "spectral_norms.csv", table)
    }
    figure, axis = plots.plt.subplots(figsize=(8, 4))
    curves: dict[str, list[tuple[int, float]]] = {}
    for row in table:
        if row["gate"] == "all":
            name = f"{row['model']} {row['layer']}"
            curves.setdefault(name, []).append((row["step"], row["sigma_max"]))
    for name, points in curves.items():
        steps, values = zip(*points, strict=True)
        axis.plot(steps, values, label=name)
    axis.axhline(1.0, color="grey", linewidth=0.8)
    axis.set_xlabel("training step")
    axis.set_ylabel("sigma_max(W_hh)")
    axis.legend(fontsize=8)
    written["spectral_norms.png"] = plots.save_figure(
        figure, output_dir / "spectral_norms.png"
    )
    return written


def compare_models(
    fresh: dict[str, Any],
    train_ids: np.ndarray,
    probe_ids: np.ndarray,
    output_dir: Path,
    *,
    trained: dict[str, Any] | None = None,
    steps: int = 300,
    batch_size: int = 32,
    bptt: int = 35,
    make_optimizer: Callable[[], keras.optimizers.Optimizer] | None = None,
    clipnorm: float = 1.0,
    seed: int = 0,
    every: int = 10,
) -> dict[str, Path]:
    """`rnnkit diagnose`: trains a copy of every fresh model for `steps` steps on
    random windows of `train_ids` (recording clipping statistics and sigma_max of
    W_hh), then writes the gradient norms of the fresh and trained models on
    `probe_ids` (the `trained` model of a label, when given, instead of the copy).
    """
    make_optimizer = make_optimizer or (lambda: keras.optimizers.Adam(2e-3))
    trained = dict(trained or {})
    clipping, spectral = {}, {}
    for label, model in fresh.items():
        learner = model.with_batch_size(None, stateful=False)
        tracker = SpectralNormTracker(learner.recurrent_layers, every=every)
        batches = random_batches(train_ids, batch_size, bptt, steps, seed)
        clipping[label] = train_with_clipping(
            learner, batches, make_optimizer(), clipnorm, tracker
        )
        spectral[label] = tracker.rows
        trained.setdefault(label, learner)
    models = {label: (fresh[label], trained[label]) for label in fresh}
    return diagnose_language_model(models, probe_ids, output_dir, clipping, spectral)
