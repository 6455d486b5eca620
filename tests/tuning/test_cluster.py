"""rnnkit.tuning.cluster and .worker through `rnnkit tune --chief/--worker`: Keras
Tuner's chief/worker search, on loopback.

Every process started here has a hard deadline and is killed with SIGKILL (its whole
process group) when its test ends (tests/process_support.py).
"""

from __future__ import annotations

import csv
import os
import re
import socket
import time

import pytest
from rnnkit_recipes.stock.recipe import StockConfig

from rnnkit import config as config_lib
from rnnkit.tuning import cluster as tuning_cluster
from tests.cli_support import error_line, invoke
from tests.process_support import free_port, processes
from tests.stock_support import SMOKE_CONFIG

TUNE = ["tune", "stock", "--config", str(SMOKE_CONFIG), "--epochs", "1"]


def test_chief_and_two_workers_run_every_trial_once(tmp_path):
    address = f"127.0.0.1:{free_port()}"
    tune_dir = tmp_path / "tuning"
    deadline = time.monotonic() + 150
    with processes(tmp_path) as started:
        chief = started.start(
            "chief", *TUNE, "--chief", address, "--max-trials", "4",
            "--tune-dir", str(tune_dir), "--worker-timeout", "60",
        )  # fmt: skip
        # Worker 1 shares the chief's folder (a shared filesystem) and runs each
        # trial in a fresh process; worker 2 keeps its checkpoints in a temporary
        # folder of its own and runs its trials in its own process (--one-process:
        # no TensorFlow start per trial, 13 s of CPU each on a 2-core CPU).
        workers = [
            started.start(
                "worker-1", *TUNE, "--worker", "1", "--chief", address,
                "--tune-dir", str(tune_dir), "--connect-timeout", "60",
            ),
            started.start(
                "worker-2", *TUNE, "--worker", "2", "--chief", address,
                "--one-process",
            ),
        ]  # fmt: skip
        chief_status, chief_output = started.finish(chief, deadline)
        assert chief_status == 0, chief_output[-3000:]
        ran = {}
        for index, worker in enumerate(workers, start=1):
            status, output = started.finish(worker, deadline)
            assert status == 0, output[-3000:]
            ran[index] = re.findall(r"^  trial (\w+): (\w+) in ", output, re.M)

    with (tune_dir / "trials.csv").open() as handle:
        rows = list(csv.DictReader(handle))
    trial_ids = [row["trial_id"] for row in rows]
    assert len(rows) == 4 and len(set(trial_ids)) == 4
    # Keras Tuner records a search in which every trial failed as a success.
    assert {row["status"] for row in rows} == {"COMPLETED"}, rows
    names = [n for n in rows[0] if n not in ("trial_id", "status", "val_loss")]
    assert len({tuple(row[n] for n in names) for row in rows}) == 4

    # Each trial ran exactly once, on one worker, and both workers took part.
    by_workers = [trial_id for trials in ran.values() for trial_id, _ in trials]
    assert sorted(by_workers) == sorted(trial_ids), ran
    assert all(status == "COMPLETED" for t in ran.values() for _, status in t)
    assert ran[1] and ran[2], ran

    # What the chief reports is the best row of trials.csv, and best.toml holds it.
    best_row = min(rows, key=lambda row: float(row["val_loss"]))
    assert "4 trial(s) completed" in chief_output
    reported = re.search(r"best val_loss = (\S+)\nBest trial:  (\w+) ", chief_output)
    assert reported, chief_output[-3000:]
    assert float(reported.group(1)) == pytest.approx(float(best_row["val_loss"]))
    assert reported.group(2) == best_row["trial_id"]
    best = config_lib.load_toml(StockConfig, tune_dir / "best.toml")
    assert best.model.units == int(best_row["units"])
    assert best.model.cell_type == best_row["cell_type"]
    assert best.data.window == int(best_row["window"])
    assert best.train.epochs == 1
    # Worker 1 kept its checkpoints in the shared folder; worker 2's went with its
    # temporary folder.
    checkpoints = {
        path.parent.name for path in (tune_dir / "random").glob("trial_*/checkpoint*")
    }
    assert checkpoints == {f"trial_{trial_id}" for trial_id, _ in ran[1]}


class _Oracle:
    """What the chief's wait reads of Keras Tuner's oracle: the search is done and
    one worker is known."""

    max_consecutive_failed_trials = 3

    def __init__(self) -> None:
        self.ongoing_trials, self.trials, self.end_order = {}, {}, []
        self.tuner_ids = {"worker-1"}


class _Servicer:
    stop_triggered = True


class _Clock:
    """time.monotonic and time.sleep of rnnkit.tuning.cluster, simulated: the
    worker asks for another trial (and is told to stop) at `asks_at` seconds."""

    def __init__(self, oracle: _Oracle, asks_at: float) -> None:
        self.now, self.oracle, self.asks_at = 0.0, oracle, asks_at

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds
        if self.now >= self.asks_at:
            self.oracle.tuner_ids = set()


