"""Work that several test workers need, done once per test session.

A module- or package-scoped fixture runs once per pytest-xdist worker, and with
`--dist worksteal` a module's tests often land on both workers: its fixture then runs
twice. `made_once(tmp_path_factory, name, make)` runs `make(folder)` once per session
instead: in a folder of the workers' common temporary folder, under a lock file
(fcntl), the first worker that asks makes it and the others wait, then read the
files. What `make` writes is read-only for the tests that share it.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

DONE = ".done"


def shared_root(tmp_path_factory) -> Path:
    """The folder every worker of this session sees: the parent of the workers'
    base temporary folders under xdist, the session's own without it."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


@contextlib.contextmanager
def locked(path: Path) -> Iterator[None]:
    """An exclusive lock on `path` (created if missing) across processes."""
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def made_once(tmp_path_factory, name: str, make: Callable[[Path], None]) -> Path:
    """The folder `make` filled, made by the first worker of the session that asks.
    A `make` that failed is tried again by the next one (its folder is emptied)."""
    root = shared_root(tmp_path_factory)
    folder = root / f"shared-{name}"
    with locked(root / f"shared-{name}.lock"):
        if not (folder / DONE).exists():
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir()
            make(folder)
            (folder / DONE).touch()
    return folder
