"""`rnnkit` commands in processes of their own with hard deadlines (distributed
training and search), forked from a preloaded interpreter (tests/preloaded.py).

Every process started here is killed with SIGKILL (its whole process group) when its
`processes` block ends: a process stuck in gRPC must not outlive its test.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests import preloaded


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class Processes:
    """`rnnkit` commands in subprocesses, each writing its output to a file."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.started: list[tuple[subprocess.Popen, Path]] = []

    def start(self, name: str, *args: str) -> subprocess.Popen:
        log = self.folder / f"{name}.log"
        log.write_text("")
        process = preloaded.Popen(
            ["-c", "from rnnkit.cli import main; main()", *args],
            cwd=self.folder,
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"},
            start_new_session=True,
        )
        self.started.append((process, log))
        return process

    def finish(self, process: subprocess.Popen, deadline: float) -> tuple[int, str]:
        """Exit status and output, or a failure once `deadline` (monotonic) passed."""
        log = next(log for started, log in self.started if started is process)
        try:
            status = process.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            pytest.fail(f"{log.name} still running:\n{log.read_text()[-3000:]}")
        return status, log.read_text()

    def kill_all(self) -> None:
        for process, _ in self.started:
            if process.poll() is None:
                process.kill()  # its process group
            process.wait()


@contextlib.contextmanager
def processes(folder: Path) -> Iterator[Processes]:
    started = Processes(folder)
    try:
        yield started
    finally:
        started.kill_all()
