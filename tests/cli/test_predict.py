"""`rnnkit predict RUN_DIR INPUTS...`."""

from __future__ import annotations

from tests.cli.support import invoke
from tests.stock_support import write_msft_csv


def test_predict_prints_the_next_closes(smoke_run, tmp_path):
    run_dir, _ = smoke_run
    prices = write_msft_csv(tmp_path / "msft.csv")
    result = invoke("predict", str(run_dir), str(prices))
    assert result.exit_code == 0, result.output
    lines = result.output.strip().splitlines()
    assert lines[0] == "msft.csv: last close 83.87 on 2017-11-10"
    assert lines[1].startswith("  2017-11-13  forecast close ")
