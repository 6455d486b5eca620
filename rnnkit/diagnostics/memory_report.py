"""A sweep of the memory tasks (`rnnkit diagnose --task adding,copy`): every task, cell,
length and clipping arm trained and measured, written as CSV and PNG files.

Files (each written atomically, the tables again after every model, so that an
interrupted sweep keeps what it measured):

- `memory_results.csv`: one row per model (`train_memory_model`'s row, sigma_max(W_hh)
  of the trained recurrent kernel, and the gradient norm at a few distances);
- `memory_summary.csv`: per task, cell and clipping arm, the longest length solved
  with every shorter length solved too, and the first length not solved;
- `memory_gradients.csv`: mean ||dL/dh_t|| against T - t for every model;
- `memory_errors.png`: test error / baseline against length, one panel per task and
  cell, one line per clipping arm;
- `memory_gradients.png`: ||dL/dh_t|| against T - t (log scale), one panel per task
  and cell, one line per length (the clipped arm when there are both).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from rnnkit.diagnostics.memory_tasks import (
    DEFAULT,
    SOLVED_FRACTION,
    MemorySettings,
    gradient_probe,
    train_memory_model,
)
from rnnkit.errors import RnnkitError
from rnnkit.files import write_csv, write_text

# Distances T - t of the gradient norm copied into memory_results.csv.
REPORTED_DISTANCES = (10, 50, 100)


def memory_sweep(
    tasks: Sequence[str],
    cells: Sequence[str],
    lengths: Sequence[int] | dict[str, Sequence[int]],
    output_dir: Path,
    settings: MemorySettings | dict[str, MemorySettings] | None = None,
    *,
    clips: Sequence[bool] = (True, False),
    all_lengths: bool = False,
    log: Callable[[str], None] | None = None,
) -> dict[str, Path]:
    """Trains and measures every (task, cell, length, clipping arm); writes the files
    of the module docstring into `output_dir` and returns {name: path}. `log` gets
    one line per model.

    `settings` are those of every task, or {task: settings} (default:
    `memory_tasks.DEFAULT`); `lengths` the T of every task, or {task: lengths}. They
    run shortest first; unless `all_lengths`, a cell and arm that failed at one
    length skips the longer ones (they cost the whole budget and fail too).
    """
    output_dir = Path(output_dir)
    rows: list[dict[str, Any]] = []
    gradient_rows: list[dict[str, Any]] = []
    written: dict[str, Path] = {}
    for task in tasks:
        chosen = settings or DEFAULT
        task_settings = chosen[task] if isinstance(chosen, dict) else chosen
        for cell in cells:
            for clip in clips:
                failed = False
                task_lengths = lengths[task] if isinstance(lengths, dict) else lengths
                for length in sorted(task_lengths):
                    if failed and not all_lengths:
                        break
                    model, row = train_memory_model(
                        task, cell, length, task_settings, clip=clip
                    )
                    norms, sigma = gradient_probe(model, task, length, task_settings)
                    row["sigma_max_W_hh"] = sigma
                    for distance in REPORTED_DISTANCES:
                        row[f"grad_norm_at_{distance}"] = (
                            float(norms[distance]) if distance < len(norms) else None
                        )
                    rows.append(row)
                    failed = not row["solved"]
                    gradient_rows.extend(
                        {
                            "task": task,
                            "cell": cell,
                            "length": length,
                            "clipnorm": row["clipnorm"],
                            "distance": distance,
                            "mean_norm": float(value),
                        }
                        for distance, value in enumerate(norms)
                    )
                    if log is not None:
                        log(describe(row, task_settings.steps))
                    written.update(write_tables(rows, gradient_rows, output_dir))
    written.update(plot_errors(rows, output_dir))
    written.update(plot_gradients(gradient_rows, output_dir))
    return written


def check_writable(output_dir: Path) -> None:
    """Raises `RnnkitError` unless files can be written into `output_dir` (created if
    missing): before a sweep of minutes, not after it."""
    probe = Path(output_dir) / ".write-check"
    try:
        write_text(probe, "")
        probe.unlink()
    except OSError as error:
        raise RnnkitError(
            f"cannot write into {output_dir} ({error.strerror or error}); choose "
            "another --output"
        ) from None


def describe(row: dict[str, Any], budget: int) -> str:
    """One line per model: what it reached against the baseline, and how fast."""
    clip = f"clip {row['clipnorm']:g}" if row["clipnorm"] else "no clip"
    if row["solved"]:
        outcome = f"solved in {row['steps_to_solve']} steps"
    elif row["steps_trained"] < budget:
        # The validation set passed the threshold, the test set did not.
        outcome = f"not solved: stopped at {row['steps_trained']} steps on validation"
    else:
        outcome = f"not solved in {row['steps_trained']} steps"
    sigma = row["sigma_max_W_hh"]
    sigma = "none (no W_hh)" if math.isnan(sigma) else f"{sigma:.2f}"
    return (
        f"{row['task']:6} {row['cell']:10} T={row['length']:<4} {clip:9} "
        f"error {row['test_error']:.4g} = {row['error_vs_baseline']:.3f} x baseline, "
        f"{outcome} ({row['seconds']:.0f} s), sigma_max(W_hh) {sigma}"
    )


def summarize(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per task, cell and clipping arm: the longest length solved with every shorter
    measured length solved too (None: not even the shortest), and the first length
    not solved (None: all solved)."""
    groups: dict[tuple[str, str, float], list[dict[str, Any]]] = {}
    for row in rows:
        key = (row["task"], row["cell"], row["clipnorm"])
        groups.setdefault(key, []).append(row)
    summary = []
    for (task, cell, clipnorm), group in groups.items():
        longest, first_failure = None, None
        for row in sorted(group, key=lambda r: r["length"]):
            if not row["solved"]:
                first_failure = row["length"]
                break
            longest = row["length"]
        summary.append(
            {
                "task": task,
                "cell": cell,
                "clipnorm": clipnorm,
                "longest_solved": longest,
                "first_not_solved": first_failure,
                "lengths": " ".join(str(r["length"]) for r in group),
            }
        )
    return summary


