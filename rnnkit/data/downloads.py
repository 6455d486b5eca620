"""Downloads of public data sets: once, checked, into the rnnkit data folder.

`download(url)` fetches through `keras.utils.get_file` (a progress bar, the cached copy
reused, a hash checked when one is known: a copy that does not match is fetched
again), tries again after a failed attempt, and checks that an archive opens before
handing it over. A cached archive that is damaged (a truncated zip, an HTML error page
saved under the archive's name) is a one-line `DataError` that names the file to
delete, as is a download that fails (offline: how to use local files instead).

The folder is `$RNNKIT_DATA_DIR`, else `~/.rnnkit/datasets`.
"""

from __future__ import annotations

import hashlib
import logging
import os
import tarfile
import time
import zipfile
from pathlib import Path

from rnnkit.errors import DataError

log = logging.getLogger("rnnkit")

# Attempts of a download before it fails, and the first pause between them (doubled
# each time).
ATTEMPTS = 3
FIRST_PAUSE = 2.0


def default_cache_dir() -> Path:
    """Where downloads are kept: `$RNNKIT_DATA_DIR`, else `~/.rnnkit/datasets`."""
    return Path(os.environ.get("RNNKIT_DATA_DIR", Path.home() / ".rnnkit" / "datasets"))


def check_archive(path: Path) -> None:
    """Raises a one-line `DataError` naming `path` when it is a `.zip` or `.tar.gz`
    (`.tgz`, `.tar`) that does not open as one; other files pass as they are."""
    name = path.name.lower()
    try:
        if name.endswith(".zip"):
            with zipfile.ZipFile(path):
                pass
        elif name.endswith((".tar.gz", ".tgz", ".tar")):
            with tarfile.open(path) as archive:
                archive.next()
        else:
            return
    except (zipfile.BadZipFile, tarfile.TarError, EOFError, OSError) as error:
        raise DataError(
            f"{path} is damaged or not the archive it should be ({error}); delete it "
            "and run again to download it afresh"
        ) from None


def sha256(path: str | os.PathLike) -> str:
    """The SHA-256 of a file, in hex (what `download(file_hash=...)` takes)."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def download(
    url: str,
    cache_dir: str | os.PathLike | None = None,
    *,
    file_hash: str | None = None,
    local_hint: str = "point the recipe at local files with --set data.path=PATH",
    attempts: int = ATTEMPTS,
) -> Path:
    """`url`, downloaded once into `cache_dir`; returns the local path.

    Args:
        url: what to fetch (https, or a `file://` URI).
        cache_dir: default `default_cache_dir()`.
        file_hash: its SHA-256 (or MD5) when known: a cached copy that does not match
            is fetched again, and a download that does not match is an error.
        local_hint: what to do instead when the download fails (the end of the
            error's line).
        attempts: tries before a failed download is an error.

    Raises:
        DataError: the download failed `attempts` times, or the file is a damaged
            archive (the message names the file to delete).
    """
    import keras

    folder = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    name = url.rstrip("/").rsplit("/", 1)[-1]
    folder.mkdir(parents=True, exist_ok=True)
    pause = FIRST_PAUSE
    for attempt in range(1, attempts + 1):
        try:
            fetched = keras.utils.get_file(
                fname=name,
                origin=url,
                file_hash=file_hash,
                cache_dir=str(folder),
                cache_subdir="",
            )
            break
        except Exception as error:  # get_file raises Exception for URL errors
            reason = str(error).strip().splitlines()[0] if str(error) else error
            if attempt == attempts:
                raise DataError(
                    f"could not download {url} ({reason}, {attempts} attempts); "
                    f"offline? {local_hint}"
                ) from None
            log.warning(
                "download of %s failed (%s); trying again in %.0f s", url, reason, pause
            )
            time.sleep(pause)
            pause *= 2
    # A cached copy comes back as it is (fetched again first when it fails a known
    # hash): a damaged archive is named here, whether cached or just downloaded.
    path = Path(fetched)
    check_archive(path)
    return path
