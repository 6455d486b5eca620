"""Wide files: one row per series, its id then its values left-aligned (the M4
competition's `Hourly-train.csv` and `Hourly-test.csv`, `"V1","V2",...`), read into
a `Panel` without times, and the M4 test file appended to a panel's series."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
from rnnkit_recipes.forecasting.panel import Panel, read_table

from rnnkit.errors import DataError


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
    """{id: values} of a wide frame (index the ids), each row without its empty
    tail; checked for the whole frame at once (a panel may hold very many rows)."""
    import pandas as pd

    duplicated = frame.index.duplicated()
    if duplicated.any():
        raise DataError(
            f"{path}: series {frame.index[np.argmax(duplicated)]} appears in more "
            "than one row; give each series one row"
        )
    if all(pd.api.types.is_numeric_dtype(dtype) for dtype in frame.dtypes):
        numeric = frame.to_numpy(np.float64)  # numbers only: no text to find
        missing = np.isnan(numeric)
        text = np.zeros((0, 0), dtype=bool)
    else:
        numeric = frame.apply(pd.to_numeric, errors="coerce").to_numpy(np.float64)
        missing = np.isnan(numeric)
        text = missing & frame.notna().to_numpy()
    if text.any():
        row, column = np.argwhere(text)[0]
        raise DataError(
            f"{path}: series {frame.index[row]} holds a non-numeric value "
            f"{str(frame.iat[row, column])!r} (column {frame.columns[column]}); wide "
            "rows hold numbers"
        )
    infinite = np.isinf(numeric)
    if infinite.any():
        row, column = np.argwhere(infinite)[0]
        raise DataError(
            f"{path}: series {frame.index[row]} holds an infinite value (column "
            f"{frame.columns[column]}); write a missing value as an empty cell"
        )
    empty = missing.all(axis=1)
    if empty.any():
        raise DataError(
            f"{path}: series {frame.index[np.argmax(empty)]} holds no number"
        )
    # lengths[i]: 1 + the column of row i's last value; a gap is a missing value
    # before it.
    lengths = missing.shape[1] - np.argmax(~missing[:, ::-1], axis=1)
    gaps = missing.sum(axis=1) > missing.shape[1] - lengths
    if gaps.any():
        raise DataError(
            f"{path}: series {frame.index[np.argmax(gaps)]} has a gap (an empty value "
            "before its last one); wide rows hold their values left-aligned (write "
            "gaps as a long file with a time column)"
        )
    return {
        str(series_id): numeric[row, :length]
        for row, (series_id, length) in enumerate(
            zip(frame.index, lengths, strict=True)
        )
    }


def read_wide(path: str | Path) -> Panel:
    """A wide file (M4's layout) as a panel without times."""
    path = Path(path)
    frame = read_table(path)
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


def looks_wide(path: Path) -> bool:
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
