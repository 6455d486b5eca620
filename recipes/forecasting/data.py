"""Panels of series: reading them, checking them, and cutting them into windows.

A panel is many related series (load per feeder, sales per store, the M4 competition's
414 hourly series), forecast by one global model. Two file layouts are read, from CSV
(optionally compressed) or Parquet:

- long: one row per series and time, `id, time, target, covariates...` (the names are
  configurable; without an id column the file is one series; without a time column the
  rows are taken as consecutive steps in file order);
- wide: one row per series, its id then its values left-aligned, the rest of the row
  empty: the M4 competition's files (`Hourly-train.csv`, `"V1","V2",...`).

Every series is right-aligned on a common grid of steps: column `t` of the grid is the
same number of steps before each series' end. The last `test_steps` of every series are
its test span, the `validation_steps` before them its validation span and everything
before them its training span (M4: the test values come from the competition's
separate test file; validation is the last 48 hours of each training series). A window
is (series, origin): the `input_length` steps before the origin are read, the
`horizon` steps from it are forecast. Missing values (NaN, a gap in the time column,
the steps before a short series' start) are inputs the model is told are missing
(`past_observed` = 0) and targets that count for nothing.
"""

from __future__ import annotations

import dataclasses
import logging
import zipfile
from pathlib import Path

import numpy as np

from rnnkit.errors import DataError

log = logging.getLogger("rnnkit")

# The default data: half-hourly electricity demand of England and Wales, Monday
# 5 June 2000 to Sunday 27 August 2000 (Taylor 2003), shipped in pmdarima.
DEFAULT_SOURCE = "Taylor's half-hourly electricity demand, England and Wales, 2000"
DEFAULT_START = "2000-06-05 00:00"
DEFAULT_FREQUENCY = "30min"


@dataclasses.dataclass
class Panel:
    """Series as read: ids, values (float64, NaN where missing) and times.

    `times[i]` is a `pandas.DatetimeIndex` on a regular `frequency`, or None when the
    source has no time column (then `frequency` is None too). `covariates[i]` is
    (steps, len(covariate_names)) or None.
    """

    ids: list[str]
    values: list[np.ndarray]
    times: list | None
    frequency: str | None
    covariates: list[np.ndarray] | None
    covariate_names: tuple[str, ...]
    source: str


# -- Reading -------------------------------------------------------------------------


def _read_table(path: Path):
    import pandas as pd

    if not path.is_file():
        raise DataError(f"no data file at {path}; give a CSV or Parquet file")
    try:
        if path.suffix.lower() in (".parquet", ".pq"):
            frame = pd.read_parquet(path)
        else:
            frame = pd.read_csv(path)
    except pd.errors.EmptyDataError:
        raise DataError(
            f"{path} is empty; give a file with a header and rows"
        ) from None
    except ImportError as error:  # Parquet without pyarrow or fastparquet
        raise DataError(
            f"cannot read {path}: {error}; install pyarrow or give a CSV file"
        ) from None
    # ParserError and UnicodeDecodeError are ValueErrors; a damaged .gz is an OSError.
    except (ValueError, EOFError, OSError, zipfile.BadZipFile) as error:
        message = str(error).strip().splitlines()[0] if str(error).strip() else ""
        raise DataError(f"cannot read {path} as a table: {message}") from None
    if frame.empty:
        raise DataError(f"{path} holds no rows")
    return frame


def read_m4(path: str | Path) -> dict[str, np.ndarray]:
    """The series of an M4 file (`Hourly-train.csv`, or gzipped) as {id: values},
    in the file's order, each a float64 array without the row's empty tail."""
    import pandas as pd

    path = Path(path)
    if not path.is_file():
        raise DataError(f"no M4 file at {path}; give the path of an M4 CSV file")
    try:
        frame = pd.read_csv(path, index_col=0)
    except pd.errors.EmptyDataError:
        raise DataError(f"{path} is empty; give an M4 CSV file") from None
    except (ValueError, pd.errors.ParserError, EOFError, OSError) as error:
        raise DataError(f"{path} is not an M4 CSV file: {error}") from None
    if frame.empty:
        raise DataError(f"{path} holds no series")
    return _wide_rows(frame, path)


