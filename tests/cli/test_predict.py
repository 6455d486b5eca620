"""`rnnkit predict RUN_DIR INPUTS...`."""

from __future__ import annotations

import pytest

from tests.cli.test_evaluate import ELSEWHERE, trained_elsewhere
from tests.cli_support import invoke
from tests.stock_support import write_msft_csv


def test_predict_prints_the_next_closes(smoke_run, tmp_path):
    run_dir, _ = smoke_run
    prices = write_msft_csv(tmp_path / "msft.csv")
    result = invoke("predict", str(run_dir), str(prices))
    assert result.exit_code == 0, result.output
    lines = result.output.strip().splitlines()
    assert lines[0] == "msft.csv: last close 83.87 on 2017-11-10"
    assert lines[1].startswith("  2017-11-13  forecast close ")


@pytest.mark.parametrize("values", ELSEWHERE, ids=lambda v: "-".join(v.values()))
def test_predict_runs_on_the_device_at_hand(smoke_run, tmp_path, values):
    run_dir, _ = smoke_run
    prices = write_msft_csv(tmp_path / "msft.csv")
    expected = invoke("predict", str(run_dir), str(prices))
    copy = trained_elsewhere(run_dir, values, tmp_path)
    result = invoke("predict", str(copy), str(prices))
    assert result.exit_code == 0, result.output
    assert result.output == expected.output
