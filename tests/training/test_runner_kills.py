"""A run killed at any moment leaves nothing half-written under a final name.

The stock smoke run is started in a subprocess that sends itself SIGINT, SIGTERM or
SIGKILL at a named point (tests/training/kill_launcher.py). Afterwards the directory
holds no run.json, every JSON file in it parses, model.keras loads or is absent,
`rnnkit evaluate` refuses it with one line, and `rnnkit run stock --resume` completes
it. SIGTERM stops a run as SIGINT does: a clean stop that names the resume command.
"""

from __future__ import annotations

import json
import os
import signal

import pytest

from rnnkit.training import runner
from tests import preloaded
from tests.cli_support import invoke
from tests.stock_support import ROOT, SMOKE_CONFIG
from tests.training.kill_launcher import KILL_POINTS

# SIGKILL at every point: whatever it interrupts stays as it was, half-written files
# included. SIGINT and SIGTERM take one path, the runner's clean stop (SIGTERM is
# turned into SIGINT's KeyboardInterrupt), so each is sent at one point, one of them
# halfway through a file's write (its temporary file must be removed): the other
# eight pairs ran that same path again, two minutes of the CI's 2-core CPU.
CLEAN_STOPS = (("epoch", "INT"), ("model", "TERM"))
# Quick enough for every run: one kill point per signal, each a different place.
REPRESENTATIVE = {*CLEAN_STOPS, ("metrics", "KILL")}
CASES = [
    pytest.param(
        point,
        name,
        id=f"{point}-SIG{name}",
        marks=() if (point, name) in REPRESENTATIVE else pytest.mark.slow,
    )
    for point, name in [*((point, "KILL") for point in KILL_POINTS), *CLEAN_STOPS]
]


def _killed_run(tmp_path, point: str, name: str):
    run_dir = tmp_path / "run"
    arguments = ["--config", str(SMOKE_CONFIG), "--run-dir", str(run_dir)]
    killed = preloaded.run(
        ["-m", "tests.training.kill_launcher", point, name, "run", "stock", *arguments],
        cwd=ROOT,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"},
        timeout=300,
    )
    return run_dir, killed


def _assert_nothing_half_written(run_dir) -> None:
    assert not (run_dir / runner.RUN_FILE).exists()
    final = [
        path
        for path in run_dir.rglob("*")
        if path.is_file() and not path.name.startswith(".")
    ]
    for path in final:
        if path.suffix == ".json":
            json.loads(path.read_text())
    runner.read_history(run_dir / runner.HISTORY_FILE)
    if (run_dir / runner.MODEL_FILE).exists():
        runner.load_model(run_dir / runner.MODEL_FILE)


@pytest.mark.parametrize(("point", "name"), CASES)
def test_a_killed_run_is_refused_by_evaluate_and_resumed(tmp_path, point, name):
    run_dir, killed = _killed_run(tmp_path, point, name)
    output = killed.stdout + killed.stderr
    if name == "KILL":
        assert killed.returncode == -signal.SIGKILL, output[-3000:]
    else:
        # A clean stop: the resume command named, no temporary file left behind.
        assert killed.returncode == 1, output[-3000:]
        assert f"continue with: rnnkit run stock --resume {run_dir}" in output
        assert "Traceback" not in output
        assert not list(run_dir.rglob(".*.tmp-*"))
    assert (run_dir / runner.CONFIG_FILE).is_file()
    _assert_nothing_half_written(run_dir)

    refused = invoke("evaluate", str(run_dir))
    assert refused.exit_code == 1
    assert refused.output.strip().splitlines() == [
        f"Error: {run_dir} is not a completed rnnkit run (no run.json); resume an "
        "interrupted run with `rnnkit run NAME --resume DIR`"
    ]

    resumed = invoke("run", "stock", "--resume", str(run_dir))
    assert resumed.exit_code == 0, resumed.output
    info = json.loads((run_dir / runner.RUN_FILE).read_text())
    assert info["status"] == "completed" and info["resumed"] is True
    assert not [file for file in info["files"] if ".tmp-" in file]
    assert json.loads((run_dir / runner.METRICS_FILE).read_text())["test"]["model"]
    runner.load_model(run_dir / runner.MODEL_FILE)
    epochs = [row["epoch"] for row in runner.read_history(run_dir / "history.csv")]
    assert epochs == [1, 2]
