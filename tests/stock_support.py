"""Shared helpers for the framework and stock-recipe tests: small real price files."""

from __future__ import annotations

import functools
import os
from pathlib import Path

import pandas as pd

from tests import preloaded
from tests.shared_data import require

ROOT = Path(__file__).resolve().parents[1]
SMOKE_CONFIG = ROOT / "recipes" / "stock" / "configs" / "smoke.toml"
SP500_FILE = ROOT.parent / "shared" / "data" / "stocks" / "sp500_all_stocks_5yr.csv.gz"


def smoke_config(values: dict | None = None):
    """The smoke config of the stock recipe with `values` ({"model.units": 4}) set."""
    from rnnkit_recipes.stock.recipe import StockConfig

    from rnnkit import config as config_lib

    return config_lib.resolve(StockConfig, SMOKE_CONFIG, values or {})


def msft_frame(start: str = "2014-11-01") -> pd.DataFrame:
    """Real MSFT daily prices (pmdarima) from `start`, with the file's column names."""
    from pmdarima.datasets import load_msft

    frame = load_msft().drop(columns=["OpenInt"])
    return frame.loc[frame["Date"] >= start].reset_index(drop=True)


def write_msft_csv(path: Path, start: str = "2014-11-01") -> Path:
    msft_frame(start).to_csv(path, index=False)
    return path


@functools.lru_cache(maxsize=1)
def _sp500_head() -> pd.DataFrame:
    require(SP500_FILE)
    # The file is grouped by ticker: its first rows hold AAL, AAPL and part of AAP.
    return pd.read_csv(SP500_FILE, nrows=3000)


def write_sp500_slice(path: Path) -> Path:
    """A multi-ticker file (columns date,open,...,Name) with three real tickers."""
    _sp500_head().to_csv(path, index=False)
    return path


def run_rnnkit(*args: str, cwd: Path | None = None, env: dict | None = None):
    """`rnnkit ARGS` in a fresh process (the installed console script's entry point)."""
    full_env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", **(env or {})}
    return preloaded.run(
        ["-c", "from rnnkit.cli import main; main()", *args],
        cwd=cwd,
        env=full_env,
        timeout=600,
    )
