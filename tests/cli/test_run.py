"""`rnnkit run NAME`, in-process and as a real subprocess."""

from __future__ import annotations

import json

from click.testing import CliRunner

from rnnkit.cli import main
from tests.stock_support import SMOKE_CONFIG, run_rnnkit


def test_run_prints_metrics_beside_baselines(smoke_run):
    run_dir, output = smoke_run
    assert "Test metrics" in output
    for row in ("model", "persistence", "moving_average_5", "always_up"):
        assert f"\n{row} " in output
    metrics = json.loads((run_dir / "metrics.json").read_text())["test"]
    assert set(metrics["model"]) == {
        "mae",
        "rmse",
        "mase",
        "relative_mae",
        "directional_accuracy",
    }
    assert metrics["persistence"]["relative_mae"] == 1.0
    # Even two epochs of a tiny GRU beat the trivial moving-average forecast.
    assert metrics["model"]["mae"] < metrics["moving_average_5"]["mae"]
    assert (run_dir / "model.keras").is_file()
    assert (run_dir / "plots" / "forecast.png").is_file()
    assert (run_dir / "plots" / "forecast_last_60_days.png").is_file()
    assert "Run directory: runs/stock/smoke" in output  # as the command named it


def test_resume_refuses_config_options(tmp_path):
    result = CliRunner().invoke(
        main, ["run", "stock", "--resume", str(tmp_path), "--epochs", "3"]
    )
    assert result.exit_code == 1
    assert "leave out --epochs" in result.output


def test_dry_run_refuses_a_run_directory_in_use(tmp_path):
    (tmp_path / "config.toml").write_text("")
    result = CliRunner().invoke(
        main, ["run", "stock", "--run-dir", str(tmp_path), "--dry-run"]
    )
    assert result.exit_code == 1
    assert f"run directory {tmp_path} is not empty" in result.output


def test_subprocess_run_evaluate_predict(tmp_path):
    run_dir = tmp_path / "run"
    result = run_rnnkit(
        "run",
        "stock",
        "--config",
        str(SMOKE_CONFIG),
        "--set",
        "model.cell_type=lstm",
        "--epochs",
        "1",
        "--run-dir",
        str(run_dir),
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "persistence" in result.stdout
    assert "17/17" in result.stdout and "val_loss" in result.stdout  # progress bar
    assert 'cell_type = "lstm"' in (run_dir / "config.toml").read_text()
    predicted = run_rnnkit("predict", str(run_dir))
    assert predicted.returncode == 0, predicted.stderr[-3000:]
    assert "MSFT daily prices from pmdarima: last close" in predicted.stdout


def test_subprocess_bad_csv_is_one_line(tmp_path):
    bad = tmp_path / "bad.csv"
    bad.write_text("when,price\n2020-01-01,3\n")
    result = run_rnnkit("run", "stock", "--set", f"data.path={bad}")
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    assert "has no date or close column" in result.stderr
    assert result.stderr.strip().splitlines()[-1].startswith("Error:")
