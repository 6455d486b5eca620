"""Unexpected exceptions in any command: one line that names what failed and where
its traceback was written; `--verbose` prints the traceback (rnnkit/cli/_common.py)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from click.testing import CliRunner

from rnnkit import registry
from rnnkit.cli import main
from tests.stock_support import SMOKE_CONFIG


def broken(*args, **kwargs):
    raise ZeroDivisionError("nobody expected this\nsecond line")


def interrupted(*args, **kwargs):
    raise KeyboardInterrupt


def run(*args: str):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def one_error_line(output: str) -> str:
    assert "Traceback" not in output, output
    errors = [line for line in output.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1, output
    return errors[0]


def written_to(line: str) -> Path:
    match = re.search(r"the full traceback is in (\S+);", line)
    assert match, line
    return Path(match.group(1))


def test_an_unexpected_exception_is_one_line_and_a_log_file(monkeypatch, tmp_path):
    monkeypatch.setenv("RNNKIT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(registry, "summaries", broken)
    result = run("list")
    assert result.exit_code == 1
    line = one_error_line(result.output)
    assert line.startswith("Error: rnnkit list failed at cli/test_errors.py:")
    assert "ZeroDivisionError: nobody expected this" in line
    assert "second line" not in line and "--verbose" in line
    log = written_to(line)
    assert log.parent == tmp_path / "cache" / "logs"
    text = log.read_text(encoding="utf-8")
    assert text.startswith("rnnkit list (")
    assert "Traceback (most recent call last)" in text
    assert "in broken" in text and "ZeroDivisionError: nobody expected" in text


def test_verbose_prints_the_traceback_too(monkeypatch, tmp_path):
    monkeypatch.setenv("RNNKIT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(registry, "summaries", broken)
    result = run("--verbose", "list")
    assert result.exit_code == 1
    assert "Traceback (most recent call last)" in result.output
    assert "in broken" in result.output
    line = result.output.strip().splitlines()[-1]
    assert line.startswith("Error: rnnkit list failed")
    assert "it is printed above" in line
    assert written_to(line).is_file()


def test_an_unwritable_log_folder_prints_the_traceback(monkeypatch, tmp_path):
    (tmp_path / "cache").write_text("a file, not a folder")
    monkeypatch.setenv("RNNKIT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(registry, "summaries", broken)
    result = run("list")
    assert result.exit_code == 1
    assert "Traceback (most recent call last)" in result.output
    line = result.output.strip().splitlines()[-1]
    assert "the traceback could not be written to" in line
    assert "it is printed above" in line


def test_a_failed_run_keeps_its_traceback_in_the_run_directory(monkeypatch, tmp_path):
    from rnnkit_recipes.stock.recipe import StockRecipe

    monkeypatch.setenv("RNNKIT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(StockRecipe, "evaluate", broken)  # after training
    run_dir = tmp_path / "run"
    result = run(
        "run", "stock", "--config", str(SMOKE_CONFIG), "--run-dir", str(run_dir),
        "--epochs", "1",
    )  # fmt: skip
    assert result.exit_code == 1
    line = one_error_line(result.output)
    assert line.startswith("Error: rnnkit run stock failed at cli/test_errors.py:")
    assert written_to(line) == run_dir / "traceback.log"
    assert "in broken" in (run_dir / "traceback.log").read_text(encoding="utf-8")
    assert not (tmp_path / "cache").exists()


def test_a_run_that_fails_before_training_files_its_traceback_in_the_logs(
    monkeypatch, tmp_path
):
    """Its folder is gone (issue 57, point 12), so the log folder keeps it."""
    from rnnkit_recipes.stock.recipe import StockRecipe

    monkeypatch.setenv("RNNKIT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(StockRecipe, "load_data", broken)
    run_dir = tmp_path / "run"
    result = run(
        "run", "stock", "--config", str(SMOKE_CONFIG), "--run-dir", str(run_dir)
    )
    assert result.exit_code == 1
    log = written_to(one_error_line(result.output))
    assert log.parent == tmp_path / "cache" / "logs"
    assert "in broken" in log.read_text(encoding="utf-8")
    assert not run_dir.exists()


def test_keyboard_interrupt_is_still_aborted(monkeypatch, tmp_path):
    monkeypatch.setenv("RNNKIT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(registry, "summaries", interrupted)
    result = run("list")
    assert result.exit_code == 1
    assert result.output.strip().splitlines()[-1] == "Aborted!"
    assert "Error:" not in result.output
    assert not (tmp_path / "cache").exists()


def test_an_unexpected_exception_in_a_fresh_process(tmp_path):
    code = (
        "import sys\n"
        "from rnnkit import registry\n"
        "def broken():\n"
        "    raise RuntimeError('deep inside')\n"
        "registry.summaries = broken\n"
        "from rnnkit.cli import main\n"
        "main(sys.argv[1:])\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code, "list"],
        env={**os.environ, "RNNKIT_CACHE_DIR": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 1
    assert result.stdout == ""
    line = one_error_line(result.stderr)
    assert result.stderr.strip() == line
    assert "rnnkit list failed at <string>:4: RuntimeError: deep inside" in line
    log = written_to(line)
    assert log.parent == tmp_path / "logs"
    assert "RuntimeError: deep inside" in log.read_text(encoding="utf-8")


def test_a_failed_run_in_a_directory_it_named_itself_keeps_its_traceback_there(
    monkeypatch, tmp_path
):
    from rnnkit_recipes.stock.recipe import StockRecipe

    monkeypatch.setenv("RNNKIT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(StockRecipe, "evaluate", broken)  # after training
    result = run("run", "stock", "--config", str(SMOKE_CONFIG), "--epochs", "1")
    assert result.exit_code == 1
    [run_dir] = (tmp_path / "runs" / "stock").iterdir()
    written = tmp_path / written_to(one_error_line(result.output))
    assert written == run_dir / "traceback.log"
    assert "in broken" in (run_dir / "traceback.log").read_text(encoding="utf-8")
    assert not (tmp_path / "cache").exists()
