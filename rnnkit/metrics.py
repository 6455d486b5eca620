"""Forecast metrics (numpy only) and the side-by-side table the launcher prints.

Every function takes arrays of the same shape (any shape) and returns a plain float, so
the results go straight into `metrics.json`.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np


def mae(actual: np.ndarray, predicted: np.ndarray) -> float:
    """Mean absolute error."""
    return float(np.mean(np.abs(np.asarray(predicted) - np.asarray(actual))))


def rmse(actual: np.ndarray, predicted: np.ndarray) -> float:
    """Root mean squared error."""
    return float(
        np.sqrt(np.mean(np.square(np.asarray(predicted) - np.asarray(actual))))
    )


def mase(actual: np.ndarray, predicted: np.ndarray, reference: np.ndarray) -> float:
    """Mean absolute scaled error: MAE of `predicted` over MAE of `reference`.

    With the persistence (random-walk) forecast on the same days as `reference`, a value
    below 1 means the forecast beats "tomorrow equals today".
    """
    scale = mae(actual, reference)
    if scale == 0.0:
        return float("nan")
    return mae(actual, predicted) / scale


def directional_accuracy(
    actual_change: np.ndarray, predicted_change: np.ndarray
) -> float:
    """Fraction of cases where the predicted change has the sign of the actual change.

    Cases where the actual change is exactly zero are left out (no direction to get
    right); 0.5 is what a coin flip scores.
    """
    actual_sign = np.sign(np.asarray(actual_change))
    predicted_sign = np.sign(np.asarray(predicted_change))
    moved = actual_sign != 0
    if not np.any(moved):
        return float("nan")
    return float(np.mean(actual_sign[moved] == predicted_sign[moved]))


def format_table(table: Mapping[str, Mapping[str, float]]) -> str:
    """A fixed-width text table: one row per system, one column per metric.

    A metric that a row does not have is shown as "-".
    """
    columns: list[str] = []
    for values in table.values():
        columns.extend(name for name in values if name not in columns)
    width = max([len("system"), *(len(name) for name in table)])
    cells = [["system".ljust(width), *(f"{c:>12}" for c in columns)]]
    for system, values in table.items():
        row = [system.ljust(width)]
        for column in columns:
            value = values.get(column)
            row.append(f"{'-':>12}" if value is None else f"{value:>12.4f}")
        cells.append(row)
    return "\n".join("  ".join(row).rstrip() for row in cells)


def mean_table(
    tables: list[Mapping[str, Mapping[str, float]]],
) -> dict[str, dict[str, float]]:
    """Per-system, per-metric mean over several tables (e.g. backtest folds)."""
    systems: dict[str, dict[str, list[float]]] = {}
    for table in tables:
        for system, values in table.items():
            for name, value in values.items():
                systems.setdefault(system, {}).setdefault(name, []).append(value)
    return {
        system: {name: float(np.nanmean(v)) for name, v in values.items()}
        for system, values in systems.items()
    }
