"""The export folder, written whole or not at all.

Every export is one folder (the SavedModel itself, or the LiteRT / ONNX files) with
`export.json` and the vocabulary files beside the artefacts. It is built under a
temporary name in the same parent folder and renamed into place when complete, so a
full disk or a failed conversion leaves nothing under the final name; an existing
output is replaced only with `force`, and then only once the new folder is complete.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

from rnnkit.export.errors import ExportError


def check_output(output: Path, force: bool) -> None:
    """Refuses an existing output path unless `force` (checked before any work)."""
    if output.exists() and not force:
        raise ExportError(
            f"{output} already exists; choose another --output, or replace it with "
            "--force"
        )
    if output.exists() and not output.is_dir():
        raise ExportError(
            f"{output} is a file; an export is a folder: choose another --output"
        )


def write_bytes(path: Path, data: bytes) -> None:
    """Writes one file of the export (inside its temporary folder)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)


def write_file(folder: Path, name: str, content: str | bytes) -> Path:
    path = folder / name
    write_bytes(path, content.encode("utf-8") if isinstance(content, str) else content)
    return path


@contextlib.contextmanager
def export_folder(output: Path, force: bool) -> Iterator[Path]:
    """Yields a temporary folder beside `output`; renames it to `output` when the
    block ends without error, removes it otherwise.

    An `OSError` inside the block (a full disk, a folder without write permission)
    becomes one `ExportError` line that says nothing was written.
    """
    check_output(output, force)
    parent = output.parent
    try:
        parent.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise ExportError(_os_message(error, output)) from None
    temporary = parent / f".{output.name}.tmp-{os.getpid()}"
    shutil.rmtree(temporary, ignore_errors=True)
    try:
        temporary.mkdir()
        yield temporary
        _replace(temporary, output, force)
    except OSError as error:
        raise ExportError(_os_message(error, output)) from None
    finally:
        shutil.rmtree(temporary, ignore_errors=True)


def _replace(temporary: Path, output: Path, force: bool) -> None:
    """Moves the finished folder into place; an old export goes only afterwards."""
    check_output(output, force)  # another process may have written it meanwhile
    old = None
    if output.exists():
        old = output.parent / f".{output.name}.old-{os.getpid()}"
        shutil.rmtree(old, ignore_errors=True)
        os.replace(output, old)
    try:
        os.replace(temporary, output)
    except OSError:
        if old is not None:
            os.replace(old, output)  # put the previous export back
        raise
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def _os_message(error: OSError, output: Path) -> str:
    if error.errno == errno.ENOSPC:
        reason = "no space left on the device"
    else:
        reason = error.strerror or str(error)
    return (
        f"could not write {output} ({reason}); nothing was written: free some space "
        "or choose another --output"
    )