def _wide_rows(frame, path: Path) -> dict[str, np.ndarray]:
    import pandas as pd

    series = {}
    numeric = frame.apply(pd.to_numeric, errors="coerce")
    for series_id, row in numeric.iterrows():
        values = row.to_numpy(dtype=np.float64)
        original = frame.loc[series_id]
        if isinstance(original, pd.DataFrame):
            raise DataError(
                f"{path}: series {series_id} appears in more than one row; give each "
                "series one row"
            )
        text = original[np.isnan(values) & original.notna().to_numpy()]
        if len(text):
            raise DataError(
                f"{path}: series {series_id} holds a non-numeric value "
                f"{str(text.iloc[0])!r} (column {text.index[0]}); wide rows hold "
                "numbers"
            )
        if np.isnan(values).all():
            raise DataError(f"{path}: series {series_id} holds no number")
        last = int(np.flatnonzero(~np.isnan(values))[-1])
        values = values[: last + 1]
        if np.isnan(values).any():
            raise DataError(
                f"{path}: series {series_id} has a gap (an empty value before its "
                "last one); wide rows hold their values left-aligned (write gaps as "
                "a long file with a time column)"
            )
        series[str(series_id)] = values
    return series


def read_wide(path: str | Path) -> Panel:
    """A wide file (M4's layout) as a panel without times."""
    path = Path(path)
    frame = _read_table(path)
    frame = frame.set_index(frame.columns[0])
    series = _wide_rows(frame, path)
    return Panel(
        ids=list(series),
        values=list(series.values()),
        times=None,
        frequency=None,
        covariates=None,
        covariate_names=(),
        source=path.name,
    )


def _column(frame, name: str, role: str, path: Path, key: str) -> str:
    if name in frame.columns:
        return name
    lowered = {str(c).lower(): c for c in frame.columns}
    if name.lower() in lowered:
        return lowered[name.lower()]
    columns = ", ".join(str(c) for c in frame.columns)
    raise DataError(
        f"{path}: no {role} column {name!r} (the file has: {columns}); set {key}=NAME"
    )


