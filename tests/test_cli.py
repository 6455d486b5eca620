"""The `rnnkit` launcher, through click's CliRunner and as a real subprocess."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from rnnkit.cli import main
from tests.stock_support import SMOKE_CONFIG, run_rnnkit, write_msft_csv


def invoke(*args: str):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


@pytest.fixture(scope="module")
def smoke_run(tmp_path_factory):
    """One completed smoke run of the stock recipe, shared by the read-only tests."""
    run_dir = tmp_path_factory.mktemp("cli") / "smoke"
    result = invoke(
        "run", "stock", "--config", str(SMOKE_CONFIG), "--run-dir", str(run_dir)
    )
    assert result.exit_code == 0, result.output
    return run_dir, result


def test_help_and_list():
    assert "run" in invoke("--help").output
    listing = invoke("list")
    assert listing.exit_code == 0
    assert any(line.startswith("stock ") for line in listing.output.splitlines())
    run_help = invoke("run", "--help").output
    assert "stock" in run_help


def test_recipe_options_are_generated_from_its_config():
    text = invoke("run", "stock", "--help").output
    for option in ("--data.window", "--model.cell_type", "--train.epochs", "--set"):
        assert option in text
    assert "[gru|lstm|simple_rnn]" in text
    assert "Past trading days the model reads per forecast." in " ".join(text.split())


@pytest.mark.parametrize(
    "args, message",
    [
        (["run", "stok"], "unknown recipe 'stok'; did you mean 'stock'?"),
        (["run", "stock", "--set", "model.unit=3"], "did you mean 'model.units'?"),
        (["run", "stock", "--model.units", "many"], "model.units: expected int"),
        (
            ["run", "stock", "--model.cell_type", "rnn"],
            "'rnn' is not one of gru, lstm, simple_rnn",
        ),
        (["run", "stock", "--config", "missing.toml"], "config file not found"),
        (["run", "stock", "--set", "data.path=/no/such.csv"], "price file not found"),
        (["tune", "stock", "--set", "data.windw=3"], "did you mean 'data.window'?"),
        (["run", "stock", "--set", "data.window=0"], "data.window (command line): 0"),
    ],
)
def test_bad_input_is_one_line_and_nonzero(args, message, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(main, args)
    assert result.exit_code != 0
    assert message in result.output
    assert "Traceback" not in result.output
    assert result.output.strip().splitlines()[-1].startswith("Error:")


def test_bad_option_value_is_rejected_by_click():
    result = CliRunner().invoke(main, ["run", "stock", "--device", "tpu"])
    assert result.exit_code == 2
    assert "'tpu' is not one of" in result.output


def test_run_prints_metrics_beside_baselines(smoke_run):
    run_dir, result = smoke_run
    assert "Test metrics" in result.output
    for row in ("model", "persistence", "moving_average_5", "always_up"):
        assert f"\n{row} " in result.output
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
    assert f"Run directory: {run_dir}" in result.output


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


def test_predict_prints_the_next_closes(smoke_run, tmp_path):
    run_dir, _ = smoke_run
    prices = write_msft_csv(tmp_path / "msft.csv")
    result = invoke("predict", str(run_dir), str(prices))
    assert result.exit_code == 0, result.output
    lines = result.output.strip().splitlines()
    assert lines[0] == "msft.csv: last close 83.87 on 2017-11-10"
    assert lines[1].startswith("  2017-11-13  forecast close ")


def test_evaluate_and_predict_need_a_completed_run(tmp_path):
    result = CliRunner().invoke(main, ["evaluate", str(tmp_path)])
    assert result.exit_code == 1
    assert "not a completed rnnkit run (no run.json)" in result.output


def test_resume_refuses_config_options(tmp_path):
    result = CliRunner().invoke(
        main, ["run", "stock", "--resume", str(tmp_path), "--epochs", "3"]
    )
    assert result.exit_code == 1
    assert "leave out --epochs" in result.output


def test_dry_run_checks_and_prints_the_config_and_writes_nothing(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = invoke(
        "run", "stock", "--config", str(SMOKE_CONFIG),
        "--set", "model.units=24", "--epochs", "2", "--dry-run",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "units = 24" in result.output and "epochs = 2" in result.output
    assert "without --dry-run it trains into runs/stock/<timestamp>" in result.output
    assert list(tmp_path.iterdir()) == []  # no run directory, no data cache

    result = invoke("tune", "stock", "--max-trials", "3", "--dry-run")
    assert result.exit_code == 0, result.output
    assert "searches 3 trial(s) into runs/stock/tuning" in result.output
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "args, message",
    [
        (["--epochs", "0"], "train.epochs"),
        (["--set", "model.unit=3"], "model.unit"),
        (["--config", "missing.toml"], "config file not found: missing.toml"),
    ],
)
def test_dry_run_fails_as_the_real_run_would(args, message, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(main, ["run", "stock", *args, "--dry-run"])
    assert result.exit_code == 1, result.output
    assert message in result.output and "Traceback" not in result.output


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


def test_info_shows_versions_and_devices():
    result = invoke("info")
    assert result.exit_code == 0
    assert "tensorflow" in result.output and "backend" in result.output
    assert "device       CPU" in result.output
