"""Reading panels (long and wide files), their grid and windows, and every bad input
of the forecasting recipe: a one-line DataError or a documented repair."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from rnnkit_recipes.forecasting import data as fdata
from rnnkit_recipes.forecasting import panel as fpanel
from rnnkit_recipes.forecasting import wide as fwide

from rnnkit.errors import DataError
from tests.shared_data import SHARED_DATA, require

M4 = SHARED_DATA / "forecasting"


def fourier_features(ticks: np.ndarray, periods: tuple[float, ...]) -> np.ndarray:
    """The reference of Windows' calendar terms: sin and cos of 2 pi tick / period
    for each period, (..., 2 len(periods)), in float64 on the tick modulo the period."""
    columns = []
    for period in periods:
        phase = 2.0 * np.pi * np.mod(ticks.astype(np.float64), period) / period
        columns += [np.sin(phase), np.cos(phase)]
    if not columns:
        return np.zeros((*ticks.shape, 0), dtype=np.float32)
    return np.stack(columns, axis=-1).astype(np.float32)


def long_file(tmp_path, rows, name="panel.csv"):
    path = tmp_path / name
    pd.DataFrame(rows).to_csv(path, index=False)
    return path


def hourly(series="a", start="2024-01-01", count=6, offset=0.0):
    times = pd.date_range(start, periods=count, freq="h")
    return [
        {"id": series, "time": str(t), "target": offset + i, "temp": 10.0 + i}
        for i, t in enumerate(times)
    ]


def test_long_file_reads_series_times_and_covariates(tmp_path):
    rows = hourly("a") + hourly("b", start="2024-01-01 02:00", count=3, offset=100)
    path = long_file(tmp_path, rows[::-1])  # any row order
    panel = fpanel.read_long(path, covariates=("temp",))
    assert panel.ids == ["b", "a"]  # first appearance in the file
    a = panel.ids.index("a")
    np.testing.assert_array_equal(panel.values[a], np.arange(6.0))
    assert panel.frequency == "h"
    assert panel.covariates[a].shape == (6, 1)
    grid = fdata.to_grid(panel, test_steps=1, validation_steps=1)
    assert grid.values.shape == (2, 6)
    # right-aligned: b's three values are the last three steps, NaN before
    b = panel.ids.index("b")
    assert np.isnan(grid.values[b, :3]).all()
    np.testing.assert_array_equal(grid.values[b, 3:], [100.0, 101.0, 102.0])
    # ticks count hours since the epoch, step by step
    hours = (pd.Timestamp("2024-01-01") - pd.Timestamp(0)) // pd.Timedelta("1h")
    assert grid.ticks[a, 0] == hours and grid.ticks[a, 5] == hours + 5


def test_wide_file_is_read_as_m4(tmp_path):
    path = tmp_path / "wide.csv"
    path.write_text('"V1","V2","V3","V4"\n"H1",1,2,3\n"H2",4,5,\n')
    panel = fpanel.load_panel(str(path))
    assert panel.ids == ["H1", "H2"] and panel.times is None
    np.testing.assert_array_equal(panel.values[1], [4.0, 5.0])


@pytest.mark.parametrize(
    "rows, message",
    [
        ('"H1",1,2,3\n"H1",4,5,\n', "series H1 appears in more than one row"),
        (
            '"H1",1,2,3\n"H2",4,x5,\n',
            "series H2 holds a non-numeric value 'x5' \\(column V3\\)",
        ),
        ('"H1",1,inf,3\n', "series H1 holds an infinite value \\(column V3\\)"),
        ('"H1",1,2,3\n"H2",,,\n', "series H2 holds no number"),
        ('"H1",1,,3\n', "series H1 has a gap"),
    ],
    ids=["duplicated-id", "non-numeric", "infinite", "empty-row", "gap"],
)
def test_bad_wide_files_are_one_line_errors(tmp_path, rows, message):
    path = tmp_path / "wide.csv"
    path.write_text('"V1","V2","V3","V4"\n' + rows)
    with pytest.raises(DataError, match=message) as error:
        fpanel.load_panel(str(path))
    assert "\n" not in str(error.value)


def test_a_missing_time_becomes_a_missing_value(tmp_path):
    rows = hourly("a", count=6)
    del rows[2]
    panel = fpanel.read_long(long_file(tmp_path, rows))
    assert len(panel.values[0]) == 6
    assert np.isnan(panel.values[0][2])
    grid = fdata.to_grid(panel, 1, 1)
    windows = fdata.Windows(grid, 3, 1, (), None, "standard")
    inputs, targets, weights = windows.arrays(np.array([[0, 3], [0, 2]]))
    np.testing.assert_array_equal(inputs["past_observed"][0], [1, 1, 0])
    assert inputs["past_target"][0, 2] == 0.0
    assert weights[1, 0] == 0.0 and targets[1, 0] == 0.0  # the missing target


@pytest.mark.parametrize(
    "change, message",
    [
        (
            lambda rows: rows + [rows[1]],
            "duplicated time\\(s\\), the first 2024-01-01 01:00",
        ),
        (
            lambda rows: rows + [{**rows[0], "time": "2024-01-01 05:30"}],
            "off its h grid",
        ),
        (
            lambda rows: [
                {**r, "target": "12,5" if i == 2 else r["target"]}
                for i, r in enumerate(rows)
            ],
            "non-numeric value '12,5' \\(row 4\\)",
        ),
        (
            lambda rows: [
                {**r, "target": np.inf if i == 1 else r["target"]}
                for i, r in enumerate(rows)
            ],
            "infinite value \\(row 3\\)",
        ),
        (
            lambda rows: [
                {**r, "time": "yesterday" if i == 0 else r["time"]}
                for i, r in enumerate(rows)
            ],
            "not a time column",
        ),
    ],
    ids=["duplicated-time", "irregular-spacing", "non-numeric", "infinite", "bad-time"],
)
def test_bad_long_files_are_one_line_errors(tmp_path, change, message):
    path = long_file(tmp_path, change(hourly("a")))
    with pytest.raises(DataError, match=message) as error:
        fpanel.read_long(path)
    assert "\n" not in str(error.value)


def test_unknown_columns_and_empty_files_are_named(tmp_path):
    path = long_file(tmp_path, hourly("a"))
    with pytest.raises(
        DataError,
        match="no target column 'sales' \\(the file has: id, time, target, temp\\); "
        "set data.target_column",
    ):
        fpanel.read_long(path, target_column="sales")
    with pytest.raises(DataError, match="no covariate column 'price'"):
        fpanel.read_long(path, covariates=("price",))
    empty = tmp_path / "empty.csv"
    empty.write_text("")
    with pytest.raises(DataError, match="is empty"):
        fpanel.load_panel(str(empty))
    header_only = tmp_path / "header.csv"
    header_only.write_text("id,time,target\n")
    with pytest.raises(DataError, match="holds no rows"):
        fpanel.load_panel(str(header_only))
    with pytest.raises(DataError, match="no data file at"):
        fpanel.load_panel(str(tmp_path / "missing.csv"))


def test_a_series_of_nothing_but_missing_values_is_refused(tmp_path):
    rows = hourly("a") + [{**r, "target": None} for r in hourly("b")]
    with pytest.raises(DataError, match="series b holds no target value"):
        fpanel.read_long(long_file(tmp_path, rows))


def test_file_without_id_or_time_is_one_series_in_file_order(tmp_path):
    path = tmp_path / "one.csv"
    path.write_text("target\n3\n1\n2\n")
    panel = fpanel.read_long(path)
    assert panel.ids == ["series"] and panel.times is None
    np.testing.assert_array_equal(panel.values[0], [3.0, 1.0, 2.0])


def test_windows_gather_what_numpy_slicing_gives():
    rng = np.random.default_rng(0)
    values = [rng.normal(100, 5, 40), rng.normal(10, 1, 25)]
    values[0][7] = np.nan
    panel = fpanel.Panel(["x", "y"], values, None, None, None, (), "test")
    grid = fdata.to_grid(panel, test_steps=4, validation_steps=4)
    periods = fdata.time_periods(None, 12)
    windows = fdata.Windows(grid, 8, 4, periods, grid.ids, "mean_abs")
    rows = fdata.window_origins(grid, 1, grid.train_end - 4, 8, 4)
    inputs, targets, weights = windows.arrays(rows)
    for index, (series, origin) in enumerate(rows):
        padded = np.concatenate([np.full(8, np.nan), grid.values[series]])
        past = padded[origin : origin + 8]
        np.testing.assert_allclose(
            inputs["past_target"][index], np.nan_to_num(past), rtol=1e-6
        )
        np.testing.assert_array_equal(inputs["past_observed"][index], ~np.isnan(past))
        future = grid.values[series, origin : origin + 4]
        np.testing.assert_allclose(targets[index], np.nan_to_num(future), rtol=1e-6)
        scale = max(np.nanmean(np.abs(past)), 1e-3 * (np.nanmean(np.abs(past)) + 1))
        np.testing.assert_allclose(weights[index], ~np.isnan(future) / scale, rtol=1e-5)
        ticks = grid.ticks[series, 0] + np.arange(origin, origin + 4)
        np.testing.assert_allclose(
            inputs["future_time"][index],
            fourier_features(ticks, periods),
            atol=1e-6,
        )
        assert inputs["series"][index] == grid.ids[series]
    # every window reads at least one value and forecasts at least one
    assert (inputs["past_observed"].sum(1) > 0).all() and (weights > 0).any(1).all()
    # no training window's forecast reaches the validation span
    assert (rows[:, 1] + 4 <= grid.train_end).all()


def test_window_origins_are_the_same_in_blocks_of_series(monkeypatch):
    rng = np.random.default_rng(1)
    values = [rng.normal(0, 1, int(n)) for n in rng.integers(12, 40, 7)]
    for series in values[::2]:
        series[rng.integers(0, len(series), 6)] = np.nan
    panel = fpanel.Panel(list("abcdefg"), values, None, None, None, (), "test")
    grid = fdata.to_grid(panel, test_steps=3, validation_steps=3)
    whole = fdata.window_origins(grid, 1, grid.train_end - 3, 6, 3, min_observed=3)
    # the reference: every (series, origin) whose input holds 3 values and whose
    # forecast span holds one
    expected = [
        (s, o)
        for s in range(7)
        for o in range(1, grid.train_end - 2)
        if np.isfinite(grid.values[s, max(0, o - 6) : o]).sum() >= 3
        and np.isfinite(grid.values[s, o : o + 3]).any()
    ]
    np.testing.assert_array_equal(whole, expected)
    monkeypatch.setattr(fdata, "_SERIES_PER_BLOCK", 2)
    np.testing.assert_array_equal(
        fdata.window_origins(grid, 1, grid.train_end - 3, 6, 3, min_observed=3), whole
    )


def test_each_shuffled_epoch_reads_every_window_once_in_a_new_order():
    rng = np.random.default_rng(2)
    panel = fpanel.Panel(
        ["x", "y", "z"], [rng.normal(0, 1, 30) for _ in range(3)], None, None, None,
        (), "test",
    )  # fmt: skip
    grid = fdata.to_grid(panel, test_steps=2, validation_steps=2)
    windows = fdata.Windows(grid, 4, 2, (), None, "standard")
    rows = fdata.window_origins(grid, 1, grid.train_end - 2, 4, 2)

    def epochs(dataset, count):
        orders = []
        for _ in range(count):  # one iteration of the dataset per epoch, as fit does
            targets = np.concatenate([batch[1].numpy() for batch in dataset])
            orders.append(targets[:, 0])
        return orders

    first_targets = windows.arrays(rows)[1][:, 0]
    shuffled = windows.dataset(rows, batch_size=7, seed=3)
    assert shuffled.cardinality() == -(-len(rows) // 7)
    one, two = epochs(shuffled, 2)
    for epoch in (one, two):  # a permutation of every window's target
        np.testing.assert_array_equal(np.sort(epoch), np.sort(first_targets))
    assert not np.array_equal(one, two) and not np.array_equal(one, first_targets)
    np.testing.assert_array_equal(epochs(windows.dataset(rows, 7, seed=3), 1)[0], one)
    in_order = epochs(windows.dataset(rows, batch_size=7), 1)[0]
    np.testing.assert_array_equal(in_order, first_targets)


def test_calendar_periods_follow_the_frequency():
    assert fdata.time_periods("30min", 48) == (48.0, 336.0)
    assert fdata.time_periods("h", 24) == (24.0, 168.0)
    assert fdata.time_periods("D", 7) == (7.0, 365.25)
    assert fdata.time_periods("W-SUN", 52) == (365.25 / 7,)
    assert fdata.time_periods("ME", 12) == (12.0,)
    assert fdata.time_periods("QE", 4) == (4.0,)
    assert fdata.time_periods(None, 24) == (24.0,)
    assert fdata.time_periods(None, 1) == ()
    with pytest.raises(DataError, match="spacing of B skips time"):
        fdata.time_periods("B", 5)


def test_weekly_ticks_count_weeks_and_quarterly_ticks_count_quarters():
    for frequency, first, expected in (
        (
            "W-SUN",
            "2024-01-07",
            (pd.Timestamp("2024-01-07") - pd.Timestamp(0)).days // 7,
        ),
        ("QE-DEC", "2024-03-31", (2024 - 1970) * 4),
    ):
        times = pd.date_range(first, periods=3, freq=frequency)
        panel = fpanel.Panel(["a"], [np.ones(3)], [times], frequency, None, (), "t")
        grid = fdata.to_grid(panel, 1, 1)
        np.testing.assert_array_equal(grid.ticks[0], expected + np.arange(3))


def test_times_with_zones_are_read_in_utc_and_numbers_are_not_times(tmp_path):
    rows = [
        {"time": "2024-03-31 00:00+01:00", "target": 1.0},
        {"time": "2024-03-31 01:00+01:00", "target": 2.0},
        {"time": "2024-03-31 03:00+02:00", "target": 3.0},  # daylight saving
    ]
    panel = fpanel.read_long(long_file(tmp_path, rows))
    assert list(panel.times[0].strftime("%H:%M")) == ["23:00", "00:00", "01:00"]
    np.testing.assert_array_equal(panel.values[0], [1.0, 2.0, 3.0])
    numbered = long_file(
        tmp_path, [{"time": i, "target": 1.0} for i in range(3)], "n.csv"
    )
    with pytest.raises(DataError, match="holds numbers, not times"):
        fpanel.read_long(numbered)


def test_m4_test_file_is_appended_and_checked(tmp_path):
    require(M4 / "m4_hourly_train.csv.gz")
    panel = fpanel.load_panel(str(M4 / "m4_hourly_train.csv.gz"))
    assert len(panel.ids) == 414 and panel.times is None
    joined, steps = fwide.append_test(panel, M4 / "m4_hourly_test.csv.gz")
    assert steps == 48
    assert len(joined.values[0]) == len(panel.values[0]) + 48
    other = tmp_path / "other.csv"
    other.write_text('"V1","V2"\n"X1",1\n')
    with pytest.raises(DataError, match="no test values for 414 series \\(H1, ...\\)"):
        fwide.append_test(panel, other)


def test_seasonal_difference_weights_are_one_over_mases_scale():
    rng = np.random.default_rng(2)
    values = [rng.normal(50, 5, 60)]
    values[0][20] = np.nan
    panel = fpanel.Panel(["x"], values, None, None, None, (), "test")
    grid = fdata.to_grid(panel, test_steps=5, validation_steps=5)
    windows = fdata.Windows(grid, 24, 5, (), None, "standard", "seasonal_difference", 7)
    rows = np.array([[0, 30], [0, 45]])
    _, _, weights = windows.arrays(rows)
    for index, (_, origin) in enumerate(rows):
        past = grid.values[0, origin - 24 : origin]
        differences = np.abs(past[7:] - past[:-7])  # NaN where either is missing
        np.testing.assert_allclose(
            weights[index], 1.0 / np.nanmean(differences), rtol=1e-5
        )


def test_series_weights_are_one_over_the_series_training_deviation():
    """weighting "series": the loss in units of each channel's training deviation,
    the scale of the standardised measures (real ETTh1 channels; a missing value)."""
    path = M4 / "ETTh1.csv.gz"
    require(path)
    frame = pd.read_csv(path, nrows=300).drop(columns="date")
    values = [frame[c].to_numpy(dtype=np.float64, copy=True) for c in ("HUFL", "OT")]
    values[1][10] = np.nan
    panel = fpanel.Panel(["HUFL", "OT"], values, None, None, None, (), "test")
    grid = fdata.to_grid(panel, test_steps=48, validation_steps=48)
    windows = fdata.Windows(grid, 24, 24, (), None, "standard", "series", 24)
    rows = np.array([[0, 100], [1, 100], [1, 230]])
    _, _, weights = windows.arrays(rows)
    for index, (series, _) in enumerate(rows):
        deviation = np.nanstd(values[series][: grid.train_end])
        np.testing.assert_allclose(weights[index], 1.0 / deviation, rtol=1e-5)


def test_a_file_of_one_column_per_series_is_read_as_a_panel(tmp_path):
    """ETTh1's layout: a time column, then one column per channel, each a series."""
    path = M4 / "ETTh1.csv.gz"
    require(path)
    frame = pd.read_csv(path, parse_dates=["date"])
    panel = fpanel.load_panel(str(path), layout="columns", time_column="date")
    assert panel.ids == list(frame.columns[1:]) and len(panel.ids) == 7
    assert panel.frequency == "h"
    for series_id, values, times in zip(
        panel.ids, panel.values, panel.times, strict=True
    ):
        np.testing.assert_array_equal(values, frame[series_id].to_numpy())
        assert (times == pd.DatetimeIndex(frame["date"])).all()
    first = panel.first_steps(14_400)
    assert [len(v) for v in first.values] == [14_400] * 7
    assert first.times[0][-1] == frame["date"][14_399]
    alone = fpanel.load_panel(
        str(path), layout="columns", time_column="date", columns=("ot",)
    )
    assert alone.ids == ["OT"]
    # Without a time column the rows are consecutive steps, in file order.
    steps = tmp_path / "steps.csv"
    frame.drop(columns="date").head(50).to_csv(steps, index=False)
    plain = fpanel.load_panel(str(steps), layout="columns")
    assert plain.times is None and plain.ids == panel.ids
    np.testing.assert_array_equal(plain.values[6], frame["OT"].to_numpy()[:50])
    with pytest.raises(DataError, match=r"no series column 'oil' .* data.columns"):
        fpanel.load_panel(str(steps), layout="columns", columns=("oil",))
    with pytest.raises(DataError, match="every column is a series"):
        fpanel.load_panel(str(steps), layout="columns", covariates=("HUFL",))