def read_long(
    path: str | Path,
    *,
    id_column: str = "id",
    time_column: str = "time",
    target_column: str = "target",
    covariates: tuple[str, ...] = (),
    frequency: str | None = None,
) -> Panel:
    """A long file (one row per series and time) as a panel.

    Without an `id_column` in the file the whole file is one series; without a
    `time_column` its rows are consecutive steps in file order. Times must be unique
    within a series and on a regular grid: the frequency is `frequency` (a pandas
    offset alias, "H", "30min", "D", ...) or, if None, the most common step between
    consecutive times. A time missing from the grid becomes a missing value (NaN),
    which the model is told about; a time off the grid is an error.
    """
    import pandas as pd

    path = Path(path)
    frame = _read_table(path)
    target = _column(frame, target_column, "target", path, "data.target_column")
    names = [
        _column(frame, name, "covariate", path, "data.covariates")
        for name in covariates
    ]
    has_id = id_column in frame.columns or id_column.lower() in {
        str(c).lower() for c in frame.columns
    }
    ids = (
        frame[_column(frame, id_column, "id", path, "data.id_column")].astype(str)
        if has_id
        else pd.Series(["series"] * len(frame), index=frame.index)
    )
    has_time = time_column in frame.columns or time_column.lower() in {
        str(c).lower() for c in frame.columns
    }
    for name in (target, *names):
        numbers = pd.to_numeric(frame[name], errors="coerce")
        bad = numbers.isna() & frame[name].notna()
        if bad.any():
            row = int(np.flatnonzero(bad.to_numpy())[0])
            raise DataError(
                f"{path}: column {name!r} holds a non-numeric value "
                f"{str(frame[name].iloc[row])!r} (row {row + 2}); give numbers (an "
                "empty cell is a missing value)"
            )
        values = numbers.to_numpy(dtype=np.float64)
        if np.isinf(values).any():
            row = int(np.flatnonzero(np.isinf(values))[0])
            raise DataError(
                f"{path}: column {name!r} holds an infinite value (row {row + 2}); "
                "leave the cell empty to mark it missing"
            )
        frame[name] = values
    times = None
    if has_time:
        column = _column(frame, time_column, "time", path, "data.time_column")
        if pd.api.types.is_numeric_dtype(frame[column]):
            raise DataError(
                f"{path}: column {column!r} holds numbers, not times; give dates or "
                "times, or rename the column to read the rows as consecutive steps"
            )
        try:
            # A time with a zone is read in UTC (daylight saving gives one file two
            # offsets); a time without one is kept as written.
            times = pd.to_datetime(frame[column], format="mixed", utc=True)
        except (ValueError, TypeError) as error:
            reason = str(error).strip().splitlines()[0] if str(error).strip() else ""
            raise DataError(
                f"{path}: column {column!r} is not a time column ({reason}); set "
                "data.time_column to the column of times"
            ) from None
        if times.isna().any():
            row = int(np.flatnonzero(times.isna().to_numpy())[0])
            raise DataError(
                f"{path}: column {column!r} has an empty time (row {row + 2})"
            )
        times = times.dt.tz_convert(None)
    frame = frame.assign(_id=ids.to_numpy())
    if times is not None:
        frame = frame.assign(_time=times.to_numpy())
    panel_ids, panel_values, panel_times, panel_covariates = [], [], [], []
    step = None
    if times is not None:
        step = _frequency(frame, path, frequency)
    for series_id, rows in frame.groupby("_id", sort=False):
        if times is not None:
            rows = rows.sort_values("_time", kind="stable")
            stamps = pd.DatetimeIndex(rows["_time"])
            duplicated = stamps.duplicated()
            if duplicated.any():
                raise DataError(
                    f"{path}: series {series_id} has {int(duplicated.sum())} "
                    f"duplicated time(s), the first {stamps[duplicated][0]}; keep one "
                    "row per time "
                    "(sum or average the duplicates)"
                )
            grid = pd.date_range(stamps[0], stamps[-1], freq=step)
            off_grid = ~stamps.isin(grid)
            if off_grid.any():
                raise DataError(
                    f"{path}: series {series_id} has a time off its {step} grid "
                    f"({stamps[off_grid][0]}); set data.frequency to the data's "
                    "spacing "
                    "or resample the series"
                )
            rows = rows.set_index("_time").reindex(grid)
            if len(grid) > len(stamps):
                log.info(
                    "%s: series %s misses %d of %d times on its %s grid; they are "
                    "missing values", path.name, series_id, len(grid) - len(stamps),
                    len(grid), step,
                )  # fmt: skip
            panel_times.append(grid)
        values = rows[target].to_numpy(dtype=np.float64)
        if np.isnan(values).all():
            raise DataError(f"{path}: series {series_id} holds no target value")
        panel_ids.append(str(series_id))
        panel_values.append(values)
        if names:
            panel_covariates.append(rows[names].to_numpy(dtype=np.float64))
    return Panel(
        ids=panel_ids,
        values=panel_values,
        times=panel_times if times is not None else None,
        frequency=None if step is None else step,
        covariates=panel_covariates if names else None,
        covariate_names=tuple(names),
        source=path.name,
    )


def _frequency(frame, path: Path, frequency: str | None) -> str:
    """The grid's step: `frequency`, or the most common step between times."""
    import pandas as pd

    if frequency is not None:
        try:
            offset = pd.tseries.frequencies.to_offset(frequency)
        except ValueError:
            raise DataError(
                f"data.frequency={frequency!r} is not a pandas frequency; give one "
                "such as 'h', '30min', 'D' or 'W-SUN'"
            ) from None
        return offset.freqstr
    steps = (
        frame.sort_values(["_id", "_time"])
        .groupby("_id", sort=False)["_time"]
        .diff()
        .dropna()
    )
    steps = steps[steps > pd.Timedelta(0)]
    if steps.empty:
        raise DataError(
            f"{path}: no series has two distinct times, so the spacing is unknown; "
            "set data.frequency"
        )
    common = steps.mode().iloc[0]
    return pd.tseries.frequencies.to_offset(common).freqstr


