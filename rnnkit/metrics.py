"""Forecast and classification metrics, and the side-by-side table the launcher prints.

Classification metrics are scikit-learn's (imported inside the functions, so that this
module stays light for the launcher); the forecast metrics are one line of numpy each.

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


def mase(
    actual: np.ndarray,
    predicted: np.ndarray,
    training_series: np.ndarray,
    seasonality: int = 1,
) -> float:
    """Mean absolute scaled error (Hyndman and Koehler 2006).

    The MAE of `predicted` divided by the in-sample MAE of the seasonal naive forecast
    on the training series, mean |y_t - y_{t-m}| with m = `seasonality` (1: the
    one-step naive forecast; the M4 competition's MASE uses the series' seasonal
    period, 24 for hourly data). Below 1, the forecast errs less than that naive
    forecast did, on average, inside the training data. NaN if the training series
    never changes over a season.
    """
    return mae(actual, predicted) / seasonal_scale(training_series, seasonality)


def seasonal_scale(
    training_series: np.ndarray, seasonality: int, *, short: str = "raise"
) -> float:
    """The scale of MASE and MSIS: mean |y_t - y_{t-m}| over the training series, the
    in-sample error of the seasonal naive forecast, over the pairs where both values
    are observed (NaN is missing); NaN when it is 0 or no pair is observed.

    Args:
        training_series: the series before the forecast, oldest first.
        seasonality: m, the season's length in steps (1: the naive forecast's).
        short: a series no longer than m: "raise" a ValueError, or "naive": scale it
            by the naive forecast's error (m = 1), as the forecasting recipe scales a
            series shorter than a season.
    """
    series = np.asarray(training_series, dtype="float64").ravel()
    if seasonality < 1:
        raise ValueError(f"seasonality must be at least 1, received {seasonality}")
    if series.size <= seasonality:
        if short != "naive":
            raise ValueError(
                f"mase needs a training series longer than its seasonality "
                f"({seasonality}), received {series.size} values"
            )
        seasonality = 1
        if series.size <= 1:
            return float("nan")
    differences = np.abs(series[seasonality:] - series[:-seasonality])
    if np.all(np.isnan(differences)):
        return float("nan")
    scale = float(np.nanmean(differences))
    return float("nan") if scale == 0.0 else scale


def smape(actual: np.ndarray, predicted: np.ndarray) -> float:
    """Symmetric mean absolute percentage error, in percent, as the M4 competition
    defines it: mean of 200 |y - y_hat| / (|y| + |y_hat|) (0 to 200). A step where
    both are 0 is a perfect forecast and counts 0 (the M4 series are positive, so
    its tables never meet one)."""
    actual = np.asarray(actual, dtype="float64")
    predicted = np.asarray(predicted, dtype="float64")
    denominator = np.abs(actual) + np.abs(predicted)
    terms = np.divide(
        200.0 * np.abs(actual - predicted),
        denominator,
        out=np.zeros(np.broadcast(actual, predicted).shape),
        where=denominator > 0,
    )
    return float(np.mean(terms))


def msis(
    actual: np.ndarray,
    lower: np.ndarray,
    upper: np.ndarray,
    training_series: np.ndarray,
    seasonality: int = 1,
    alpha: float = 0.05,
    *,
    short: str = "raise",
) -> float:
    """Mean scaled interval score of a (1 - alpha) prediction interval (M4).

    Mean over the steps of (U - L) + 2/alpha (L - y) [y < L] + 2/alpha (y - U)
    [y > U], divided by the in-sample mean |y_t - y_{t-m}| as `mase` is: a narrow
    interval is rewarded, a miss is punished by its distance times 2/alpha. `short`:
    a training series no longer than a season, as `seasonal_scale` takes it.
    """
    actual = np.asarray(actual, dtype="float64")
    lower = np.asarray(lower, dtype="float64")
    upper = np.asarray(upper, dtype="float64")
    score = (
        (upper - lower)
        + (2.0 / alpha) * (lower - actual) * (actual < lower)
        + (2.0 / alpha) * (actual - upper) * (actual > upper)
    )
    scale = seasonal_scale(training_series, seasonality, short=short)
    return float(np.mean(score)) / scale


def coverage(actual: np.ndarray, lower: np.ndarray, upper: np.ndarray) -> float:
    """Fraction of the actual values inside [lower, upper] (a NaN value counts as
    outside: drop missing values first)."""
    actual = np.asarray(actual, dtype="float64")
    inside = (np.asarray(lower) <= actual) & (actual <= np.asarray(upper))
    return float(np.mean(inside))


def owa(
    smape_value: float, mase_value: float, naive2_smape: float, naive2_mase: float
) -> float:
    """The M4 competition's overall weighted average: the mean of sMAPE and MASE, each
    relative to Naive2's. Give the means over a whole set of series (a frequency's,
    or all of them), not one series' figures: the M4 tables divide the set's means.
    1 is Naive2's accuracy; below is better."""
    return 0.5 * (smape_value / naive2_smape + mase_value / naive2_mase)


