"""Readers of labelled text: CSV/TSV tables, the aclImdb folder layout, and IMDB
reviews through tensorflow-datasets.

Each returns texts and raw labels; `rnnkit.data.text.load_text_classification` cleans,
maps and splits them. A file that cannot be read raises `rnnkit.errors.DataError` with
a one-line message that names the file and the fix.
"""

from __future__ import annotations

import csv
import difflib
import gzip
import socket
import zlib
from pathlib import Path

import numpy as np
import pandas as pd

from rnnkit.errors import DataError

# Class folders of the aclImdb layout that hold no labels.
_UNLABELLED_FOLDERS = frozenset({"unsup"})


_TFDS_HINT = (
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


# tensorflow-datasets downloads imdb_reviews from here; offline, its downloader retries
# for minutes before it gives up, so a failed name lookup stops the run at once.
_IMDB_DOWNLOAD_HOST = "ai.stanford.edu"


def _check_reachable(host: str) -> None:
    try:
        socket.getaddrinfo(host, 443)
    except OSError as error:
        raise DataError(
            f"cannot reach {host} to download imdb_reviews ({error}); {_TFDS_HINT}"
        ) from error


def load_tfds_imdb(
    data_dir: str | None = None,
) -> tuple[tuple[list[str], list[int]], tuple[list[str], list[int]]]:
    """Train and test reviews of `imdb_reviews` from tensorflow-datasets (0 = negative).

    Downloads the data set (about 80 MB) on first use. Without a connection, raises a
    one-line `DataError` that says how to use local files instead.
    """
    try:
        import tensorflow_datasets as tfds
    except ImportError as error:
        raise DataError(
            f"tensorflow-datasets is not installed ({error}); {_TFDS_HINT}"
        ) from error
    if not tfds.builder("imdb_reviews", data_dir=data_dir).is_prepared():
        _check_reachable(_IMDB_DOWNLOAD_HOST)
    try:
        train, test = tfds.load(
            "imdb_reviews",
            split=["train", "test"],
            as_supervised=True,
            batch_size=-1,
            data_dir=data_dir,
        )
    except Exception as error:  # noqa: BLE001 - download failures come in many types
        reason = (str(error).strip().splitlines() or [type(error).__name__])[0]
        raise DataError(
            f"cannot load imdb_reviews through tensorflow-datasets ({reason}); "
            f"{_TFDS_HINT}"
        ) from error
    return _decode_tfds_split(tfds.as_numpy(train)), _decode_tfds_split(
        tfds.as_numpy(test)
    )


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


def _decode_tfds_split(arrays: tuple[np.ndarray, np.ndarray]) -> tuple[list, list]:
    texts, labels = arrays
    return [text.decode("utf-8") for text in texts], [int(label) for label in labels]