def default_panel() -> Panel:
    """Taylor's half-hourly electricity demand (4,032 steps, 12 weeks), from the
    pmdarima package rnnkit already depends on: daily and weekly seasons."""
    import pandas as pd

    try:
        from pmdarima.datasets import load_taylor
    except ImportError:
        raise DataError(
            "the default data (Taylor's electricity demand) comes from the pmdarima "
            "package, which is not installed; install it or give a file with "
            "--set data.path=FILE"
        ) from None
    values = np.asarray(load_taylor(), dtype=np.float64)
    times = pd.date_range(DEFAULT_START, periods=len(values), freq=DEFAULT_FREQUENCY)
    return Panel(
        ids=["england_wales"],
        values=[values],
        times=[times],
        frequency=times.freqstr,
        covariates=None,
        covariate_names=(),
        source=DEFAULT_SOURCE,
    )


def load_panel(
    path: str | None,
    *,
    layout: str = "auto",
    id_column: str = "id",
    time_column: str = "time",
    target_column: str = "target",
    covariates: tuple[str, ...] = (),
    frequency: str | None = None,
) -> Panel:
    """The panel of `path` (the default data when None). `layout` "auto" reads a file
    as wide when its header is M4's ("V1", "V2", ...) and as long otherwise."""
    if path is None:
        if covariates:
            raise DataError(
                "data.covariates names columns of a file, and the default data has "
                "none; give the file with --set data.path=FILE"
            )
        return default_panel()
    file = Path(path)
    if layout == "auto":
        layout = "wide" if _looks_wide(file) else "long"
    if layout == "wide":
        if covariates:
            raise DataError(
                "data.covariates needs a long file (one row per series and time); "
                "a wide file holds only the target"
            )
        return read_wide(file)
    return read_long(
        file,
        id_column=id_column,
        time_column=time_column,
        target_column=target_column,
        covariates=covariates,
        frequency=frequency,
    )


def _looks_wide(path: Path) -> bool:
    import pandas as pd

    if not path.is_file() or path.suffix.lower() in (".parquet", ".pq"):
        return False
    try:
        header = pd.read_csv(path, nrows=0).columns
    except (ValueError, EOFError, OSError, pd.errors.EmptyDataError):
        return False
    return len(header) > 2 and all(
        str(name).upper() == f"V{index + 1}" for index, name in enumerate(header)
    )


def append_test(panel: Panel, path: str | Path) -> tuple[Panel, int]:
    """The panel with each series' test values (a wide file, M4's test file) appended;
    returns it and the number of test steps (the same for every series)."""
    test = read_m4(path)
    missing = [series_id for series_id in panel.ids if series_id not in test]
    if missing:
        raise DataError(
            f"{Path(path).name} has no test values for {len(missing)} series "
            f"({missing[0]}, ...); give the test file of the same series"
        )
    lengths = {len(test[series_id]) for series_id in panel.ids}
    if len(lengths) != 1:
        raise DataError(
            f"{Path(path).name}: the series have test spans of different lengths "
            f"({sorted(lengths)}); give every series the same number of test values"
        )
    values = [
        np.concatenate([v, test[i]])
        for i, v in zip(panel.ids, panel.values, strict=True)
    ]
    return dataclasses.replace(panel, values=values), lengths.pop()


# -- The grid and its windows ----------------------------------------------------------


@dataclasses.dataclass
class Grid:
    """The panel right-aligned on one grid of steps (NaN before a series starts).

    `values` is (series, steps); `covariates` (series, steps, C) or None; `ticks`
    (series, steps) int64: each step's time as a count of `frequency` steps since the
    epoch (for the calendar features), or the steps since the series' start when the
    data has no times. `starts[i]` is the first step of series i on the grid. The
    last `test_steps` columns are the test span, the `validation_steps` before them
    the validation span.
    """

    ids: list[str]
    values: np.ndarray
    covariates: np.ndarray | None
    ticks: np.ndarray
    starts: np.ndarray
    frequency: str | None
    last_times: list | None
    test_steps: int
    validation_steps: int

    @property
    def steps(self) -> int:
        return self.values.shape[1]

    @property
    def train_end(self) -> int:
        """The first step of the validation span."""
        return self.steps - self.test_steps - self.validation_steps


