"""The gradient-flow figures and tables of language models, written as CSV and PNG
(`rnnkit diagnose`'s output)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import keras
import numpy as np

from rnnkit.diagnostics.gradients import (
    SpectralNormTracker,
    language_model_gradient_norms,
    spectral_norms,
    train_with_clipping,
)
from rnnkit.files import write_csv


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