def write_tables(
    rows: list[dict[str, Any]],
    gradient_rows: list[dict[str, Any]],
    output_dir: Path,
) -> dict[str, Path]:
    return {
        "memory_results.csv": write_csv(output_dir / "memory_results.csv", rows),
        "memory_summary.csv": write_csv(
            output_dir / "memory_summary.csv", summarize(rows)
        ),
        "memory_gradients.csv": write_csv(
            output_dir / "memory_gradients.csv", gradient_rows
        ),
    }


def _panels(rows: Sequence[dict[str, Any]]) -> tuple[Any, Any, list, list]:
    from rnnkit import plots

    tasks = list(dict.fromkeys(row["task"] for row in rows))
    cells = list(dict.fromkeys(row["cell"] for row in rows))
    figure, axes = plots.plt.subplots(
        len(tasks),
        len(cells),
        figsize=(4 * len(cells), 3.2 * len(tasks)),
        squeeze=False,
        sharey="row",
        layout="constrained",
    )
    return figure, axes, tasks, cells


def plot_errors(rows: Sequence[dict[str, Any]], output_dir: Path) -> dict[str, Path]:
    """memory_errors.png: test error / baseline against length (log-log)."""
    from rnnkit import plots

    figure, axes, tasks, cells = _panels(rows)
    for i, task in enumerate(tasks):
        for j, cell in enumerate(cells):
            axis = axes[i][j]
            arms = sorted({r["clipnorm"] for r in rows}, reverse=True)
            for index, clipnorm in enumerate(arms):
                points = sorted(
                    (r["length"], r["error_vs_baseline"])
                    for r in rows
                    if (r["task"], r["cell"], r["clipnorm"]) == (task, cell, clipnorm)
                )
                if points:
                    lengths, ratios = zip(*points, strict=True)
                    label = f"clip {clipnorm:g}" if clipnorm else "no clip"
                    axis.loglog(lengths, ratios, "o-", color=f"C{index}", label=label)
            axis.axhline(1.0, color="grey", linewidth=0.8, label="baseline")
            axis.axhline(
                SOLVED_FRACTION, color="green", linestyle=":", label="solved below"
            )
            measured = sorted(
                {r["length"] for r in rows if (r["task"], r["cell"]) == (task, cell)}
            )
            axis.set_xticks(measured, [str(length) for length in measured])
            axis.minorticks_off()
            axis.set_title(f"{task}: {cell}")
            axis.set_xlabel("T (length or delay)")
            if j == 0:
                axis.set_ylabel("test error / baseline")
            axis.grid(True, which="both", alpha=0.3)
    axes[0][0].legend(fontsize=7)
    path = plots.save_figure(figure, Path(output_dir) / "memory_errors.png")
    return {"memory_errors.png": path}


def plot_gradients(
    gradient_rows: Sequence[dict[str, Any]], output_dir: Path
) -> dict[str, Path]:
    """memory_gradients.png: mean ||dL/dh_t|| against T - t, log scale."""
    from rnnkit import plots

    figure, axes, tasks, cells = _panels(gradient_rows)
    arm = max(row["clipnorm"] for row in gradient_rows)  # the clipped arm if any
    for i, task in enumerate(tasks):
        for j, cell in enumerate(cells):
            axis = axes[i][j]
            lengths = sorted(
                {
                    r["length"]
                    for r in gradient_rows
                    if (r["task"], r["cell"], r["clipnorm"]) == (task, cell, arm)
                }
            )
            for index, length in enumerate(lengths):
                curve = np.array(
                    [
                        r["mean_norm"]
                        for r in gradient_rows
                        if (r["task"], r["cell"], r["clipnorm"], r["length"])
                        == (task, cell, arm, length)
                    ]
                )
                # Exact zeros (underflow) have no place on a log scale.
                shown = np.where(curve > 0, curve, np.nan)
                axis.semilogy(shown, color=f"C{index}", label=f"T={length}")
            axis.set_title(f"{task}: {cell}")
            axis.set_xlabel("T - t (steps back from the loss)")
            if j == 0:
                axis.set_ylabel("mean ||dL/dh_t||")
            axis.grid(True, which="both", alpha=0.3)
            axis.legend(fontsize=7)
    path = plots.save_figure(figure, Path(output_dir) / "memory_gradients.png")
    return {"memory_gradients.png": path}
