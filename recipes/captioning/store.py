"""A content-keyed store of fixed-shape rows on disk: a frozen encoder's annotation
vectors, or the decoded pixels a trainable encoder reads every epoch.

One folder per producer (what made the rows: the encoder, its weights, the image size,
the preprocessing version; see features.py). In it:

- `store.json`: the row shape and dtype;
- shards `<id>.rows`: raw C-order rows, one after another;
- beside each, `<id>.keys`: the content digest of every row, one per line, in order.

- `digests.json`: the content digests of the images hashed so far (features.py).

A shard is written under a temporary name and renamed, then its keys the same way, so a
crash never leaves a row that looks stored (a later `refresh` deletes the temporary
files of writers no longer running). Writers never touch each other's files, so runs
and tuning trials can fill one folder at the same time (at worst two of them compute
the same image). Rows are read with `os.pread`, not memory-mapped: an epoch
reads every row, and mapped pages would count in the process' resident memory.
"""

from __future__ import annotations

import json
import os
import re
import threading
import uuid
import weakref
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from rnnkit.errors import DataError
from rnnkit.files import atomic_path, write_json

ROWS_PER_SHARD = 2048  # the most work a crash can lose, in rows


class RowStore:
    """Rows of one shape and dtype by content digest.

    Args:
        folder: the store's folder (created if needed).
        row_shape: the shape of one row.
        dtype: the dtype rows are stored in.
    """

    def __init__(self, folder: Path, row_shape: Sequence[int], dtype):
        self.folder = Path(folder)
        self.row_shape = tuple(int(n) for n in row_shape)
        self.dtype = np.dtype(dtype)
        self.row_bytes = int(np.prod(self.row_shape)) * self.dtype.itemsize
        self.folder.mkdir(parents=True, exist_ok=True)
        layout = {"row_shape": list(self.row_shape), "dtype": self.dtype.str}
        meta = self.folder / "store.json"
        if not meta.is_file():
            write_json(meta, layout)
        elif json.loads(meta.read_text()) != layout:
            raise DataError(
                f"{self.folder} holds rows of another shape or dtype "
                f"({meta.read_text().strip()}, not {layout}); delete the folder or "
                "choose another data.cache_dir"
            )
        self.shards: list[Path] = []
        self.index: dict[str, tuple[int, int]] = {}
        self._fds: dict[int, int] = {}
        self._lock = threading.Lock()  # tf.data reads from several threads
        weakref.finalize(self, _close, self._fds)
        self.refresh()

    def refresh(self) -> None:
        """Takes in the shards other processes finished since the last look, and
        deletes the temporary files of writers that died (crashed or killed)."""
        known = set(self.shards)
        for keys in sorted(self.folder.glob("*.keys")):
            if keys.name.startswith("."):
                continue  # a temporary, not yet renamed into place
            shard = keys.with_suffix(".rows")
            if shard in known or not shard.is_file():
                continue
            digests = keys.read_text().split()
            if shard.stat().st_size != len(digests) * self.row_bytes:
                continue  # not this store's layout: never read a row from it
            self._add_shard(shard, digests)
        for temporary in self.folder.glob(".*.tmp-*"):
            match = _TEMPORARY.search(temporary.name)
            if match and not _alive(int(match.group(1))):
                temporary.unlink(missing_ok=True)

    def _add_shard(self, shard: Path, digests: list[str]) -> None:
        number = len(self.shards)
        self.shards.append(shard)
        for row, key in enumerate(digests):
            self.index.setdefault(key, (number, row))

    def __contains__(self, key: str) -> bool:
        return key in self.index

    def __len__(self) -> int:
        return len(self.index)

    def locate(self, keys: Sequence[str]) -> np.ndarray:
        """`(n, 2)` int64 (shard, row) of stored keys."""
        located = np.empty((len(keys), 2), np.int64)
        for position, key in enumerate(keys):
            located[position] = self.index[key]
        return located

    def writer(self) -> ShardWriter:
        """A writer of new rows (use it as a context manager)."""
        return ShardWriter(self)

    def read(self, locations: np.ndarray) -> np.ndarray:
        """The rows at `(n, 2)` (shard, row) locations, `(n, *row_shape)`."""
        out = np.empty((len(locations), *self.row_shape), self.dtype)
        if not len(locations):
            return out
        buffer = out.reshape(len(locations), -1).view(np.uint8)
        for position, (shard, row) in enumerate(locations):
            fd = self._fds.get(int(shard))
            if fd is None:
                with self._lock:
                    fd = self._fds.get(int(shard))
                    if fd is None:
                        fd = os.open(self.shards[shard], os.O_RDONLY)
                        self._fds[int(shard)] = fd
            data = os.pread(fd, self.row_bytes, int(row) * self.row_bytes)
            if len(data) != self.row_bytes:
                raise DataError(
                    f"{self.shards[shard]} is shorter than its keys say; delete "
                    f"{self.folder} to compute its rows again"
                )
            buffer[position] = np.frombuffer(data, np.uint8)
        return out


