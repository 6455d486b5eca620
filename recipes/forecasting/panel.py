"""Panels of series as read from files: long and wide layouts, CSV or Parquet.

A panel is many related series (load per feeder, sales per store, the M4 competition's
414 hourly series), forecast by one global model. Two file layouts are read, from CSV
(optionally compressed) or Parquet:

- long: one row per series and time, `id, time, target, covariates...` (the names are
  configurable; without an id column the file is one series; without a time column the
  rows are taken as consecutive steps in file order);
- wide: one row per series, its id then its values left-aligned, the rest of the row
  empty: the M4 competition's files (`Hourly-train.csv`, `"V1","V2",...`; read by
  rnnkit_recipes.forecasting.wide).

Missing values (NaN, a gap in the time column) stay NaN; rnnkit_recipes.forecasting.data
puts the panel on a grid and cuts it into windows.
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

    def select(self, indices) -> Panel:
        """The panel of the series at `indices` only, in that order."""
        return dataclasses.replace(
            self,
            ids=[self.ids[i] for i in indices],
            values=[self.values[i] for i in indices],
            times=None if self.times is None else [self.times[i] for i in indices],
            covariates=None
            if self.covariates is None
            else [self.covariates[i] for i in indices],
        )

    def first_steps(self, count: int) -> Panel:
        """The panel of every series' first `count` steps."""
        return dataclasses.replace(
            self,
            values=[v[:count] for v in self.values],
            times=None if self.times is None else [t[:count] for t in self.times],
            covariates=None
            if self.covariates is None
            else [c[:count] for c in self.covariates],
        )


# -- Reading -------------------------------------------------------------------------


def read_table(path: Path):
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
    path = Path(path)
    return _long_panel(
        read_table(path), path, id_column, time_column, target_column, covariates,
        frequency,
    )  # fmt: skip


def read_columns(
    path: str | Path,
    *,
    time_column: str = "time",
    columns: tuple[str, ...] = (),
    frequency: str | None = None,
) -> Panel:
    """A file of one column per series (ETTh1's `date,HUFL,...,OT`) as a panel: the
    series are `columns` (every column but `time_column` when empty), named by their
    headers, on the times of `time_column` (consecutive steps without one)."""
    path = Path(path)
    frame = read_table(path)
    lowered = {str(c).lower() for c in frame.columns}
    time = time_column if time_column.lower() in lowered else None
    time = time and _column(frame, time, "time", path, "data.time_column")
    names = [_column(frame, c, "series", path, "data.columns") for c in columns]
    names = names or [c for c in frame.columns if c != time]
    if not names:
        raise DataError(f"{path}: no column besides the time column {time!r}")
    frame = frame.assign(_step=np.arange(len(frame)))
    long = frame.melt([time or "_step"], names, "_series", "_value")
    return _long_panel(long, path, "_series", time or "_", "_value", (), frequency)


def _long_panel(
    frame, path: Path, id_column, time_column, target_column, covariates, frequency
) -> Panel:
    import pandas as pd

    from rnnkit.data.timeseries import first_unread

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
        row = first_unread(frame[name], numbers)
        if row is not None:
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
    columns: tuple[str, ...] = (),
) -> Panel:
    """The panel of `path` (the default data when None). `layout` "auto" reads a file
    as wide when its header is M4's ("V1", "V2", ...) and as long otherwise;
    "columns" reads one series per column (`read_columns`)."""
    if path is None:
        if covariates:
            raise DataError(
                "data.covariates names columns of a file, and the default data has "
                "none; give the file with --set data.path=FILE"
            )
        return default_panel()
    from rnnkit_recipes.forecasting.wide import looks_wide, read_wide

    file = Path(path)
    if layout == "auto":
        layout = "wide" if looks_wide(file) else "long"
    if layout == "columns":
        if covariates:
            raise DataError(
                "data.covariates needs a long file (one row per series and time); in "
                "a file of one column per series every column is a series"
            )
        return read_columns(
            file, time_column=time_column, columns=columns, frequency=frequency
        )
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
