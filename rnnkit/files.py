"""Files written atomically: under a temporary name in the same folder, then renamed.

The floor of rnnkit's layering (see tests/test_layering.py): it imports nothing of
rnnkit, so the runner, the diagnostics, the plots and the layers' speed calibration
can all write their files through it.
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
import math
import numbers
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any


@contextlib.contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """Yields a temporary path next to `path` (same suffix) and renames it on success.

    The suffix is kept because some writers choose the format from it (`.keras`).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.stem}.tmp-{os.getpid()}{path.suffix}")
    try:
        yield temporary
        os.replace(temporary, path)
    finally:
        temporary.unlink(missing_ok=True)


def write_text(path: str | Path, text: str) -> Path:
    """Writes `text` to `path` atomically."""
    with atomic_path(path) as temporary:
        temporary.write_text(text, encoding="utf-8")
    return Path(path)


def write_json(path: str | Path, value: Any) -> Path:
    """Writes `value` as indented JSON atomically (NaN is written as null)."""
    return write_text(path, json.dumps(_json_safe(value), indent=2) + "\n")


def _json_safe(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json_safe(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def write_csv(path: str | Path, rows: list[dict[str, Any]]) -> Path:
    """Writes `rows` as CSV atomically: one column per key, in first-seen order; a
    missing value is empty, whole numbers are written without a decimal point, other
    floats with all their digits (`repr`)."""
    names: list[str] = []
    for row in rows:
        names.extend(name for name in row if name not in names)
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=names, lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({name: _csv_value(row.get(name)) for name in names})
    return write_text(path, buffer.getvalue())


def _csv_value(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        return str(value)
    if float(value).is_integer() and abs(value) < 1e15:
        return str(int(value))
    return repr(float(value))
