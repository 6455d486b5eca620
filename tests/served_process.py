"""Child processes that serve the tests' requests: one line in, one answer out.

The fresh-process checks (reloading a saved model, running an exported artefact)
start the framework in a child process once and send it every request of the test
session, instead of starting a process, and the framework in it, per test. A child
answers each request on a line of its own that starts with its answer prefix, apart
from anything else it prints; a child that dies, or does not answer within
`TIMEOUT_SECONDS`, fails the test with the end of its log.

Used by tests/layers/recurrent_checks.py (tests/layers/reload_child.py) and
tests/export/support.py (tests/export/runtime_child.py).
"""

from __future__ import annotations

import os
import select
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


class ServedProcess:
    """`python -m MODULE ARGS...`, run from the repository root, serving requests."""

    TIMEOUT_SECONDS = 300

    def __init__(
        self,
        name: str,
        module: str,
        *args: str,
        answer: str,
        env: dict[str, str] | None = None,
    ) -> None:
        self.name = name
        self.answer = answer
        self.log = Path(tempfile.mkstemp(prefix=f"{name}_", suffix=".log")[1])
        with open(self.log, "w", encoding="utf-8") as stderr:
            self.process = subprocess.Popen(
                [sys.executable, "-m", module, *args],
                cwd=ROOT,
                env={**os.environ, **(env or {})},
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=stderr,
                text=True,
            )

    def ask(self, request: str) -> str:
        """The child's answer to `request` (one line), without its prefix."""
        self.process.stdin.write(request + "\n")
        self.process.stdin.flush()
        while True:
            ready, _, _ = select.select(
                [self.process.stdout], [], [], self.TIMEOUT_SECONDS
            )
            line = self.process.stdout.readline() if ready else ""
            if not line:
                self.process.kill()
                log = self.log.read_text(encoding="utf-8")[-3000:]
                self.stop()
                raise AssertionError(f"the {self.name} process died or hung: {log}")
            if line.startswith(self.answer):
                return line[len(self.answer) :].strip()

    def alive(self) -> bool:
        return self.process.poll() is None

    def stop(self) -> None:
        """Closes the child's input (it ends its loop), waits, and removes its log."""
        if not self.process.stdin.closed:
            self.process.stdin.close()
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.process.stdout.close()
        self.log.unlink(missing_ok=True)


class ServedProcesses:
    """The running children by key; a dead child is started again when next asked
    for."""

    def __init__(self) -> None:
        self._running: dict[str, ServedProcess] = {}

    def get(self, key: str, start: Callable[[], ServedProcess]) -> ServedProcess:
        child = self._running.get(key)
        if child is None or not child.alive():
            if child is not None:
                child.stop()
            child = self._running[key] = start()
        return child

    def stop_all(self) -> None:
        while self._running:
            _, child = self._running.popitem()
            child.stop()
