"""Daily price tables and sliding windows for forecasting recipes.

`read_price_csv` accepts the layouts people actually have: a date column plus
open/high/low/close/volume in any letter case, Yahoo Finance's `Adj Close`, and
multi-ticker files with a ticker column (`Name`, `Ticker` or `Symbol`). `clean_prices`
turns any such table into one sorted row per trading day and says what it changed;
anything it cannot repair is a `DataError` whose message names the file and the problem.
"""

from __future__ import annotations

import logging
import zipfile
from pathlib import Path

import numpy as np
import pandas as pd

from rnnkit.errors import DataError

log = logging.getLogger("rnnkit")

PRICE_COLUMNS = ("open", "high", "low", "close")
TICKER_COLUMNS = ("name", "ticker", "symbol")


def _normalise_name(name: str) -> str:
    return "_".join(str(name).strip().lower().split())


def read_price_csv(
    path: str | Path, ticker: str | None = None, use_adjusted: bool = True
) -> pd.DataFrame:
    """Reads a daily price CSV into a frame with a `date` column and OHLCV columns.

    Args:
        path: a CSV file, optionally compressed (`.gz`, `.zip`, ...).
        ticker: which ticker to keep from a multi-ticker file (case-insensitive).
        use_adjusted: take `Adj Close` as the close when the file has it, so that
            splits and dividends do not look like price jumps.

    Returns:
        Columns `date` (datetime64), `close`, and whichever of `open`, `high`, `low`,
        `volume` the file has, in file order (not yet cleaned: see `clean_prices`).
    """
    path = Path(path)
    if not path.is_file():
        raise DataError(f"price file not found: {path}")
    try:
        frame = pd.read_csv(path)
    except pd.errors.EmptyDataError:
        raise DataError(f"{path} is empty") from None
    # ParserError and UnicodeDecodeError are ValueErrors; a damaged .gz is an OSError.
    except (ValueError, EOFError, OSError, zipfile.BadZipFile) as error:
        message = str(error).strip().splitlines()[0] if str(error).strip() else ""
        raise DataError(f"cannot read {path} as CSV: {message}") from None
    frame.columns = [_normalise_name(c) for c in frame.columns]
    frame = _select_ticker(frame, path, ticker)
    if use_adjusted and "adj_close" in frame.columns:
        frame["close"] = frame["adj_close"]
    missing = [c for c in ("date", "close") if c not in frame.columns]
    if missing:
        found = ", ".join(map(str, frame.columns)) or "none"
        raise DataError(
            f"{path} has no {' or '.join(missing)} column (columns found: {found}); "
            "expected date, open, high, low, close, volume (any letter case)"
        )
    keep = ["date", *(c for c in (*PRICE_COLUMNS, "volume") if c in frame.columns)]
    frame = frame[keep].copy()
    dates = pd.to_datetime(frame["date"], errors="coerce")
    row = first_unread(frame["date"], dates)
    if row is not None:
        raise DataError(
            f"{path}: unreadable date {frame['date'].iloc[row]!r} on data row {row + 1}"
        )
    frame["date"] = dates
    for column in keep[1:]:
        values = pd.to_numeric(frame[column], errors="coerce")
        row = first_unread(frame[column], values)
        if row is not None:
            raise DataError(
                f"{path}: non-numeric {column} value {frame[column].iloc[row]!r} "
                f"on data row {row + 1}"
            )
        frame[column] = values.astype("float64")
    return frame.reset_index(drop=True)


def first_unread(raw: pd.Series, read: pd.Series) -> int | None:
    """Position of the first cell of `raw` that holds something `read` (`raw` through
    `pd.to_numeric` or `pd.to_datetime` with `errors="coerce"`) could not read; None
    when every cell that is not empty was read. For one-line errors that quote it."""
    unread = read.isna() & raw.notna()
    return int(np.flatnonzero(unread.to_numpy())[0]) if unread.any() else None


