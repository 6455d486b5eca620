"""Plots shared by recipes and notebooks (matplotlib, Agg backend, PNG files).

Every function writes its figure atomically (temporary file, then rename) and closes it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402 - the backend must be chosen first
import numpy as np  # noqa: E402


def save_figure(
    figure: matplotlib.figure.Figure, path: str | Path, *, tight: bool = True
) -> Path:
    """Writes `figure` as a PNG to `path` atomically and closes it.

    With `tight=False` the PNG keeps the figure's own size (inches x 100 dpi) instead
    of being cropped to its contents.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.stem}.tmp-{os.getpid()}{path.suffix}")
    try:
        figure.savefig(
            temporary, format="png", dpi=100, bbox_inches="tight" if tight else None
        )
        os.replace(temporary, path)
    finally:
        plt.close(figure)
        temporary.unlink(missing_ok=True)
    return path


def training_curves(
    history: Sequence[Mapping[str, float]], path: str | Path, title: str = ""
) -> Path:
    """Loss and metric curves per epoch; `val_*` entries share a panel with their pair.

    `history` holds one mapping per epoch, as written to `history.csv` (an "epoch" key
    is used as the x axis when present).
    """
    names = [
        name for name in history[0] if name != "epoch" and not name.startswith("val_")
    ]
    epochs = [row.get("epoch", index + 1) for index, row in enumerate(history)]
    figure, axes = plt.subplots(
        1, len(names), figsize=(4.5 * len(names), 3.5), squeeze=False
    )
    for axis, name in zip(axes[0], names, strict=True):
        axis.plot(epochs, [row[name] for row in history], marker=".", label="train")
        if f"val_{name}" in history[0]:
            values = [row[f"val_{name}"] for row in history]
            axis.plot(epochs, values, marker=".", label="validation")
        axis.set_xlabel("epoch")
        axis.set_title(name)
        axis.grid(alpha=0.3)
        axis.legend()
    if title:
        figure.suptitle(title)
    return save_figure(figure, path)


def forecast(
    dates: Sequence,
    actual: np.ndarray,
    predictions: Mapping[str, np.ndarray],
    path: str | Path,
    title: str = "",
    ylabel: str = "close",
) -> Path:
    """Actual values against one or more forecasts of the same days (e.g. model and
    persistence), as lines over `dates`."""
    figure, axis = plt.subplots(figsize=(11, 4.5))
    axis.plot(dates, actual, color="black", linewidth=1.2, label="actual")
    for name, values in predictions.items():
        axis.plot(dates, values, linewidth=0.9, alpha=0.85, label=name)
    axis.set_ylabel(ylabel)
    axis.grid(alpha=0.3)
    axis.legend()
    if title:
        axis.set_title(title)
    figure.autofmt_xdate()
    return save_figure(figure, path)


def confusion_matrix(
    matrix: np.ndarray,
    class_names: Sequence[str],
    path: str | Path,
    title: str = "",
) -> Path:
    """A confusion matrix (rows = true class, columns = predicted class) as a heatmap
    with the count and the row share in every cell."""
    matrix = np.asarray(matrix)
    shares = matrix / np.maximum(matrix.sum(axis=1, keepdims=True), 1)
    size = 1.2 + 0.9 * len(class_names)
    figure, axis = plt.subplots(figsize=(size + 1.2, size))
    image = axis.imshow(shares, cmap="Blues", vmin=0.0, vmax=1.0)
    figure.colorbar(image, ax=axis, label="share of the true class")
    for row, column in np.ndindex(matrix.shape):
        axis.text(
            column,
            row,
            f"{matrix[row, column]}\n{shares[row, column]:.1%}",
            ha="center",
            va="center",
            color="white" if shares[row, column] > 0.5 else "black",
        )
    ticks = range(len(class_names))
    axis.set_xticks(ticks, labels=class_names, rotation=45 if size > 4 else 0)
    axis.set_yticks(ticks, labels=class_names)
    axis.set_xlabel("predicted")
    axis.set_ylabel("true")
    if title:
        axis.set_title(title)
    return save_figure(figure, path)


