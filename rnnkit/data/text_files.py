"""Readers of labelled text: CSV/TSV tables, the aclImdb folder layout, and IMDB
itself (the aclImdb archive, downloaded once by rnnkit.data.downloads).

Each returns texts and raw labels; `rnnkit.data.text.load_text_classification` cleans,
maps and splits them. A file that cannot be read raises `rnnkit.errors.DataError` with
a one-line message that names the file and the fix.
"""

from __future__ import annotations

import csv
import difflib
import gzip
import os
import socket
import urllib.parse
import zlib
from pathlib import Path

import pandas as pd

from rnnkit.errors import DataError

# Class folders of the aclImdb layout that hold no labels.
_UNLABELLED_FOLDERS = frozenset({"unsup"})


_IMDB_HINT = (
    "point data.path at local files instead, e.g. "
    "--set data.path=../shared/data/sentiment/imdb_train.csv.gz "
    "--set data.test_path=../shared/data/sentiment/imdb_test.csv.gz "
    "(a CSV/TSV, optionally gzipped, or an aclImdb folder)"
)


def table_delimiter(path: Path) -> str:
    """The delimiter of a CSV or TSV file, from its name (`.gz` allowed)."""
    suffixes = [suffix.lower() for suffix in path.suffixes]
    if suffixes and suffixes[-1] == ".gz":
        suffixes = suffixes[:-1]
    extension = suffixes[-1] if suffixes else ""
    if extension == ".csv":
        return ","
    if extension in (".tsv", ".tab"):
        return "\t"
    raise DataError(
        f"{path}: cannot tell the table format from the name; expected .csv or .tsv "
        "(optionally .gz), or an aclImdb folder"
    )


def read_table(
    path: str | Path,
    text_column: str = "text",
    label_column: str = "label",
    encoding: str = "utf-8",
) -> tuple[list[str], list[str]]:
    """Reads texts and raw labels (as strings) from a CSV or TSV file.

    CSV files use RFC 4180 quoting; TSV files are read without quote handling, as GLUE
    writes them (SST-2 sentences contain unbalanced quote characters). Values are read
    verbatim: a review that says "NA" stays "NA".
    """
    path = Path(path)
    if not path.is_file():
        raise DataError(f"{path}: no such file")
    delimiter = table_delimiter(path)
    options = dict(
        sep=delimiter,
        encoding=encoding,
        dtype=str,
        keep_default_na=False,
        quoting=csv.QUOTE_NONE if delimiter == "\t" else csv.QUOTE_MINIMAL,
    )
    try:
        columns = list(pd.read_csv(path, nrows=0, **options).columns)
        _check_columns(path, columns, {"text": text_column, "label": label_column})
        table = pd.read_csv(path, usecols=[text_column, label_column], **options)
    except UnicodeDecodeError as error:
        raise _encoding_error(path, error, encoding) from error
    except (EOFError, OSError, zlib.error, gzip.BadGzipFile) as error:
        raise DataError(f"{path}: cannot read the file ({error})") from error
    except pd.errors.ParserError as error:
        detail = str(error).strip().splitlines()[0]
        raise DataError(f"{path}: malformed table ({detail})") from error
    except pd.errors.EmptyDataError as error:
        raise DataError(f"{path}: the file is empty") from error
    return table[text_column].tolist(), table[label_column].tolist()


def read_aclimdb(
    folder: str | Path, split: str, encoding: str = "utf-8"
) -> tuple[list[str], list[str]]:
    """Reads `folder/split/<class>/*.txt` (the aclImdb layout); labels are folder names.

    Files are read in the order of their numeric id (`<id>_<rating>.txt`), so the
    result does not depend on the file system. The unlabelled `unsup` folder is skipped.
    """
    split_folder = Path(folder) / split
    class_folders = sorted(
        child
        for child in split_folder.iterdir()
        if child.is_dir() and child.name not in _UNLABELLED_FOLDERS
    )
    if not class_folders:
        raise DataError(
            f"{split_folder}: no class folders; the aclImdb layout is "
            f"{split}/pos/*.txt and {split}/neg/*.txt"
        )
    texts, labels = [], []
    for class_folder in class_folders:
        files = sorted(class_folder.glob("*.txt"), key=_review_file_order)
        if not files:
            raise DataError(f"{class_folder}: no .txt files")
        for file in files:
            try:
                texts.append(file.read_bytes().decode(encoding))
            except UnicodeDecodeError as error:
                raise _encoding_error(file, error, encoding) from error
            labels.append(class_folder.name)
    return texts, labels


