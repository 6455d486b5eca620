"""Child processes that serve the checks' requests: one line in, one answer out.

The fresh-process checks (reloading a saved model, running an exported artefact)
start the framework in a child process once and send it every request of the
process, instead of starting a process, and the framework in it, per check. A child
answers each request on a line of its own that starts with its answer prefix, apart
from anything else it prints; a child that dies, or does not answer within
`TIMEOUT_SECONDS`, fails the test with the end of its log.

Used by `rnnkit.testing`'s reload check (`rnnkit/testing/_reload_child.py`) and by
rnnkit's export tests (tests/export/runtime_child.py). The child finds the modules
this process finds: it starts in `cwd` (default: the current folder) with this
process's `sys.path` on its PYTHONPATH.
"""

from __future__ import annotations

import contextlib
import os
import select
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path


class ServedProcess:
    """`python -m MODULE ARGS...`, run in `cwd`, serving requests."""

    TIMEOUT_SECONDS = 300

    def __init__(
        self,
        name: str,
        module: str,
        *args: str,
        answer: str,
        env: dict[str, str] | None = None,
        cwd: str | os.PathLike | None = None,
    ) -> None:
        self.name = name
        self.answer = answer
        handle, log = tempfile.mkstemp(prefix=f"{name}_", suffix=".log")
        os.close(handle)
        self.log = Path(log)
        with open(self.log, "w", encoding="utf-8") as stderr:
            # Unbuffered bytes: a line read leaves nothing in a Python buffer that
            # select() cannot see, so output before an answer never hides it.
            self.process = subprocess.Popen(
                [sys.executable, "-m", module, *args],
                cwd=cwd or Path.cwd(),
                env={**os.environ, "PYTHONPATH": _search_path(), **(env or {})},
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=stderr,
                bufsize=0,
            )

    def ask(self, request: str) -> str:
        """The child's answer to `request` (one line), without its prefix."""
        try:
            pending = (request + "\n").encode()
            while pending:
                pending = pending[self.process.stdin.write(pending) :]
        except BrokenPipeError:  # the child died before the request
            self._fail()
        while True:
            ready, _, _ = select.select(
                [self.process.stdout], [], [], self.TIMEOUT_SECONDS
            )
            line = self.process.stdout.readline() if ready else b""
            if not line:
                self._fail()
            text = line.decode(errors="replace")
            if text.startswith(self.answer):
                return text[len(self.answer) :].strip()

    def _fail(self):
        self.process.kill()
        log = self.log.read_text(encoding="utf-8", errors="replace")[-3000:]
        self.stop()
        raise AssertionError(f"the {self.name} process died or hung: {log}")

    def alive(self) -> bool:
        return self.process.poll() is None

    def stop(self) -> None:
        """Closes the child's input (it ends its loop), waits, and removes its log."""
        with contextlib.suppress(BrokenPipeError):  # a child that died
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
        """Stops every child, even when stopping one of them fails."""
        children, self._running = list(self._running.values()), {}
        failures = []
        for child in children:
            try:
                child.stop()
            except Exception as failure:  # the others still stop
                failures.append(failure)
        if failures:
            raise failures[0]


def _search_path() -> str:
    """This process's `sys.path` (its folders), for the child's PYTHONPATH."""
    return os.pathsep.join(
        entry for entry in sys.path if entry and Path(entry).is_dir()
    )