# A writer's temporary file: `.<name>.tmp-<pid>[.suffix]` (ShardWriter, atomic_path).
_TEMPORARY = re.compile(r"\.tmp-(\d+)(\.\w+)?$")


def _alive(pid: int) -> bool:
    """Whether process `pid` runs on this machine (another user's counts)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _close(fds: dict[int, int]) -> None:
    for fd in fds.values():
        os.close(fd)
    fds.clear()


class ShardWriter:
    """Appends rows to new shards of a `RowStore`, `ROWS_PER_SHARD` at most each;
    a shard and its keys become visible when it is full or the writer closes."""

    def __init__(self, store: RowStore):
        self.store = store
        self._file = None
        self._keys: list[str] = []

    def __enter__(self) -> ShardWriter:
        return self

    def __exit__(self, kind, error, traceback) -> None:
        if kind is None:
            self.flush()
        elif self._file is not None:
            self._file.close()
            Path(self._file.name).unlink(missing_ok=True)
            self._file = None

    def add(self, key: str, row: np.ndarray) -> None:
        row = np.ascontiguousarray(row, self.store.dtype)
        if row.shape != self.store.row_shape:
            raise ValueError(f"a row of shape {row.shape}, not {self.store.row_shape}")
        if self._file is None:
            self._name = f"{uuid.uuid4().hex}"
            temporary = self.store.folder / f".{self._name}.rows.tmp-{os.getpid()}"
            self._file = open(temporary, "wb")  # noqa: SIM115 - closed in flush
        self._file.write(row.tobytes())
        self._keys.append(key)
        if len(self._keys) >= ROWS_PER_SHARD:
            self.flush()

    def flush(self) -> None:
        """Publishes the rows written so far as a shard."""
        if self._file is None:
            return
        self._file.flush()
        os.fsync(self._file.fileno())
        self._file.close()
        shard = self.store.folder / f"{self._name}.rows"
        os.replace(self._file.name, shard)
        with atomic_path(shard.with_suffix(".keys")) as temporary:
            temporary.write_text("\n".join(self._keys) + "\n")
        self.store._add_shard(shard, self._keys)
        self._file, self._keys = None, []


class Rows:
    """A split's rows in a `RowStore`, read when indexed: `rows[i]`, `rows[a:b]` and
    `rows[array]` are numpy arrays; `np.asarray(rows)` reads them all."""

    def __init__(self, store: RowStore, locations: np.ndarray):
        self.store = store
        self.locations = np.asarray(locations, np.int64).reshape(-1, 2)

    @property
    def shape(self) -> tuple[int, ...]:
        return (len(self.locations), *self.store.row_shape)

    @property
    def dtype(self) -> np.dtype:
        return self.store.dtype

    def __len__(self) -> int:
        return len(self.locations)

    def __getitem__(self, index):
        if isinstance(index, (int, np.integer)):
            return self.store.read(self.locations[[index]])[0]
        return self.store.read(self.locations[index])

    def __array__(self, dtype=None, copy=None):
        rows = self.store.read(self.locations)
        return rows if dtype is None else rows.astype(dtype)
