"""Test figures of a forecaster and of the M4 benchmarks on the same windows.

Every (series, origin) window of the test span is forecast in one prediction pass (a
rolling-origin backtest without refitting costs one pass for all its origins). Per
window, as the M4 competition scores a series: sMAPE and MASE (the MAE over the mean
absolute seasonal difference of everything before the origin), then the mean over the
windows; OWA is the mean of the two relative to Naive2's on the same windows. The
quantile forecasts are scored by the weighted quantile loss (2 x pinball summed over
the targets / the targets' absolute sum, averaged over the quantiles: a discrete
approximation of the CRPS, GluonTS's `mean_wQuantileLoss`), and the interval between
the two quantiles that bound `evaluation.interval` by MSIS and coverage.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from rnnkit import metrics


@dataclasses.dataclass
class Forecasts:
    """Test windows and what each system forecast for them.

    `actual` (windows, H) holds NaN where a value is missing; `histories[i]` is the
    series before window i's origin; `quantiles` (windows, H, Q) are the model's.
    """

    rows: np.ndarray
    actual: np.ndarray
    histories: list[np.ndarray]
    quantiles: np.ndarray
    levels: tuple[float, ...]
    baselines: dict[str, np.ndarray]

    @property
    def median(self) -> np.ndarray:
        return median_of(self.quantiles, self.levels)


def median_of(quantiles: np.ndarray, levels: tuple[float, ...]) -> np.ndarray:
    """The point forecast: the 0.5 quantile, or the quantiles' mean without one."""
    if 0.5 in levels:
        return quantiles[..., levels.index(0.5)]
    return quantiles.mean(axis=-1)


def history_of(values: np.ndarray, origin: int) -> np.ndarray:
    """A series' observed values before `origin` (its leading padding dropped; a
    missing value inside carries the last one forward, as the benchmarks need)."""
    history = values[:origin]
    seen = np.flatnonzero(~np.isnan(history))
    history = history[seen[0] :] if seen.size else history[:0]
    if np.isnan(history).any():
        index = np.where(~np.isnan(history), np.arange(len(history)), 0)
        history = history[np.maximum.accumulate(index)]
    return history


def benchmark_forecasts(
    histories: list[np.ndarray],
    horizon: int,
    seasonality: int,
    names: tuple[str, ...] = ("naive", "seasonal_naive", "naive2"),
) -> dict[str, np.ndarray]:
    """The M4 benchmarks `names` (Naive2, OWA's yardstick, always) for each history:
    {name: (windows, H)}. A history shorter than one season gets the naive forecast
    from seasonal naive and Naive2, and one with a value at or below 0 (no
    multiplicative decomposition) from Naive2; the smoothing benchmarks then smooth
    the series unadjusted."""
    from rnnkit_recipes.forecasting.baselines import BASELINES, naive

    names = tuple(dict.fromkeys((*names, "naive2")))
    rows: dict[str, list[np.ndarray]] = {name: [] for name in names}
    for history in histories:
        short = len(history) < seasonality
        for name in names:
            if name in ("seasonal_naive", "naive2") and short:
                rows[name].append(naive(history, horizon))
            elif name == "naive2" and np.any(history <= 0):
                rows[name].append(naive(history, horizon))
            else:
                rows[name].append(BASELINES[name](history, horizon, seasonality))
    return {name: np.stack(values) for name, values in rows.items()}


def _per_window(actual, forecast, histories, seasonality):
    """(sMAPE, MASE) of each window over its observed steps."""
    smapes, mases = [], []
    for index, history in enumerate(histories):
        seen = ~np.isnan(actual[index])
        y, f = actual[index][seen], forecast[index][seen]
        smapes.append(metrics.smape(y, f))
        scale = metrics.seasonal_scale(history, seasonality, short="naive")
        mases.append(metrics.mae(y, f) / scale)
    return np.array(smapes), np.array(mases)


def point_figures(actual, forecast, histories, seasonality) -> dict[str, float]:
    seen = ~np.isnan(actual)
    smapes, mases = _per_window(actual, forecast, histories, seasonality)
    return {
        "smape": float(np.mean(smapes)),
        "mase": float(np.nanmean(mases)),
        "mae": metrics.mae(actual[seen], forecast[seen]),
        "rmse": metrics.rmse(actual[seen], forecast[seen]),
    }