def _select_ticker(frame: pd.DataFrame, path: Path, ticker: str | None) -> pd.DataFrame:
    column = next((c for c in TICKER_COLUMNS if c in frame.columns), None)
    if column is None:
        if ticker is not None:
            raise DataError(
                f"data.ticker={ticker!r} was given, but {path} has no ticker column "
                f"({', '.join(TICKER_COLUMNS)})"
            )
        return frame
    names = frame[column].astype(str).str.strip()
    tickers = sorted(names.unique())
    if ticker is None:
        if len(tickers) == 1:
            return frame
        shown = ", ".join(tickers[:8]) + (", ..." if len(tickers) > 8 else "")
        raise DataError(
            f"{path} holds {len(tickers)} tickers ({shown}); "
            "choose one with --set data.ticker=NAME"
        )
    chosen = names.str.upper() == ticker.strip().upper()
    if not chosen.any():
        raise DataError(
            f"ticker {ticker!r} is not in {path} ({len(tickers)} tickers, "
            f"e.g. {', '.join(tickers[:5])})"
        )
    return frame.loc[chosen].drop(columns=[column])


def clean_prices(frame: pd.DataFrame, source: str) -> pd.DataFrame:
    """One row per date, sorted, without gaps in the values; reports what it changed.

    - Unsorted dates are sorted (logged).
    - Rows that repeat a date with identical values are dropped (logged); a date that
      appears with different values is a `DataError`.
    - Rows without a date or a close are dropped (logged).
    - Other missing values are filled from the previous day (logged); leading rows that
      cannot be filled are dropped.
    - Prices must be positive (log returns are taken).
    """
    frame = frame.copy()
    no_key = frame["date"].isna() | frame["close"].isna()
    if no_key.any():
        log.info("%s: dropped %d rows without a date or close", source, no_key.sum())
        frame = frame.loc[~no_key]
    if not frame["date"].is_monotonic_increasing:
        log.info("%s: dates were not in order; sorted them", source)
        frame = frame.sort_values("date", kind="stable")
    repeated = frame.duplicated()
    if repeated.any():
        log.info("%s: dropped %d repeated rows", source, repeated.sum())
        frame = frame.loc[~repeated]
    conflicting = frame["date"].duplicated(keep=False)
    if conflicting.any():
        dates = frame.loc[conflicting, "date"].dt.strftime("%Y-%m-%d").unique()
        raise DataError(
            f"{source}: {len(dates)} dates appear more than once with different "
            f"values (first: {dates[0]}); keep one row per date"
        )
    value_columns = [c for c in frame.columns if c != "date"]
    missing = int(frame[value_columns].isna().sum().sum())
    if missing:
        log.info("%s: filled %d missing values from the previous day", source, missing)
        frame[value_columns] = frame[value_columns].ffill()
        frame = frame.dropna(subset=value_columns)
    prices = [c for c in PRICE_COLUMNS if c in frame.columns]
    not_positive = (frame[prices] <= 0).any(axis=1)
    if not_positive.any():
        date = frame.loc[not_positive, "date"].iloc[0].strftime("%Y-%m-%d")
        raise DataError(
            f"{source}: {not_positive.sum()} rows have a zero or negative price "
            f"(first: {date})"
        )
    return frame.reset_index(drop=True)


def sliding_windows(
    features: np.ndarray, targets: np.ndarray, window: int, horizon: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every (past `window` rows of features -> next `horizon` targets) example.

    Args:
        features: (time, num_features).
        targets: (time,), the value to forecast at each step.
        window: rows of history per example.
        horizon: future steps per example.

    Returns:
        `inputs` (examples, window, num_features), `outputs` (examples, horizon) and
        `anchors` (examples,): the index of the last input row of each example, so
        example i forecasts rows anchors[i] + 1 ... anchors[i] + horizon.
    """
    if window < 1 or horizon < 1:
        raise ValueError(f"window and horizon must be >= 1, got {window}, {horizon}")
    anchors = np.arange(window - 1, len(features) - horizon)
    if len(anchors) == 0:
        return (
            np.zeros((0, window, features.shape[1]), features.dtype),
            np.zeros((0, horizon), targets.dtype),
            anchors,
        )
    input_view = np.lib.stride_tricks.sliding_window_view(features, window, axis=0)
    inputs = input_view.transpose(0, 2, 1)[: len(anchors)]  # (examples, window, feat)
    output_view = np.lib.stride_tricks.sliding_window_view(targets[window:], horizon)
    outputs = output_view[: len(anchors)]  # (examples, horizon)
    return np.ascontiguousarray(inputs), np.ascontiguousarray(outputs), anchors
