"""Daily prices -> features -> windows -> chronological train / validation / test.

Features of day t (all scale-free, in percent, so 1986 and 2017 prices look alike):

- `return_pct`  100 * log(close_t / close_{t-1}): the log return;
- `range_pct`   100 * log(high_t / low_t): the day's range (0 without high/low);
- `volume_pct`  100 * (log1p(volume_t) - its 20-day mean): volume against its recent
                level (0 without volume).

An example is the `window` days of features ending on an anchor day t; its target is the
next `horizon` log returns (percent). Splits are cut on the calendar: the last
`test_fraction` of days are forecast by the test examples, the `validation_fraction`
before them by the validation examples, and training examples forecast only days before
those, so no target is seen twice and no scaler sees the future.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pandas as pd

from rnnkit.data.timeseries import clean_prices, read_price_csv, sliding_windows
from rnnkit.errors import DataError
from rnnkit.recipe import RecipeData

FEATURES = ("return_pct", "range_pct", "volume_pct")
VOLUME_MEAN_DAYS = 20
DEFAULT_SOURCE = "MSFT daily prices from pmdarima"


@dataclasses.dataclass
class Split:
    """Examples of one split and where their anchor days sit in the price table."""

    inputs: np.ndarray  # (examples, window, features)
    targets: np.ndarray  # (examples, horizon) log returns in percent
    anchors: np.ndarray  # (examples,) row of the anchor day in `StockData.prices`

    def as_xy(self) -> tuple[np.ndarray, np.ndarray]:
        return self.inputs, self.targets


@dataclasses.dataclass
class StockData(RecipeData):
    """The splits as `(inputs, targets)` plus what the evaluation needs."""

    prices: pd.DataFrame  # date, close, ... one row per trading day (features rows)
    features: np.ndarray  # (days, len(FEATURES))
    source: str
    splits: dict[str, Split]


def load_prices(
    path: str | None,
    ticker: str | None,
    use_adjusted: bool,
    start: str | None,
    end: str | None,
) -> tuple[pd.DataFrame, str]:
    """The cleaned price table and a description of where it came from."""
    if path is None:
        if ticker is not None and ticker.upper() != "MSFT":
            raise DataError(
                f"data.ticker={ticker!r} needs a price file (--set data.path=FILE); "
                "the built-in data is MSFT only"
            )
        frame, source = _load_msft(), DEFAULT_SOURCE
    else:
        frame = read_price_csv(path, ticker=ticker, use_adjusted=use_adjusted)
        source = f"{Path(path).name}" + (f" ({ticker})" if ticker else "")
    frame = clean_prices(frame, source)
    frame = _date_range(frame, start, end, source)
    return frame, source


def _load_msft() -> pd.DataFrame:
    try:
        from pmdarima.datasets import load_msft
    except ImportError:
        raise DataError(
            "the default data (MSFT prices) comes from the pmdarima package, which is "
            "not installed; install it or point the recipe at a CSV with "
            "--set data.path=FILE"
        ) from None
    frame = load_msft()
    frame.columns = [str(c).lower() for c in frame.columns]
    frame["date"] = pd.to_datetime(frame["date"])
    return frame[["date", "open", "high", "low", "close", "volume"]].astype(
        {c: "float64" for c in ("open", "high", "low", "close", "volume")}
    )


def _parse_date(text: str, key: str) -> pd.Timestamp:
    try:
        return pd.Timestamp(text)
    except ValueError:
        raise DataError(f"{key}={text!r} is not a date (use YYYY-MM-DD)") from None


def _date_range(
    frame: pd.DataFrame, start: str | None, end: str | None, source: str
) -> pd.DataFrame:
    keep = np.ones(len(frame), dtype=bool)
    if start is not None:
        keep &= (frame["date"] >= _parse_date(start, "data.start")).to_numpy()
    if end is not None:
        keep &= (frame["date"] <= _parse_date(end, "data.end")).to_numpy()
    if not keep.any():
        first, last = frame["date"].min(), frame["date"].max()
        raise DataError(
            f"{source} has no days between data.start and data.end "
            f"(it covers {first:%Y-%m-%d} to {last:%Y-%m-%d})"
        )
    return frame.loc[keep].reset_index(drop=True)


def compute_features(frame: pd.DataFrame) -> tuple[pd.DataFrame, np.ndarray]:
    """Drops the first day (it has no return) and returns (prices, features)."""
    close = frame["close"].to_numpy()
    returns = 100.0 * np.diff(np.log(close))  # (days - 1,)
    if "high" in frame and "low" in frame:
        day_range = 100.0 * np.log(frame["high"].to_numpy() / frame["low"].to_numpy())
    else:
        day_range = np.zeros(len(frame))
    if "volume" in frame:
        log_volume = pd.Series(np.log1p(frame["volume"].to_numpy()))
        recent = log_volume.rolling(VOLUME_MEAN_DAYS, min_periods=1).mean()
        volume = 100.0 * (log_volume - recent).to_numpy()
    else:
        volume = np.zeros(len(frame))
    features = np.stack([returns, day_range[1:], volume[1:]], axis=-1)  # (days - 1, 3)
    prices = frame.iloc[1:].reset_index(drop=True)
    return prices, features.astype("float32")


def build(
    frame: pd.DataFrame,
    source: str,
    window: int,
    horizon: int,
    validation_fraction: float,
    test_fraction: float,
) -> StockData:
    """Windows and chronological splits of a cleaned price table."""
    prices, features = compute_features(frame)
    days = len(prices)
    validation_start = int(round(days * (1.0 - validation_fraction - test_fraction)))
    test_start = int(round(days * (1.0 - test_fraction)))
    inputs, targets, anchors = sliding_windows(
        features, features[:, 0], window, horizon
    )
    first_forecast = anchors + 1
    last_forecast = anchors + horizon
    masks = {
        "train": last_forecast < validation_start,
        "validation": (first_forecast >= validation_start)
        & (last_forecast < test_start),
        "test": first_forecast >= test_start,
    }
    splits = {
        name: Split(inputs[mask], targets[mask], anchors[mask])
        for name, mask in masks.items()
    }
    empty = [name for name, split in splits.items() if len(split.anchors) == 0]
    if empty or len(splits["train"].anchors) < window:
        missing = " or ".join(empty) or "enough training"
        raise DataError(
            f"{source}: {days + 1} days are too few for window={window}, "
            f"horizon={horizon} and these split fractions (no {missing} examples); "
            "use a longer price history or a smaller data.window"
        )
    return StockData(
        train=splits["train"].as_xy(),
        validation=splits["validation"].as_xy(),
        test=splits["test"].as_xy(),
        prices=prices,
        features=features,
        source=source,
        splits=splits,
    )


def walk_forward(
    data: StockData, folds: int, validation_fraction: float
) -> list[StockData]:
    """Expanding-window folds: the test examples cut into `folds` consecutive blocks.

    Fold k trains on every example forecasting days before block k (its last
    `validation_fraction` kept for validation) and tests on block k.
    """
    horizon = data.splits["test"].targets.shape[1]
    all_inputs = np.concatenate([s.inputs for s in data.splits.values()])
    all_targets = np.concatenate([s.targets for s in data.splits.values()])
    all_anchors = np.concatenate([s.anchors for s in data.splits.values()])
    test_anchors = data.splits["test"].anchors
    if folds > len(test_anchors):
        raise DataError(
            f"evaluation.folds={folds} is more than the "
            f"{len(test_anchors)} test examples"
        )
    blocks = np.array_split(test_anchors, folds)
    fold_data = []
    for block in blocks:
        block_start = block[0] + 1  # first forecast day of the block
        history = all_anchors + horizon < block_start
        history_anchors = all_anchors[history]
        # Training examples forecast days up to `cut`; validation examples after it.
        cut = history_anchors[int(len(history_anchors) * (1.0 - validation_fraction))]
        train = history & (all_anchors + horizon <= cut)
        validation = history & (all_anchors >= cut)
        test = np.isin(all_anchors, block)
        if train.sum() == 0 or validation.sum() == 0:
            raise DataError(
                f"evaluation.folds={folds} leaves fold {len(fold_data) + 1} without "
                "training or validation examples; use fewer folds"
            )
        splits = {
            name: Split(all_inputs[mask], all_targets[mask], all_anchors[mask])
            for name, mask in (
                ("train", train),
                ("validation", validation),
                ("test", test),
            )
        }
        fold_data.append(
            dataclasses.replace(
                data,
                train=splits["train"].as_xy(),
                validation=splits["validation"].as_xy(),
                test=splits["test"].as_xy(),
                splits=splits,
            )
        )
    return fold_data


def latest_window(
    frame: pd.DataFrame, window: int, source: str
) -> tuple[np.ndarray, pd.DataFrame]:
    """The last `window` days of features (1, window, features) and the price rows."""
    prices, features = compute_features(frame)
    if len(features) < window:
        raise DataError(
            f"{source}: {len(frame)} days are too few for a forecast from "
            f"{window} days of history (data.window); give at least {window + 1} days"
        )
    return features[None, -window:], prices
