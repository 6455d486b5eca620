"""rnnkit.data.text_files: tables, read verbatim, with one-line errors."""

from __future__ import annotations

import gzip

import pytest

from rnnkit.data import text_files
from rnnkit.errors import DataError
from tests.sentiment_support import imdb_sample, write_imdb_csv


def test_read_gzipped_csv_with_configurable_columns(tmp_path):
    path = write_imdb_csv(tmp_path / "reviews.csv.gz", "train", 5)
    texts, labels = text_files.read_table(
        path, text_column="text", label_column="rating"
    )
    sample = imdb_sample("train", 5)
    assert texts == sample["text"].tolist()
    assert labels == sample["rating"].astype(str).tolist()


def test_read_tsv_keeps_quote_characters(tmp_path):
    # GLUE's SST-2 has unbalanced quotes; a TSV is read without quote handling.
    path = tmp_path / "sst.tsv.gz"
    with gzip.open(path, "wt", encoding="utf-8") as handle:
        handle.write('sentence\tlabel\n" a gripping , funny film\t1\nnot "good\t0\n')
    texts, labels = text_files.read_table(path, text_column="sentence")
    assert texts == ['" a gripping , funny film', 'not "good']
    assert labels == ["1", "0"]


def test_missing_column_names_the_columns_and_the_nearest(tmp_path):
    path = write_imdb_csv(tmp_path / "reviews.csv", "train", 2)
    with pytest.raises(DataError, match=r"no text column 'txt' \(did you mean 'text'"):
        text_files.read_table(path, text_column="txt")


@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        (
            "latin1.csv",
            "text,label\ncaf\xe9 ok,1\n".encode("latin-1"),
            "not valid utf-8",
        ),
        ("empty.csv", b"", "the file is empty"),
        ("broken.csv.gz", b"not gzip at all", "cannot read the file"),
        ("reviews.json", b"{}", "cannot tell the table format"),
    ],
)
def test_bad_files_raise_one_line_data_errors(tmp_path, name, content, message):
    path = tmp_path / name
    path.write_bytes(content)
    with pytest.raises(DataError, match=message) as caught:
        text_files.read_table(path)
    assert "\n" not in str(caught.value)


def test_other_encodings_are_read_when_declared(tmp_path):
    path = tmp_path / "latin1.csv"
    path.write_bytes("text,label\ncaf\xe9 ok,1\n".encode("latin-1"))
    assert text_files.read_table(path, encoding="latin-1") == (["caf\xe9 ok"], ["1"])
