"""Reading panels of series: the M4 competition's wide files.

M4 publishes one CSV per frequency and split, one row per series: the series id, then
its values left-aligned, the rest of the row empty (`"V1","V2",...` as the header).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

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
    except (ValueError, pd.errors.ParserError) as error:
        raise DataError(f"{path} is not an M4 CSV file: {error}") from error
    if frame.empty:
        raise DataError(f"{path} holds no series")
    series = {}
    for series_id, row in frame.iterrows():
        values = pd.to_numeric(row, errors="coerce").to_numpy(dtype=np.float64)
        if np.isnan(values).all():
            raise DataError(f"{path}: series {series_id} holds no number")
        last = int(np.flatnonzero(~np.isnan(values))[-1])
        values = values[: last + 1]
        if np.isnan(values).any():
            raise DataError(
                f"{path}: series {series_id} has a gap (an empty or non-numeric "
                "value before its last one); M4 rows hold their values left-aligned"
            )
        series[str(series_id)] = values
    return series
