"""The M4 benchmarks and measures reproduce the competition's Hourly table to the
digit (the shared M4 Hourly files: 414 series, horizon 48, seasonality 24)."""

from __future__ import annotations

import numpy as np
import pytest
from rnnkit_recipes.forecasting import baselines
from rnnkit_recipes.forecasting.wide import read_m4

from rnnkit import metrics
from rnnkit.errors import DataError
from tests.shared_data import SHARED_DATA, require

M4 = SHARED_DATA / "forecasting"
HORIZON, SEASONALITY = 48, 24


@pytest.fixture(scope="module")
def hourly():
    require(M4 / "m4_hourly_train.csv.gz")
    return read_m4(M4 / "m4_hourly_train.csv.gz"), read_m4(M4 / "m4_hourly_test.csv.gz")


def leaderboard_row(method: str) -> tuple[float, float]:
    import pandas as pd

    table = pd.read_csv(M4 / "m4_hourly_leaderboard.csv").set_index("method_id")
    return table.loc[method, "smape_hourly"], table.loc[method, "mase_hourly"]


@pytest.mark.parametrize(
    "method, name",
    [("Naive", "naive"), ("sNaive", "seasonal_naive"), ("Naive2", "naive2")],
)
def test_benchmarks_reproduce_the_hourly_leaderboard(hourly, method, name):
    train, test = hourly
    assert len(train) == len(test) == 414
    forecast = {
        key: baselines.BASELINES[name](history, HORIZON, SEASONALITY)
        for key, history in train.items()
    }
    scores = baselines.m4_scores(forecast, test, train, SEASONALITY)
    smape, mase = leaderboard_row(method)
    assert round(scores["smape"], 3) == smape
    assert round(scores["mase"], 3) == mase


def test_owa_of_seasonal_naive_is_the_leaderboards(hourly):
    train, test = hourly
    scores = {
        name: baselines.m4_scores(
            {
                k: baselines.BASELINES[name](h, HORIZON, SEASONALITY)
                for k, h in train.items()
            },
            test,
            train,
            SEASONALITY,
        )
        for name in ("seasonal_naive", "naive2")
    }
    owa = metrics.owa(
        scores["seasonal_naive"]["smape"],
        scores["seasonal_naive"]["mase"],
        scores["naive2"]["smape"],
        scores["naive2"]["mase"],
    )
    assert round(owa, 4) == 0.6275


def test_seasonality_test_and_decomposition_on_made_up_series():
    hours = np.arange(24 * 12)  # 288 values: R's acf reaches lag 24 from 252 on
    daily = 100 + 30 * np.sin(2 * np.pi * hours / 24)  # seasonal, period 24
    assert baselines.seasonality_test(daily, 24)
    assert not baselines.seasonality_test(daily[: 24 * 3 - 1], 24)  # under 3 seasons
    trend = 100 + hours.astype(float)
    assert not baselines.seasonality_test(trend + np.sin(hours), 1)
    noise = 100 + np.random.RandomState(0).randn(24 * 12)
    assert not baselines.seasonality_test(noise, 24)
    # R's acf stops at lag floor(10 log10 n): 23 for n = 200, so lag 24 is not tested.
    assert not baselines.seasonality_test(daily[:200], 24)
    assert baselines.seasonality_test(daily[:252], 24)  # floor(10 log10 252) = 24
    with pytest.raises(ValueError, match="positive values"):
        baselines.naive2(daily - 100, 48, 24)
    with pytest.raises(ValueError, match="no whole season"):
        baselines.seasonal_naive(daily[:10], 48, 24)
    indices = baselines.seasonal_indices(daily, 24)
    assert indices[:24].mean() == pytest.approx(1.0, abs=1e-3)
    # A pure multiplicative season: Naive2 continues it exactly.
    forecast = baselines.naive2(daily, 48, 24)
    np.testing.assert_allclose(forecast, daily[-24:].tolist() * 2, rtol=2e-3)
    np.testing.assert_array_equal(
        baselines.seasonal_naive(daily, 30, 24), np.resize(daily[-24:], 30)
    )


