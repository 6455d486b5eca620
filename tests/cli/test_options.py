"""Options made from a recipe's config (rnnkit/cli/_options.py): generated options,
one-line errors, --dry-run."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from rnnkit.cli import main
from tests.cli_support import invoke
from tests.stock_support import SMOKE_CONFIG


def test_recipe_options_are_generated_from_its_config():
    text = invoke("run", "stock", "--help").output
    for option in ("--data.window", "--model.cell_type", "--train.epochs", "--set"):
        assert option in text
    assert "[gru|lru|lstm|mingru|minlstm|rglru|simple_rnn]" in text
    assert "Past trading days the model reads per forecast." in " ".join(text.split())


@pytest.mark.parametrize(
    "args, message",
    [
        (["run", "stok"], "unknown recipe 'stok'; did you mean 'stock'?"),
        (["run", "stock", "--set", "model.unit=3"], "did you mean 'model.units'?"),
        (["run", "stock", "--model.units", "many"], "model.units: expected int"),
        (
            ["run", "stock", "--model.cell_type", "rnn"],
            "'rnn' is not one of gru, lru, lstm, mingru, minlstm, rglru, simple_rnn",
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
    # Nothing that looks like a run is left behind (issue 57, point 12).
    assert not list(tmp_path.glob("runs/*/*")), list(tmp_path.glob("runs/*/*"))


def test_bad_option_value_is_rejected_by_click():
    result = CliRunner().invoke(main, ["run", "stock", "--device", "tpu"])
    assert result.exit_code == 2
    assert "'tpu' is not one of" in result.output


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