def interval_ends(levels: tuple[float, ...], interval: float) -> tuple[int, int] | None:
    """Indices of the quantiles (1 - interval) / 2 and (1 + interval) / 2, or None."""
    lower, upper = (1.0 - interval) / 2.0, (1.0 + interval) / 2.0
    found = [
        next((i for i, q in enumerate(levels) if abs(q - end) < 1e-9), None)
        for end in (lower, upper)
    ]
    return None if None in found else (found[0], found[1])


def weighted_quantile_loss(actual, quantiles, levels) -> float:
    """Mean over the levels of 2 sum pinball / sum |y| (observed targets only)."""
    seen = ~np.isnan(actual)
    y = actual[seen]
    denominator = np.sum(np.abs(y))
    losses = []
    for index, level in enumerate(levels):
        error = y - quantiles[..., index][seen]
        pinball = np.maximum(level * error, (level - 1.0) * error)
        losses.append(2.0 * np.sum(pinball) / denominator)
    return float(np.mean(losses))


def scores(forecasts: Forecasts, seasonality: int, interval: float) -> dict:
    """The {system: {metric: value}} table: the model first, then the benchmarks."""
    actual, histories = forecasts.actual, forecasts.histories
    table = {"model": point_figures(actual, forecasts.median, histories, seasonality)}
    for name, forecast in forecasts.baselines.items():
        table[name] = point_figures(actual, forecast, histories, seasonality)
    naive2 = table.get("naive2")
    if naive2 is not None:
        for row in table.values():
            row["owa"] = metrics.owa(
                row["smape"], row["mase"], naive2["smape"], naive2["mase"]
            )
    model = table["model"]
    model["mean_wql"] = weighted_quantile_loss(
        actual, forecasts.quantiles, forecasts.levels
    )
    ends = interval_ends(forecasts.levels, interval)
    if ends is not None:
        lower = forecasts.quantiles[..., ends[0]]
        upper = forecasts.quantiles[..., ends[1]]
        seen = ~np.isnan(actual)
        model[f"coverage_{round(100 * interval)}"] = metrics.coverage(
            actual[seen], lower[seen], upper[seen]
        )
        values = []
        for index, history in enumerate(histories):
            mask = seen[index]
            values.append(
                metrics.msis(
                    actual[index][mask],
                    lower[index][mask],
                    upper[index][mask],
                    history,
                    seasonality,
                    alpha=1.0 - interval,
                    short="naive",
                )  # fmt: skip
            )
        model["msis"] = float(np.nanmean(values))
    return table


def standardized_errors(forecasts: Forecasts, train: np.ndarray) -> dict:
    """{system: {"std_mse", "std_mae"}}: the errors of the point forecasts after each
    series is standardised by the mean and (population) standard deviation of its
    training span `train` (series, steps; NaN where missing), averaged over every
    observed step of every window, as the long-horizon literature scores ETTh1
    (scikit-learn's StandardScaler fitted on the training split)."""
    from rnnkit_recipes.forecasting.data import training_statistics

    mean, deviation = training_statistics(train)
    series = forecasts.rows[:, 0]

    def standardized(values: np.ndarray) -> np.ndarray:
        return (values - mean[series, None]) / deviation[series, None]

    actual = standardized(forecasts.actual)
    seen = ~np.isnan(actual)
    systems = {"model": forecasts.median, **forecasts.baselines}
    table = {}
    for name, forecast in systems.items():
        error = (standardized(forecast) - actual)[seen]
        table[name] = {
            "std_mse": float(np.mean(np.square(error))),
            "std_mae": float(np.mean(np.abs(error))),
        }
    return table


def error_by_step(forecasts: Forecasts) -> dict[str, np.ndarray]:
    """sMAPE of each horizon step over the test windows observed there, per system
    (NaN for a step no window observed)."""
    actual = forecasts.actual
    seen = ~np.isnan(actual)
    systems = {"model": forecasts.median, **forecasts.baselines}
    return {
        name: np.array(
            [
                metrics.smape(actual[seen[:, h], h], forecast[seen[:, h], h])
                if seen[:, h].any()
                else np.nan
                for h in range(actual.shape[1])
            ]
        )
        for name, forecast in systems.items()
    }