def test_m4_files_with_holes_or_no_numbers_are_one_line_errors(tmp_path):
    good = tmp_path / "good.csv"
    good.write_text('"V1","V2","V3","V4"\n"H1",1,2,3\n"H2",4,5,\n')
    series = read_m4(good)
    assert list(series) == ["H1", "H2"]
    np.testing.assert_array_equal(series["H2"], [4.0, 5.0])
    holed = tmp_path / "holed.csv"
    holed.write_text('"V1","V2","V3","V4"\n"H1",1,,3\n')
    with pytest.raises(DataError, match="series H1 has a gap"):
        read_m4(holed)
    empty = tmp_path / "empty.csv"
    empty.write_text('"V1","V2"\n')
    with pytest.raises(DataError, match="holds no series"):
        read_m4(empty)
    with pytest.raises(DataError, match="no M4 file at"):
        read_m4(tmp_path / "missing.csv")


def test_smoothing_benchmarks_and_theta_on_made_up_series():
    hours = np.arange(24 * 12, dtype=float)
    line = 50 + 0.5 * hours  # no season: the 90 % test finds none
    np.testing.assert_allclose(
        baselines.holt(line, 24, 24), 50 + 0.5 * np.arange(288, 312), rtol=1e-3
    )
    flat = np.full(100, 7.0)
    for name in ("ses", "holt", "damped", "comb", "theta"):
        np.testing.assert_allclose(baselines.BASELINES[name](flat, 12, 24), 7.0)
    noisy = 100 + np.random.RandomState(1).randn(300).cumsum()
    mean = sum(baselines.BASELINES[n](noisy, 12, 24) for n in ("ses", "holt", "damped"))
    np.testing.assert_allclose(baselines.comb(noisy, 12, 24), mean / 3)
    assert np.ptp(baselines.ses(noisy, 12, 1)) == pytest.approx(0.0, abs=1e-9)  # flat
    # Theta: half the trend line, half the (flat) SES path of the theta line; a
    # series falling towards zero gets its negative forecasts set to 0.
    falling = 400.0 - 2.0 * np.arange(190.0)
    theta = baselines.theta(falling, 48, 24)
    assert np.all(theta >= 0) and theta[-1] == 0.0
    # A multiplicative daily season on a level: every benchmark continues the season.
    daily = 100 * (1 + 0.3 * np.sin(2 * np.pi * hours / 24))
    for name in ("ses", "holt", "damped", "comb", "theta"):
        np.testing.assert_allclose(
            baselines.BASELINES[name](daily, 48, 24), np.resize(daily[-24:], 48),
            rtol=0.01, err_msg=name,
        )  # fmt: skip


# SES and Theta, computed with statsmodels' least-squares fits where the organisers
# used R's forecast package: SES is the leaderboard's row to the digit, Theta within
# 0.002 (18.136 and 2.454 for 18.138 and 2.455). The trend models are not held here:
# statsmodels' fits of Holt and Damped land elsewhere than R's `holt` (the recipe
# README gives the figures).
SMOOTHING_ROWS = {"SES": ("ses", 5e-4, 5e-4), "Theta": ("theta", 3e-3, 2e-3)}


@pytest.mark.slow
@pytest.mark.parametrize("method", SMOOTHING_ROWS)
def test_smoothing_benchmarks_are_the_hourly_leaderboards(hourly, method):
    train, test = hourly
    name, smape_tolerance, mase_tolerance = SMOOTHING_ROWS[method]
    forecast = {
        key: baselines.BASELINES[name](history, HORIZON, SEASONALITY)
        for key, history in train.items()
    }
    scores = baselines.m4_scores(forecast, test, train, SEASONALITY)
    smape, mase = leaderboard_row(method)
    assert scores["smape"] == pytest.approx(smape, abs=smape_tolerance)
    assert scores["mase"] == pytest.approx(mase, abs=mase_tolerance)