# The Large Movie Review Dataset (Maas et al. 2011), over https, and its SHA-256
# (84,125,825 bytes; the value tensorflow-datasets records for its imdb_reviews).
IMDB_URL = "https://ai.stanford.edu/~amaas/data/sentiment/aclImdb_v1.tar.gz"
IMDB_SHA256 = "c40f74a18d3b61f90feba1e17730e0d38e8b97c05fde7008942e91923d1658fe"
# Offline, a download retries for seconds before it gives up: a failed name lookup of
# its host stops the run at once.
IMDB_CLASSES = ("neg", "pos")  # aclImdb's folders: label 0 negative, 1 positive


def _check_reachable(host: str) -> None:
    try:
        socket.getaddrinfo(host, 443)
    except OSError as error:
        raise DataError(
            f"cannot reach {host} to download IMDB ({error}); {_IMDB_HINT}"
        ) from error


def load_imdb(
    download_dir: str | Path | None = None,
) -> tuple[tuple[list[str], list[int]], tuple[list[str], list[int]]]:
    """Train and test reviews of IMDB (label 0 negative, 1 positive), in the order of
    `read_aclimdb`.

    Downloads the aclImdb archive (about 80 MB, its hash checked) into `download_dir`
    (default: rnnkit's data folder, `$RNNKIT_DATA_DIR`) on first use and extracts its
    labelled reviews beside it; later calls read the extracted folder. Offline, a
    one-line `DataError` says how to use local files instead.
    """
    from rnnkit.data import downloads

    folder = Path(download_dir) if download_dir else downloads.default_cache_dir()
    extracted = folder / "aclImdb"
    if not (extracted / "test").is_dir():
        archive = folder / IMDB_URL.rsplit("/", 1)[-1]
        host = urllib.parse.urlsplit(IMDB_URL).hostname  # None: a local file:// URI
        if not archive.exists() and host:
            _check_reachable(host)
        archive = downloads.download(
            IMDB_URL, folder, file_hash=IMDB_SHA256, local_hint=_IMDB_HINT
        )
        _extract_labelled_reviews(archive, extracted)
    splits = []
    for split in ("train", "test"):
        texts, names = read_aclimdb(extracted, split)
        splits.append((texts, [IMDB_CLASSES.index(name) for name in names]))
    return splits[0], splits[1]


def _extract_labelled_reviews(archive: Path, destination: Path) -> None:
    """`aclImdb/{train,test}/{pos,neg}/*.txt` of the archive into `destination`
    (written under a temporary name, then renamed: never half there)."""
    import re
    import shutil
    import tarfile

    labelled = re.compile(r"^aclImdb/(train|test)/(pos|neg)/[^/]+\.txt$")
    temporary = destination.with_name(f".{destination.name}.tmp-{os.getpid()}")
    shutil.rmtree(temporary, ignore_errors=True)
    try:
        with tarfile.open(archive) as tar:
            for member in tar:
                match = labelled.match(member.name)
                if not (member.isfile() and match):
                    continue
                target = temporary.joinpath(*member.name.split("/")[1:])
                target.parent.mkdir(parents=True, exist_ok=True)
                source = tar.extractfile(member)
                target.write_bytes(source.read())
        if not (temporary / "test").is_dir():
            raise DataError(
                f"{archive} holds no aclImdb/train and aclImdb/test reviews; delete "
                "it and run again to download it afresh"
            )
        os.replace(temporary, destination)
    except (tarfile.TarError, EOFError, OSError) as error:
        raise DataError(
            f"{archive} is damaged ({error}); delete it and run again to download it "
            "afresh"
        ) from None
    finally:
        shutil.rmtree(temporary, ignore_errors=True)


def _check_columns(path: Path, columns: list[str], wanted: dict[str, str]) -> None:
    for role, column in wanted.items():
        if column not in columns:
            close = difflib.get_close_matches(column, columns, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise DataError(
                f"{path}: no {role} column {column!r}{hint}; the columns are "
                f"{columns}: set data.{role}_column"
            )


def _encoding_error(path: Path, error: UnicodeDecodeError, encoding: str) -> Exception:
    return DataError(
        f"{path}: not valid {encoding} text (byte {error.object[error.start]:#04x} "
        "cannot be decoded); set data.encoding to the file's encoding, e.g. latin-1"
    )


def _review_file_order(file: Path) -> tuple[int, str]:
    number = file.stem.split("_", 1)[0]
    return (int(number), file.name) if number.isdigit() else (-1, file.name)
