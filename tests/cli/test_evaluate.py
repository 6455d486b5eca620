"""`rnnkit evaluate RUN_DIR`."""

from __future__ import annotations

import json

from click.testing import CliRunner

from rnnkit.cli import main
from tests.cli.support import invoke
from tests.stock_support import write_msft_csv


def test_evaluate_reloads_and_reproduces_the_metrics(smoke_run, tmp_path):
    run_dir, _ = smoke_run
    output = tmp_path / "evaluation.json"
    result = invoke("evaluate", str(run_dir), "--output", str(output))
    assert result.exit_code == 0, result.output
    recorded = json.loads((run_dir / "metrics.json").read_text())["test"]
    assert json.loads(output.read_text())["test"] == recorded


def test_evaluate_on_another_file(smoke_run, tmp_path):
    run_dir, _ = smoke_run
    prices = write_msft_csv(tmp_path / "msft.csv", start="2012-01-01")
    result = invoke("evaluate", str(run_dir), "--data", str(prices))
    assert result.exit_code == 0, result.output
    assert "persistence" in result.output


def test_evaluate_and_predict_need_a_completed_run(tmp_path):
    result = CliRunner().invoke(main, ["evaluate", str(tmp_path)])
    assert result.exit_code == 1
    assert "not a completed rnnkit run (no run.json)" in result.output