def test_the_chief_waits_for_a_known_worker_as_long_as_a_trial_process_starts(
    monkeypatch,
):
    """A worker that runs each trial in a fresh process asks for the next trial only
    once that process has started TensorFlow (13 CPU-s on a busy 2-core machine):
    the chief, done, waits for it and ends once it is told; a worker that died
    between trials (it never asks) keeps the chief a minute at most."""
    grace = tuning_cluster.STOP_GRACE_SECONDS
    # 30 s: a trial process's start, well past the 10 s the chief used to wait.
    for asks_at, ends_within in ((30.0, (30.0, 31.0)), (float("inf"), (grace, 61.0))):
        oracle = _Oracle()
        clock = _Clock(oracle, asks_at)
        monkeypatch.setattr(tuning_cluster, "time", clock)
        assert tuning_cluster._wait_until_done(oracle, _Servicer(), "a:1", 600) is None
        assert ends_within[0] <= clock.now < ends_within[1]


def test_worker_without_a_chief_fails_within_its_timeout(tmp_path):
    address = f"127.0.0.1:{free_port()}"  # nothing listens there
    begin = time.monotonic()
    with processes(tmp_path) as started:
        worker = started.start(
            "worker", *TUNE, "--worker", "1", "--chief", address,
            "--connect-timeout", "2",
        )  # fmt: skip
        status, output = started.finish(worker, begin + 60)
    assert status == 1, output
    assert "Traceback" not in output
    assert f"Error: no chief answered at {address} within 2 s" in output
    assert time.monotonic() - begin < 30


def test_chief_without_workers_fails_after_its_timeout(tmp_path):
    address = f"127.0.0.1:{free_port()}"
    with processes(tmp_path) as started:
        chief = started.start(
            "chief", *TUNE, "--chief", address, "--worker-timeout", "1",
            "--tune-dir", str(tmp_path / "tuning"),
        )  # fmt: skip
        status, output = started.finish(chief, time.monotonic() + 120)
    assert status == 1, output[-3000:]
    assert "Traceback" not in output
    assert f"Error: no worker asked the chief at {address} for a trial for 1 s" in (
        output
    )
    assert not (tmp_path / "tuning" / "best.toml").exists()


@pytest.mark.parametrize(
    "args, message",
    [
        (["--chief", "localhost"], "--chief: 'localhost' is not HOST:PORT"),
        (["--chief", "10.0.0.5:99999"], "with a port from 1 to 65535"),
        (["--chief", "http://10.0.0.5:8470"], "'http://10.0.0.5:8470' is not"),
        (["--worker", "1"], "--worker runs trials for a chief"),
        (["--worker", "chief-2", "--chief", "a:1"], "does not contain 'chief'"),
        (["--worker", "1", "--chief", "a:1", "--overwrite"], "--overwrite belongs"),
        (
            ["--worker", "1", "--chief", "a:1", "--tuner", "hyperband"],
            "give it the chief's tuning folder",
        ),
        (["--connect-timeout", "5"], "--connect-timeout is a worker's"),
        (["--worker-timeout", "5"], "--worker-timeout is the chief's"),
        (["--one-process"], "--one-process is a worker's"),
    ],
)
def test_bad_cluster_options_are_one_line_errors(args, message):
    for dry_run in ([], ["--dry-run"]):
        line = error_line(invoke("tune", "stock", *args, *dry_run))
        assert message in line, line


def test_chief_port_in_use_fails_before_loading_anything(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        address = f"127.0.0.1:{taken.getsockname()[1]}"
        line = error_line(invoke("tune", "stock", "--chief", address))
    assert f"the chief cannot listen on {address}: Address already in use" in line


def test_dry_run_names_the_role():
    address = "10.0.0.5:8470"
    chief = invoke("tune", "stock", "--chief", address, "--dry-run")
    assert chief.exit_code == 0, chief.output
    assert f"served to workers at {address}" in chief.output
    worker = invoke("tune", "stock", "--worker", "2", "--chief", address, "--dry-run")
    assert worker.exit_code == 0, worker.output
    assert f"runs trials for the chief at {address} as worker 2" in worker.output


def test_role_sets_keras_tuner_variables_and_restores_them(monkeypatch):
    from keras_tuner.src.distribute import oracle_client

    monkeypatch.setenv("KERASTUNER_TUNER_ID", "before")
    monkeypatch.delenv("KERASTUNER_ORACLE_IP", raising=False)
    timeout = oracle_client.TIMEOUT
    address = tuning_cluster.parse_address("[::1]:8470")
    with tuning_cluster.role("3", address, 5.0):
        assert os.environ["KERASTUNER_TUNER_ID"] == "3"
        assert os.environ["KERASTUNER_ORACLE_IP"] == "[::1]"
        assert os.environ["KERASTUNER_ORACLE_PORT"] == "8470"
        assert oracle_client.TIMEOUT == 5.0
    assert os.environ["KERASTUNER_TUNER_ID"] == "before"
    assert "KERASTUNER_ORACLE_IP" not in os.environ
    assert oracle_client.TIMEOUT == timeout


def test_the_commands_of_the_distributed_guide_are_valid(monkeypatch):
    """docs/guides/distributed.md shows them as text (they run at the same time)."""
    import shlex

    from tests.markdown_examples import ROOT, blocks

    page = (ROOT / "docs" / "guides" / "distributed.md").read_text("utf-8")
    commands = [
        line
        for block in blocks(page, "text")
        for line in block.splitlines()
        if line.startswith("rnnkit tune ")
    ]
    assert any("--chief" in c and "--worker" not in c for c in commands), commands
    assert sum("--worker" in c for c in commands) >= 2, commands
    monkeypatch.chdir(ROOT)
    for command in commands:
        result = invoke(*shlex.split(command)[1:], "--dry-run")
        assert result.exit_code == 0, (command, result.output[-2000:])
        assert "Dry run: the config is valid" in result.output