def relative_mae(
    actual: np.ndarray, predicted: np.ndarray, reference: np.ndarray
) -> float:
    """MAE of `predicted` over the MAE of a `reference` forecast on the same cases.

    With the persistence (random-walk) forecast as `reference`, below 1 means the
    forecast beats "tomorrow equals today" on these very days. NaN if the reference
    is exact.
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
    from sklearn import metrics

    return metrics.confusion_matrix(labels, predicted, labels=range(num_classes))


def precision_recall_f1(
    labels: np.ndarray, predicted: np.ndarray, num_classes: int
) -> tuple[float, float, float]:
    """Precision, recall and F1 of the positive class (1) for two classes, and their
    unweighted means over the classes (macro average) for more.

    A ratio with nothing to count (no predicted positive, say) is 0.0
    (scikit-learn's `zero_division=0`).
    """
    from sklearn import metrics

    precision, recall, f1, _ = metrics.precision_recall_fscore_support(
        labels,
        predicted,
        labels=range(num_classes),
        average="binary" if num_classes == 2 else "macro",
        zero_division=0,
    )
    return float(precision), float(recall), float(f1)


def roc_auc(labels: np.ndarray, probabilities: np.ndarray) -> float:
    """Area under the ROC curve of class probabilities (n, num_classes).

    For two classes, the AUC of the probability of class 1. For more, the one-vs-rest
    AUCs of the classes present in `labels` are averaged (macro); a class absent from
    the labels has no defined AUC and is left out. NaN when fewer than two classes are
    present, as no ranking can then be measured.
    """
    from sklearn import metrics

    labels = np.asarray(labels)
    probabilities = np.asarray(probabilities, dtype="float64")
    present = np.unique(labels)
    if len(present) < 2:
        return float("nan")
    if probabilities.shape[1] == 2:
        return float(metrics.roc_auc_score(labels == 1, probabilities[:, 1]))
    return float(
        np.mean(
            [
                metrics.roc_auc_score(labels == label, probabilities[:, label])
                for label in present
            ]
        )
    )


def classification_metrics(
    labels: np.ndarray, probabilities: np.ndarray
) -> dict[str, float]:
    """Accuracy, precision, recall, F1 and ROC AUC of class probabilities (n, K)."""
    from sklearn import metrics

    labels = np.asarray(labels)
    probabilities = np.asarray(probabilities, dtype="float64")
    num_classes = probabilities.shape[1]
    predicted = probabilities.argmax(axis=1)
    precision, recall, f1 = precision_recall_f1(labels, predicted, num_classes)
    return {
        "accuracy": float(metrics.accuracy_score(labels, predicted)),
        "precision": precision,
        "recall": recall,
        "f1": f1,
        "roc_auc": roc_auc(labels, probabilities),
    }


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
