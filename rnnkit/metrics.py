"""Forecast and classification metrics (numpy only), and the side-by-side table the
launcher prints.

Every metric returns a plain float (or a nested list of ints), so the results go
straight into `metrics.json`. Forecast metrics take arrays of the same shape (any
shape); classification metrics take integer class labels (n,) and, for ROC AUC,
class probabilities (n, num_classes).
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


def confusion_matrix(
    labels: np.ndarray, predicted: np.ndarray, num_classes: int
) -> np.ndarray:
    """Counts (num_classes, num_classes): row = true class, column = predicted class."""
    matrix = np.zeros((num_classes, num_classes), dtype="int64")
    np.add.at(matrix, (np.asarray(labels), np.asarray(predicted)), 1)
    return matrix


def precision_recall_f1(
    labels: np.ndarray, predicted: np.ndarray, num_classes: int
) -> tuple[float, float, float]:
    """Precision, recall and F1 of the positive class (1) for two classes, and their
    unweighted means over the classes (macro average) for more.

    A ratio with nothing to count (no predicted positive, say) is 0.0, as in
    scikit-learn's `zero_division=0`.
    """
    matrix = confusion_matrix(labels, predicted, num_classes).astype("float64")
    hits = np.diag(matrix)
    with np.errstate(divide="ignore", invalid="ignore"):
        precision = np.nan_to_num(hits / matrix.sum(axis=0))
        recall = np.nan_to_num(hits / matrix.sum(axis=1))
        f1 = np.nan_to_num(2 * precision * recall / (precision + recall))
    if num_classes == 2:
        return float(precision[1]), float(recall[1]), float(f1[1])
    return float(precision.mean()), float(recall.mean()), float(f1.mean())


def roc_auc(labels: np.ndarray, probabilities: np.ndarray) -> float:
    """Area under the ROC curve: the chance that a random positive example scores
    higher than a random negative one (ties count half).

    For two classes the score is the probability of class 1; for more, the one-vs-rest
    AUCs of the classes present are averaged (macro). NaN if a class has no examples.
    """
    labels = np.asarray(labels)
    probabilities = np.asarray(probabilities, dtype="float64")
    classes = [1] if probabilities.shape[1] == 2 else range(probabilities.shape[1])
    areas = [_binary_auc(labels == label, probabilities[:, label]) for label in classes]
    return float(np.mean(areas))


def classification_metrics(
    labels: np.ndarray, probabilities: np.ndarray
) -> dict[str, float]:
    """Accuracy, precision, recall, F1 and ROC AUC of class probabilities (n, K)."""
    labels = np.asarray(labels)
    probabilities = np.asarray(probabilities, dtype="float64")
    num_classes = probabilities.shape[1]
    predicted = probabilities.argmax(axis=1)
    precision, recall, f1 = precision_recall_f1(labels, predicted, num_classes)
    return {
        "accuracy": float(np.mean(predicted == labels)),
        "precision": precision,
        "recall": recall,
        "f1": f1,
        "roc_auc": roc_auc(labels, probabilities),
    }


def _binary_auc(is_positive: np.ndarray, scores: np.ndarray) -> float:
    positives = int(is_positive.sum())
    negatives = len(is_positive) - positives
    if positives == 0 or negatives == 0:
        return float("nan")
    # Mann-Whitney U from average ranks, so tied scores count half.
    order = np.argsort(scores, kind="mergesort")
    ranks = np.empty(len(scores), dtype="float64")
    sorted_scores = scores[order]
    starts = np.flatnonzero(np.r_[True, sorted_scores[1:] != sorted_scores[:-1]])
    ends = np.r_[starts[1:], len(scores)]
    for start, end in zip(starts, ends, strict=True):
        ranks[order[start:end]] = (start + end + 1) / 2
    u_statistic = ranks[is_positive].sum() - positives * (positives + 1) / 2
    return float(u_statistic / (positives * negatives))


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
