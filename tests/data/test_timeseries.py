"""rnnkit.data.timeseries: reading real price files and the ways they go wrong."""

from __future__ import annotations

import logging

import numpy as np
import pandas as pd
import pytest

from rnnkit.data.timeseries import clean_prices, read_price_csv, sliding_windows
from rnnkit.errors import DataError
from tests.stock_support import msft_frame, write_sp500_slice


def test_reads_mixed_case_columns_and_adjusted_close(tmp_path):
    frame = msft_frame().head(50)
    frame.columns = ["DATE", "open", "High", "LOW", "Close", "VOLUME"]
    frame["Adj Close"] = frame["Close"] * 0.9
    path = tmp_path / "yahoo.csv"
    frame.to_csv(path, index=False)

    prices = read_price_csv(path)
    assert list(prices.columns) == ["date", "open", "high", "low", "close", "volume"]
    assert prices["date"].dtype.kind == "M"
    np.testing.assert_allclose(prices["close"], frame["Close"] * 0.9)
    raw = read_price_csv(path, use_adjusted=False)
    np.testing.assert_allclose(raw["close"], frame["Close"])


def test_close_only_file(tmp_path):
    path = tmp_path / "close.csv"
    msft_frame().head(30)[["Date", "Close"]].to_csv(path, index=False)
    assert list(read_price_csv(path).columns) == ["date", "close"]


def test_multi_ticker_file_needs_and_takes_a_ticker(tmp_path):
    path = write_sp500_slice(tmp_path / "sp500.csv")
    with pytest.raises(
        DataError, match=r"holds 3 tickers \(AAL, AAP, AAPL\).*data.ticker"
    ):
        read_price_csv(path)
    apple = read_price_csv(path, ticker="aapl")
    assert len(apple) == 1259
    assert apple["date"].is_monotonic_increasing
    assert apple["close"].iloc[0] == pytest.approx(67.8542)
    with pytest.raises(DataError, match="ticker 'MSFT' is not in"):
        read_price_csv(path, ticker="MSFT")


def test_ticker_without_ticker_column(tmp_path):
    path = tmp_path / "one.csv"
    msft_frame().head(30).to_csv(path, index=False)
    with pytest.raises(DataError, match="has no ticker column"):
        read_price_csv(path, ticker="MSFT")


@pytest.mark.parametrize(
    "content, message",
    [
        ("", "is empty"),
        ("when,price\n2020-01-01,1\n", "has no date or close column"),
        ("date,open\n2020-01-01,1\n", "has no close column"),
        (
            "date,close\n2020-01-01,1\nnot a date,2\n",
            "unreadable date 'not a date' on data row 2",
        ),
        (
            "date,close\n2020-01-01,1\n2020-01-02,abc\n",
            "non-numeric close value 'abc' on data row 2",
        ),
        ('date,close\n"2020-01-01,1\n', "cannot read"),
    ],
)
def test_malformed_files(tmp_path, content, message):
    path = tmp_path / "bad.csv"
    path.write_text(content)
    with pytest.raises(DataError) as error:
        read_price_csv(path)
    assert message in str(error.value)
    assert "\n" not in str(error.value)


def test_binary_file_is_a_data_error(tmp_path):
    path = tmp_path / "prices.csv"
    path.write_bytes(bytes(range(256)) * 8)
    with pytest.raises(DataError, match="cannot read|has no date"):
        read_price_csv(path)


@pytest.mark.parametrize(
    "name, content",
    [("prices.csv.gz", b"\x1f\x8bnot really gzip"), ("prices.zip", b"PK\x03\x04torn")],
)
def test_damaged_compressed_files(tmp_path, name, content):
    path = tmp_path / name
    path.write_bytes(content)
    with pytest.raises(DataError, match="cannot read .* as CSV"):
        read_price_csv(path)


def test_missing_file():
    with pytest.raises(DataError, match="price file not found"):
        read_price_csv("/no/such/prices.csv")


def _frame(dates, closes, **columns):
    return pd.DataFrame({"date": pd.to_datetime(dates), "close": closes, **columns})


def test_unsorted_dates_are_sorted_and_reported(caplog):
    frame = _frame(["2020-01-03", "2020-01-01", "2020-01-02"], [3.0, 1.0, 2.0])
    with caplog.at_level(logging.INFO, logger="rnnkit"):
        cleaned = clean_prices(frame, "test.csv")
    assert cleaned["close"].tolist() == [1.0, 2.0, 3.0]
    assert "dates were not in order" in caplog.text


def test_repeated_rows_are_dropped_but_conflicting_dates_are_errors(caplog):
    repeated = _frame(["2020-01-01", "2020-01-01", "2020-01-02"], [1.0, 1.0, 2.0])
    with caplog.at_level(logging.INFO, logger="rnnkit"):
        assert len(clean_prices(repeated, "test.csv")) == 2
    assert "dropped 1 repeated rows" in caplog.text
    conflicting = _frame(["2020-01-01", "2020-01-01", "2020-01-02"], [1.0, 1.5, 2.0])
    with pytest.raises(DataError, match="1 dates appear more than once.*2020-01-01"):
        clean_prices(conflicting, "test.csv")


def test_missing_values_are_filled_or_dropped(caplog):
    frame = _frame(
        ["2020-01-01", "2020-01-02", "2020-01-03", "2020-01-06", "2020-01-07"],
        [1.0, 2.0, np.nan, 4.0, 5.0],
        open=[np.nan, 1.9, 2.9, np.nan, 4.9],
    )
    with caplog.at_level(logging.INFO, logger="rnnkit"):
        cleaned = clean_prices(frame, "test.csv")
    # The row without a close goes; a gap is filled from the previous day; the first
    # row's open has nothing before it, so that row goes too.
    assert cleaned["date"].dt.day.tolist() == [2, 6, 7]
    assert cleaned["open"].tolist() == [1.9, 1.9, 4.9]
    assert "without a date or close" in caplog.text and "filled" in caplog.text


def test_sp500_missing_opens_are_filled(tmp_path):
    frame = pd.read_csv(write_sp500_slice(tmp_path / "s.csv"))
    frame.loc[5, "open"] = np.nan
    path = tmp_path / "gaps.csv"
    frame.to_csv(path, index=False)
    cleaned = clean_prices(read_price_csv(path, ticker="AAL"), "gaps.csv")
    assert not cleaned.isna().any().any()
    assert cleaned["open"].iloc[5] == cleaned["open"].iloc[4]


def test_non_positive_prices_are_errors():
    with pytest.raises(DataError, match="zero or negative price.*2020-01-02"):
        clean_prices(_frame(["2020-01-01", "2020-01-02"], [1.0, 0.0]), "test.csv")


def test_sliding_windows_align_inputs_and_targets():
    features = np.arange(20, dtype="float32").reshape(10, 2)  # (time, features)
    targets = np.arange(10, dtype="float32") * 10
    inputs, outputs, anchors = sliding_windows(features, targets, window=3, horizon=2)
    assert inputs.shape == (6, 3, 2) and outputs.shape == (6, 2)
    assert anchors.tolist() == [2, 3, 4, 5, 6, 7]
    for example, anchor in enumerate(anchors):
        np.testing.assert_array_equal(
            inputs[example], features[anchor - 2 : anchor + 1]
        )
        np.testing.assert_array_equal(
            outputs[example], targets[anchor + 1 : anchor + 3]
        )
    empty_inputs, _, _ = sliding_windows(features, targets, window=9, horizon=2)
    assert empty_inputs.shape == (0, 9, 2)