def attention_heatmap(
    weights: np.ndarray,
    source_tokens: Sequence[str],
    target_tokens: Sequence[str],
    path: str | Path,
    title: str = "",
) -> Path:
    """Attention weights as a labelled heatmap: one row per target (output) token, one
    column per source (input) token, darker where the target token attended more.

    `weights` is (len(target_tokens), len(source_tokens)), e.g. one example's
    `return_attention_scores` of an rnnkit attention layer (a single head for
    multi-head attention). The PNG is (2.5 + 0.5 * len(source_tokens)) by
    (1.5 + 0.4 * len(target_tokens)) inches at 100 dpi, so long sentences stay
    readable.
    """
    weights = np.asarray(weights, dtype=np.float64)
    expected_shape = (len(target_tokens), len(source_tokens))
    if weights.shape != expected_shape:
        raise ValueError(
            "`weights` must have one row per target token and one column per source "
            f"token, shape {expected_shape}. Received: shape {weights.shape}"
        )
    figure, axis = plt.subplots(
        figsize=(2.5 + 0.5 * len(source_tokens), 1.5 + 0.4 * len(target_tokens)),
        layout="constrained",
    )
    image = axis.imshow(weights, cmap="viridis", vmin=0.0, aspect="auto")
    figure.colorbar(image, ax=axis, label="attention weight")
    axis.set_xticks(range(len(source_tokens)), labels=source_tokens, rotation=90)
    axis.set_yticks(range(len(target_tokens)), labels=target_tokens)
    axis.set_xlabel("source")
    axis.set_ylabel("target")
    if title:
        axis.set_title(title)
    return save_figure(figure, path, tight=False)


def attention_overlay(
    image: np.ndarray,
    weights: np.ndarray,
    words: Sequence[str],
    path: str | Path,
    title: str = "",
    references: Sequence[str] = (),
) -> Path:
    """An image with one attention map per generated word laid over it.

    `image` is (height, width, 3) uint8 pixels; `weights` is (len(words), h, w), the
    attention weights of each word over the encoder's h x w feature map, upsampled
    (bilinear) to the image. The generated caption and the `references` are written
    under the panels.
    """
    weights = np.asarray(weights, dtype=np.float64)
    if weights.ndim != 3 or weights.shape[0] != len(words):
        raise ValueError(
            "`weights` must be (len(words), h, w), one map per word. Received: shape "
            f"{weights.shape} for {len(words)} words"
        )
    columns = min(5, len(words) + 1)
    rows = -(-(len(words) + 1) // columns)
    panel, title_height = 2.2, 0.5 if title else 0.1
    text_height = 0.17 * (len(references) + 1) + 0.15
    inches = (panel + 0.3) * rows + text_height + title_height
    figure, axes = plt.subplots(
        rows, columns, figsize=(panel * columns, inches), squeeze=False
    )
    # The panels fill the figure between the title and the captions under them.
    figure.subplots_adjust(
        left=0.005,
        right=0.995,
        top=1 - title_height / inches,
        bottom=text_height / inches,
        wspace=0.04,
        hspace=0.15,
    )
    height, width = image.shape[:2]
    panels = axes.ravel()
    panels[0].imshow(image)
    panels[0].set_title("image", fontsize=9)
    for panel, word, attention in zip(panels[1:], words, weights, strict=False):
        panel.imshow(image)
        panel.imshow(
            attention,
            cmap="gray",
            alpha=0.6,
            extent=(0, width, height, 0),
            interpolation="bilinear",
        )
        panel.set_title(word, fontsize=9)
    for panel in panels:
        panel.axis("off")
    text = "generated: " + " ".join(words)
    text += "".join(f"\nreference: {reference}" for reference in references)
    figure.text(0.01, (text_height - 0.1) / inches, text, fontsize=8, va="top")
    if title:
        figure.suptitle(title, fontsize=10, y=1 - 0.12 / inches)
    return save_figure(figure, path, tight=False)
