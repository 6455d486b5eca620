"""The M4 competition's statistical benchmarks, as its organisers computed them.

Makridakis, Spiliotis & Assimakopoulos (2018, 2020) and the organisers' R code
("Benchmarks and Evaluation.R" in the M4-methods repository):

- Naive: the last value, repeated over the horizon.
- Seasonal naive: the last season, repeated.
- Naive2: the naive forecast of the seasonally adjusted series, re-seasonalised. A
  series is adjusted only when the 90 % autocorrelation test at its seasonal lag says
  it is seasonal (`seasonality_test`); the adjustment is classical multiplicative
  decomposition (R's `decompose`, here statsmodels' `seasonal_decompose`).
- SES, Holt and Damped: exponential smoothing (ETS(A,N,N), ETS(A,A,N), ETS(A,Ad,N),
  R's `ses` and `holt`, here statsmodels' `SimpleExpSmoothing` and `Holt` fitted by
  least squares, the likelihood of these additive models) of the adjusted series,
  re-seasonalised; Comb, the mean of the three.
- Theta: the classic Theta method (Assimakopoulos & Nikolopoulos 2000) as the
  organisers' `Theta.classic` computes it: the mean of the linear trend line and SES
  of the theta = 2 line, of the adjusted series, re-seasonalised, negatives set to 0.

Naive2 is the yardstick of the competition's OWA (`rnnkit.metrics.owa`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np

# The one-sided 95 % normal quantile of the organisers' test (a 90 % two-sided band).
_CRITICAL_VALUE = 1.645


def naive(history: np.ndarray, horizon: int) -> np.ndarray:
    """The last observed value for each of the next `horizon` steps."""
    return np.repeat(np.asarray(history, dtype=np.float64)[-1], horizon)


def _check_season(history: np.ndarray, seasonality: int) -> np.ndarray:
    values = np.asarray(history, dtype=np.float64)
    if seasonality < 1:
        raise ValueError(f"seasonality must be at least 1, received {seasonality}")
    if len(values) < seasonality:
        raise ValueError(
            f"a series of {len(values)} values holds no whole season of {seasonality}"
        )
    return values


def seasonal_naive(history: np.ndarray, horizon: int, seasonality: int) -> np.ndarray:
    """The last `seasonality` values, repeated over the next `horizon` steps."""
    last_season = _check_season(history, seasonality)[-seasonality:]
    return np.resize(last_season, horizon)


def seasonality_test(history: np.ndarray, seasonality: int) -> bool:
    """The organisers' test: the autocorrelation at the seasonal lag lies outside the
    90 % band of Bartlett's formula, 1.645 / sqrt(n) * sqrt(1 + 2 sum_{k<m} r_k^2).
    A series shorter than three seasons is never seasonal, nor one whose seasonal lag
    lies beyond R's default `acf` lags, floor(10 log10 n), as in the organisers' code
    (`acf` returns no value there and their test reads it as not seasonal)."""
    from statsmodels.tsa.stattools import acf

    values = np.asarray(history, dtype=np.float64)
    if seasonality <= 1 or len(values) < 3 * seasonality:
        return False
    if seasonality > int(np.floor(10 * np.log10(len(values)))):
        return False
    r = acf(values, nlags=seasonality, fft=False)[1:]  # r_1 ... r_m
    limit = (
        _CRITICAL_VALUE
        / np.sqrt(len(values))
        * np.sqrt(1.0 + 2.0 * np.sum(r[: seasonality - 1] ** 2))
    )
    return bool(np.abs(r[seasonality - 1]) > limit)


def seasonal_indices(history: np.ndarray, seasonality: int) -> np.ndarray:
    """One multiplicative seasonal index per observation (all ones for a series the
    test finds not seasonal), from classical decomposition: a centred moving average
    of one season as the trend, the mean ratio to it per position in the season,
    normalised to average 1."""
    values = _check_season(history, seasonality)
    if not seasonality_test(values, seasonality):
        return np.ones_like(values)
    if np.any(values <= 0):
        raise ValueError(
            "multiplicative decomposition needs positive values; shift the series "
            "above zero (or forecast it with seasonal_naive)"
        )
    from statsmodels.tsa.seasonal import seasonal_decompose

    decomposition = seasonal_decompose(
        values, model="multiplicative", period=seasonality
    )
    return np.asarray(decomposition.seasonal, dtype=np.float64)


def naive2(history: np.ndarray, horizon: int, seasonality: int) -> np.ndarray:
    """The naive forecast of the seasonally adjusted series, times the last season's
    indices repeated over the horizon."""
    values = np.asarray(history, dtype=np.float64)
    indices = seasonal_indices(values, seasonality)
    adjusted = values / indices
    return naive(adjusted, horizon) * np.resize(indices[-seasonality:], horizon)


def _adjusted(history: np.ndarray, seasonality: int) -> tuple[np.ndarray, np.ndarray]:
    """The seasonally adjusted series (Naive2's adjustment) and the last season's
    indices; no adjustment for a series shorter than a season or not positive (the
    organisers' data is positive)."""
    values = np.asarray(history, dtype=np.float64)
    if len(values) < seasonality or np.any(values <= 0):
        return values, np.ones(max(seasonality, 1))
    indices = seasonal_indices(values, seasonality)
    return values / indices, indices[-seasonality:]


def _smoothed(model):
    """Fits a statsmodels exponential-smoothing model quietly (its optimiser warns
    on flat series) and returns the fitted results."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return model.fit()


def _ses_forecast(values: np.ndarray, horizon: int) -> np.ndarray:
    from statsmodels.tsa.holtwinters import SimpleExpSmoothing

    if len(values) < 2 or np.ptp(values) == 0:
        return naive(values, horizon)
    model = SimpleExpSmoothing(values, initialization_method="estimated")
    return np.asarray(_smoothed(model).forecast(horizon), dtype=np.float64)


def _holt_forecast(values: np.ndarray, horizon: int, damped: bool) -> np.ndarray:
    from statsmodels.tsa.holtwinters import Holt

    if len(values) < 4 or np.ptp(values) == 0:
        return naive(values, horizon)
    model = Holt(values, damped_trend=damped, initialization_method="estimated")
    return np.asarray(_smoothed(model).forecast(horizon), dtype=np.float64)


def _reseasonalised(forecast: np.ndarray, indices: np.ndarray, horizon: int):
    return forecast * np.resize(indices, horizon)


def ses(history: np.ndarray, horizon: int, seasonality: int) -> np.ndarray:
    """The M4's SES: simple exponential smoothing of the adjusted series."""
    values, indices = _adjusted(history, seasonality)
    return _reseasonalised(_ses_forecast(values, horizon), indices, horizon)


def holt(history: np.ndarray, horizon: int, seasonality: int) -> np.ndarray:
    """The M4's Holt: linear-trend exponential smoothing of the adjusted series."""
    values, indices = _adjusted(history, seasonality)
    return _reseasonalised(_holt_forecast(values, horizon, False), indices, horizon)


def damped(history: np.ndarray, horizon: int, seasonality: int) -> np.ndarray:
    """The M4's Damped: damped-trend exponential smoothing of the adjusted series."""
    values, indices = _adjusted(history, seasonality)
    return _reseasonalised(_holt_forecast(values, horizon, True), indices, horizon)


def comb(history: np.ndarray, horizon: int, seasonality: int) -> np.ndarray:
    """The M4's Comb: the mean of SES, Holt and Damped."""
    values, indices = _adjusted(history, seasonality)
    mean = (
        _ses_forecast(values, horizon)
        + _holt_forecast(values, horizon, False)
        + _holt_forecast(values, horizon, True)
    ) / 3.0
    return _reseasonalised(mean, indices, horizon)


def theta(history: np.ndarray, horizon: int, seasonality: int) -> np.ndarray:
    """The M4's Theta (`Theta.classic`): half the least-squares trend line, half SES
    of the theta = 2 line (twice the series minus the trend line), extended over the
    horizon, of the adjusted series; re-seasonalised, negatives set to 0."""
    values, indices = _adjusted(history, seasonality)
    n = len(values)
    if n < 2:
        return _reseasonalised(naive(values, horizon), indices, horizon)
    times = np.arange(1.0, n + 1.0)
    slope, intercept = np.polyfit(times, values, 1)
    line_in = intercept + slope * times
    line_out = intercept + slope * np.arange(n + 1.0, n + horizon + 1.0)
    theta_line = 2.0 * values - line_in
    forecast = 0.5 * _ses_forecast(theta_line, horizon) + 0.5 * line_out
    return np.maximum(_reseasonalised(forecast, indices, horizon), 0.0)


BASELINES: dict[str, Callable[[np.ndarray, int, int], np.ndarray]] = {
    "naive": lambda history, horizon, seasonality: naive(history, horizon),
    "seasonal_naive": seasonal_naive,
    "naive2": naive2,
    "ses": ses,
    "holt": holt,
    "damped": damped,
    "comb": comb,
    "theta": theta,
}


def m4_scores(
    forecasts: Mapping[str, np.ndarray],
    actuals: Mapping[str, np.ndarray],
    histories: Mapping[str, np.ndarray],
    seasonality: int,
) -> dict[str, float]:
    """sMAPE and MASE as the M4 tables give them: each series' mean over its horizon,
    then the mean over the series (MASE scaled by the series' in-sample seasonal
    naive error)."""
    from rnnkit import metrics

    smapes, mases = [], []
    for series_id, actual in actuals.items():
        forecast = forecasts[series_id]
        if np.shape(forecast) != np.shape(actual):
            raise ValueError(
                f"series {series_id}: a forecast of shape {np.shape(forecast)} for "
                f"actual values of shape {np.shape(actual)}"
            )
        smapes.append(metrics.smape(actual, forecast))
        mases.append(metrics.mase(actual, forecast, histories[series_id], seasonality))
    return {"smape": float(np.mean(smapes)), "mase": float(np.mean(mases))}