def to_grid(panel: Panel, test_steps: int, validation_steps: int) -> Grid:
    """Right-aligns the panel (see `Grid`)."""
    lengths = np.array([len(v) for v in panel.values])
    steps = int(lengths.max())
    count = len(panel.values)
    values = np.full((count, steps), np.nan)
    ticks = np.zeros((count, steps), dtype=np.int64)
    covariates = None
    if panel.covariates is not None:
        covariates = np.full((count, steps, len(panel.covariate_names)), np.nan)
    starts = steps - lengths
    for index, series in enumerate(panel.values):
        values[index, starts[index] :] = series
        if covariates is not None:
            covariates[index, starts[index] :] = panel.covariates[index]
        first = _first_tick(panel, index)
        ticks[index] = first - starts[index] + np.arange(steps)
    last_times = None if panel.times is None else [t[-1] for t in panel.times]
    return Grid(
        ids=list(panel.ids),
        values=values,
        covariates=covariates,
        ticks=ticks,
        starts=starts,
        frequency=panel.frequency,
        last_times=last_times,
        test_steps=test_steps,
        validation_steps=validation_steps,
    )


def _first_tick(panel: Panel, index: int) -> int:
    """The series' first time as a count of frequency steps since the epoch."""
    import pandas as pd

    if panel.times is None:
        return 0
    first = panel.times[index][0]
    step = pd.tseries.frequencies.to_offset(panel.frequency)
    width = step_width(step)
    if width is None:  # months, quarters, years: calendar steps of varying length
        return _calendar_ticks(first, step)
    return int((first - pd.Timestamp(0)) // width)


def step_width(step):
    """The fixed length of a pandas offset (a week is seven days), or None for the
    calendar's steps of varying length (months, quarters, years). Business days
    and other steps that skip time are refused."""
    import pandas as pd

    if isinstance(step, pd.offsets.Week):
        return pd.Timedelta(days=7 * step.n)
    try:
        return pd.Timedelta(step)
    except ValueError:
        pass
    if _months_per_step(step) is not None:
        return None
    raise DataError(
        f"a spacing of {step.freqstr} skips time (business days or hours); give "
        "the data on a regular calendar grid (data.frequency=D or h), where the "
        "skipped steps are missing values"
    )


def _months_per_step(step) -> int | None:
    """Months per step of a monthly, quarterly or yearly offset, else None."""
    import pandas as pd

    for kinds, months in (
        ((pd.offsets.MonthEnd, pd.offsets.MonthBegin), 1),
        ((pd.offsets.QuarterEnd, pd.offsets.QuarterBegin), 3),
        ((pd.offsets.YearEnd, pd.offsets.YearBegin), 12),
    ):
        if isinstance(step, kinds):
            return months * step.n
    return None


def _calendar_ticks(first, step) -> int:
    """Steps since the epoch of monthly, quarterly and yearly data."""
    months = first.year * 12 + first.month - 1 - 1970 * 12
    return int(months // _months_per_step(step))


def time_periods(frequency: str | None, seasonality: int) -> tuple[float, ...]:
    """The periods, in steps, of the calendar's Fourier terms: a day and a week for
    sub-daily data, a week and a year for daily data, a year for weekly and monthly
    data; `seasonality` alone when the data has no times."""
    import pandas as pd

    if frequency is None:
        return (float(seasonality),) if seasonality > 1 else ()
    step = pd.tseries.frequencies.to_offset(frequency)
    width = step_width(step)
    if width is None:
        per_year = 12 / _months_per_step(step)
        return (float(per_year),) if per_year > 1 else ()
    day, week, year = pd.Timedelta("1D"), pd.Timedelta("7D"), pd.Timedelta("365.25D")
    if width < day:
        return (day / width, week / width)
    if width < week:
        return (week / width, year / width)
    return (year / width,)


def window_origins(
    grid: Grid,
    first: int,
    last: int,
    input_length: int,
    horizon: int,
    stride: int = 1,
    min_observed: int = 1,
) -> np.ndarray:
    """(windows, 2) int64 rows (series, origin): every origin in [first, last] (a
    step of `stride` from `first`) whose forecast span ends by `last + horizon` and
    holds at least one observed value, and whose input holds `min_observed`."""
    origins = np.arange(first, last + 1, stride)
    origins = origins[origins + horizon <= grid.steps]
    if origins.size == 0:
        return np.zeros((0, 2), dtype=np.int64)
    observed = ~np.isnan(grid.values)
    cumulative = np.concatenate(
        [np.zeros((len(observed), 1), dtype=np.int64), np.cumsum(observed, axis=1)],
        axis=1,
    )  # cumulative[:, t]: observed values before step t

    def count(start, end):
        start = np.clip(start, 0, grid.steps)
        return cumulative[:, end] - cumulative[:, start]

    seen_before = count(origins - input_length, origins)  # (series, origins)
    seen_after = count(origins, origins + horizon)
    series, index = np.nonzero((seen_before >= max(1, min_observed)) & (seen_after > 0))
    return np.stack([series, origins[index]], axis=1).astype(np.int64)


def _seasonal_difference(values, observed, seasonality: int):
    """(batch, 1): the mean |y_t - y_{t-m}| over a window's observed pairs (MASE's
    scale, m the seasonality; the last step's lag if the window is shorter), floored
    as the model's scale is."""
    import tensorflow as tf

    lag = seasonality if values.shape[1] > seasonality else 1
    both = observed[:, lag:] * observed[:, :-lag]
    pairs = tf.maximum(tf.reduce_sum(both, axis=1, keepdims=True), 1.0)
    difference = tf.reduce_sum(
        tf.abs(values[:, lag:] - values[:, :-lag]) * both, axis=1, keepdims=True
    )
    count = tf.maximum(tf.reduce_sum(observed, axis=1, keepdims=True), 1.0)
    mean_abs = tf.reduce_sum(tf.abs(values) * observed, axis=1, keepdims=True) / count
    return tf.maximum(difference / pairs, 1e-3 * (mean_abs + 1.0))


class Windows:
    """Batches of (inputs, targets, weights) for (series, origin) rows of a grid,
    gathered by TensorFlow from the padded grid, never a copy per window: memory
    grows with the panel, not with the windows an epoch reads.

    inputs: the model's (`rnnkit.models.forecaster`): past_target and past_observed
    (batch, L), past_covariates (batch, L, C), past_time and future_time (batch, L or
    H, 2 x periods), series (batch,). targets: (batch, H), 0 where missing. weights:
    (batch, H), 0 where the target is missing, else one over the window's scale as the
    model's `WindowScaler` computes it, so that the loss is in each window's own units
    and a series of large values does not outweigh the others.
    """

    def __init__(
        self,
        grid: Grid,
        input_length: int,
        horizon: int,
        periods: tuple[float, ...],
        series_ids: list[str] | None,
        scaling: str,
        weighting: str = "scale",
        seasonality: int = 1,
    ):
        count = grid.values.shape[0]
        self.input_length, self.horizon, self.periods = input_length, horizon, periods
        self.scaling, self.weighting, self.seasonality = scaling, weighting, seasonality
        left = np.full((count, input_length), np.nan)
        right = np.full((count, horizon), np.nan)
        # Padded so that every window's slice exists: L steps before the grid, H after.
        self.values = np.concatenate([left, grid.values, right], axis=1).astype(
            np.float32
        )
        self.covariates = None
        if grid.covariates is not None:
            width = grid.covariates.shape[2]
            self.covariates = np.concatenate(
                [
                    np.full((count, input_length, width), np.nan),
                    grid.covariates,
                    np.full((count, horizon, width), np.nan),
                ],
                axis=1,
            ).astype(np.float32)
        self.first_tick = grid.ticks[:, 0].astype(np.int64)
        self.series_ids = None if series_ids is None else [str(i) for i in series_ids]
        self._tensors = None

    def _constants(self):
        """The grid's tensors, made once, eagerly (the map functions capture them)."""
        import tensorflow as tf

        if self._tensors is None:
            with tf.init_scope():  # eager even when first asked inside a trace
                self._tensors = self._make_constants()
        return self._tensors

    def _make_constants(self) -> dict:
        import tensorflow as tf

        tensors = {
            "values": tf.constant(self.values),
            "first_tick": tf.constant(self.first_tick),
        }
        if self.covariates is not None:
            tensors["covariates"] = tf.constant(self.covariates)
        if self.series_ids is not None:
            tensors["series_ids"] = tf.constant(self.series_ids)
        return tensors

    def batch(self, rows):
        """The (inputs, targets, weights) of int64 rows (batch, 2), as tensors."""
        import tensorflow as tf

        from rnnkit.models.forecaster import window_statistics

        series, origins = rows[:, 0], rows[:, 1]
        past = origins[:, None] + tf.range(self.input_length, dtype=tf.int64)[None]
        future = (
            origins[:, None]
            + self.input_length
            + tf.range(self.horizon, dtype=tf.int64)[None]
        )
        constants = self._constants()
        values = constants["values"]

        def take(table, steps):
            index = tf.stack(
                [tf.broadcast_to(series[:, None], tf.shape(steps)), steps], -1
            )
            return tf.gather_nd(table, index)

        past_values = take(values, past)
        observed = tf.cast(~tf.math.is_nan(past_values), tf.float32)
        past_target = tf.where(tf.math.is_nan(past_values), 0.0, past_values)
        inputs = {"past_target": past_target, "past_observed": observed}
        if self.covariates is not None:
            covariates = take(constants["covariates"], past)
            inputs["past_covariates"] = tf.where(
                tf.math.is_nan(covariates), 0.0, covariates
            )
        if self.periods:
            first = tf.gather(constants["first_tick"], series)[:, None]
            inputs["past_time"] = self._fourier(first + past - self.input_length)
            inputs["future_time"] = self._fourier(first + future - self.input_length)
        if self.series_ids is not None:
            inputs["series"] = tf.gather(constants["series_ids"], series)
        future_values = take(values, future)
        seen = ~tf.math.is_nan(future_values)
        targets = tf.where(seen, future_values, 0.0)
        if self.weighting == "seasonal_difference":
            scale = _seasonal_difference(past_target, observed, self.seasonality)
        else:
            _, scale = window_statistics(past_target, observed, self.scaling)
        weights = tf.cast(seen, tf.float32) / scale
        return inputs, targets, weights

    def _fourier(self, ticks):
        import tensorflow as tf

        columns = []
        for period in self.periods:
            turns = tf.math.floormod(tf.cast(ticks, tf.float64), period) / period
            phase = 2.0 * np.pi * turns
            columns += [tf.sin(phase), tf.cos(phase)]
        return tf.cast(tf.stack(columns, axis=-1), tf.float32)

    def dataset(self, rows: np.ndarray, batch_size: int, seed: int | None = None):
        """A `tf.data.Dataset` of the batches of `rows`, in a new order each epoch
        (drawn from `seed`) when `seed` is given, in the rows' order otherwise."""
        import tensorflow as tf

        if len(rows) == 0:
            raise DataError("no window to read: the series are too short")
        dataset = tf.data.Dataset.from_tensor_slices(np.asarray(rows, np.int64))
        if seed is not None:
            dataset = dataset.shuffle(
                len(rows), seed=seed, reshuffle_each_iteration=True
            )
        return (
            dataset.batch(batch_size)
            .map(self.batch, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
            .prefetch(tf.data.AUTOTUNE)
        )

    def arrays(self, rows: np.ndarray, batch_size: int = 4096):
        """(inputs, targets, weights) of `rows` as numpy arrays (for evaluation)."""
        parts = [
            self.batch(np.asarray(rows[start : start + batch_size], np.int64))
            for start in range(0, len(rows), batch_size)
        ]
        inputs = {
            key: np.concatenate([part[0][key].numpy() for part in parts])
            for key in parts[0][0]
        }
        if "series" in inputs:  # bytes from TensorFlow: back to str for Keras
            inputs["series"] = inputs["series"].astype(str).astype(object)
        targets = np.concatenate([part[1].numpy() for part in parts])
        weights = np.concatenate([part[2].numpy() for part in parts])
        return inputs, targets, weights
