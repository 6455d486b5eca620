"""rnnkit.data.text: readers, cleanup, label mapping and splits, on real reviews."""

from __future__ import annotations

import numpy as np
import pytest

from rnnkit.data import text, text_files
from rnnkit.errors import DataError
from tests.sentiment_support import (
    imdb_sample,
    serve_imdb_archive,
    write_aclimdb_folder,
    write_imdb_csv,
)


def test_clean_text_removes_html_remnants():
    raw = "Great film.<br /><br />Loved it &amp; the <i>score</i>!\n  Ten/10"
    assert text.clean_text(raw) == "Great film. Loved it & the score ! Ten/10"


def test_clean_text_is_the_regular_expressions_on_real_reviews():
    """The fast path (checks, `str.split`) gives what the definition gives: tags to
    a space, entities unescaped, every run of Unicode whitespace to one space."""
    import html
    import re

    def definition(raw: str) -> str:
        unescaped = html.unescape(re.sub(text.HTML_TAG_PATTERN, " ", raw))
        return re.sub(r"\s+", " ", unescaped).strip()

    reviews = list(imdb_sample("train", 400)["text"])
    odd = ["a&nbsp;b\u2003c\x1cd\u200be", " <b>x</b>&lt;i&gt; ", "\t\n", "", "&amp;lt;"]
    for raw in reviews + odd:
        assert text.clean_text(raw) == definition(raw), raw[:80]


@pytest.mark.parametrize(
    ("raw", "class_names", "indices", "names"),
    [
        ([1, 0, 1], (), [1, 0, 1], ("0", "1")),
        (["1.0", "0.0", "1"], (), [1, 0, 1], ("0", "1")),
        (["pos", "neg", "pos"], (), [1, 0, 1], ("neg", "pos")),
        (["Positive", "negative"], (), [1, 0], ("negative", "Positive")),
        (["b", "c", "a"], (), [1, 2, 0], ("a", "b", "c")),
        ([0, 1, 1], ("bad", "good"), [0, 1, 1], ("bad", "good")),
        (["GOOD", "bad"], ("bad", "good"), [1, 0], ("bad", "good")),
        ([3, 1, 2], (), [2, 0, 1], ("1", "2", "3")),
    ],
)
def test_label_mapping(raw, class_names, indices, names):
    mapped, mapped_names, description = text.map_labels(raw, class_names)
    assert mapped.tolist() == indices
    assert mapped_names == names
    assert "->" in description


def test_unknown_and_empty_labels_are_errors():
    with pytest.raises(DataError, match=r"unknown label\(s\) 'meh'"):
        text.map_labels(["good", "meh"], ("bad", "good"))
    with pytest.raises(DataError, match="1 empty label"):
        text.map_labels(["1", float("nan"), "0"])


def test_stratified_split_is_reproducible_disjoint_and_balanced():
    labels = np.array([0] * 60 + [1] * 40)
    first = text.stratified_split(labels, [0.2, 0.1], seed=3)
    again = text.stratified_split(labels, [0.2, 0.1], seed=3)
    other = text.stratified_split(labels, [0.2, 0.1], seed=4)
    assert all(np.array_equal(a, b) for a, b in zip(first, again, strict=True))
    assert not np.array_equal(first[0], other[0])
    assert sorted(np.concatenate(first).tolist()) == list(range(100))
    assert [np.bincount(labels[part]).tolist() for part in first] == [
        [12, 8],
        [6, 4],
        [42, 28],
    ]


def test_load_file_with_test_file(tmp_path):
    train = write_imdb_csv(tmp_path / "train.csv.gz", "train", 50)
    test = write_imdb_csv(tmp_path / "test.csv.gz", "test", 20)
    data = text.load_text_classification(train, test, validation_fraction=0.2, seed=1)
    assert (len(data.train), len(data.validation), len(data.test)) == (80, 20, 40)
    assert data.class_names == ("0", "1")
    assert np.bincount(data.validation.labels).tolist() == [10, 10]
    assert "<br" not in " ".join(data.train.texts)
    assert data.test.texts[0] == text.clean_text(imdb_sample("test", 20)["text"][0])
    assert data.test.labels.tolist() == [1] * 20 + [0] * 20


def test_single_file_is_split_reproducibly(tmp_path):
    path = write_imdb_csv(tmp_path / "reviews.csv", "train", 50)
    first = text.load_text_classification(path, test_fraction=0.2, seed=5)
    again = text.load_text_classification(path, test_fraction=0.2, seed=5)
    assert (len(first.train), len(first.validation), len(first.test)) == (72, 8, 20)
    assert list(first.test.texts) == list(again.test.texts)
    assert not set(first.test.texts) & set(first.train.texts)
    assert any("test split: 20%" in note for note in first.notes)


def test_the_test_split_follows_the_split_seed_not_the_training_seed(tmp_path):
    """Runs with other training seeds (and an evaluation with another one) test on
    the same reviews, never on ones another seed trained on; `split_seed` moves it."""
    path = write_imdb_csv(tmp_path / "reviews.csv", "train", 50)
    first = text.load_text_classification(path, test_fraction=0.2, seed=1)
    other_seed = text.load_text_classification(path, test_fraction=0.2, seed=2)
    assert list(first.test.texts) == list(other_seed.test.texts)
    assert list(first.validation.texts) != list(other_seed.validation.texts)
    moved = text.load_text_classification(path, test_fraction=0.2, seed=1, split_seed=7)
    assert set(moved.test.texts) != set(first.test.texts)
    assert not set(moved.test.texts) & set(moved.train.texts)
    assert any("split seed 7" in note for note in moved.notes)
    # A data.limit sample of a test file is the split seed's too.
    test = write_imdb_csv(tmp_path / "test.csv", "test", 50)
    samples = [
        text.load_text_classification(path, test, limit=30, seed=seed).test.texts
        for seed in (1, 2)
    ]
    assert list(samples[0]) == list(samples[1])


def test_limit_keeps_a_stratified_sample_per_split(tmp_path):
    train = write_imdb_csv(tmp_path / "train.csv", "train", 50)
    test = write_imdb_csv(tmp_path / "test.csv", "test", 50)
    data = text.load_text_classification(train, test, limit=40, seed=0)
    assert len(data.train) + len(data.validation) == 40
    assert np.bincount(data.test.labels).tolist() == [20, 20]


def test_empty_texts_are_dropped_and_reported(tmp_path):
    path = tmp_path / "reviews.csv"
    rows = ["good film,1", "<br /><br />,0", '"  ",1', "bad film,0"]
    path.write_text("\n".join(["text,label", *rows * 5]) + "\n", encoding="utf-8")
    data = text.load_text_classification(path, test_fraction=0.2)
    assert len(data.train) + len(data.validation) + len(data.test) == 10
    assert any("dropped 10 empty training text(s) of 20" in n for n in data.notes)


def test_single_class_is_an_error(tmp_path):
    path = tmp_path / "reviews.csv"
    path.write_text("text,label\n" + "fine film,positive\n" * 20, encoding="utf-8")
    with pytest.raises(DataError, match="single class \\('positive'\\)"):
        text.load_text_classification(path)


def test_aclimdb_folder(tmp_path):
    folder = write_aclimdb_folder(tmp_path / "aclImdb", per_class=10)
    data = text.load_text_classification(folder, validation_fraction=0.2)
    assert data.class_names == ("neg", "pos")
    assert (len(data.train), len(data.validation), len(data.test)) == (16, 4, 20)
    expected = imdb_sample("test", 10)
    # Files are read class by class (neg, pos), each in the order of its numeric id.
    assert list(data.test.texts[10:]) == [
        text.clean_text(review) for review in expected["text"][:10]
    ]
    assert data.test.labels.tolist() == [0] * 10 + [1] * 10


def test_aclimdb_folder_without_test_split_and_bad_layouts(tmp_path):
    folder = write_aclimdb_folder(tmp_path / "aclImdb", per_class=10)
    for review in (folder / "test").rglob("*.txt"):
        review.unlink()
    with pytest.raises(DataError, match="no .txt files"):
        text.load_text_classification(folder)
    with pytest.raises(DataError, match="not a file and not an aclImdb folder"):
        text.load_text_classification(tmp_path)
    bad = folder / "train" / "pos" / "99_9.txt"
    bad.write_bytes(b"caf\xe9")
    with pytest.raises(DataError, match="99_9.txt: not valid utf-8"):
        text.read_aclimdb(folder, "train")


def test_imdb_is_downloaded_once_checked_and_read(tmp_path, monkeypatch):
    """The default source, served from a local archive: downloaded, its hash checked,
    its labelled reviews extracted (not `unsup`), then read from the folder."""
    archive = serve_imdb_archive(tmp_path, monkeypatch)
    data = text.load_text_classification(validation_fraction=0.5)
    assert data.class_names == ("negative", "positive")
    assert data.source == "IMDB (aclImdb_v1, Maas et al. 2011)"
    assert len(data.train) + len(data.validation) == len(data.test) == 6
    extracted = tmp_path / "data" / "aclImdb"
    assert sorted(p.name for p in (extracted / "train").iterdir()) == ["neg", "pos"]
    archive.unlink()  # the second time reads the extracted folder
    again = text.load_text_classification(validation_fraction=0.5)
    assert list(again.test.texts) == list(data.test.texts)


def test_imdb_with_the_wrong_hash_is_refused(tmp_path, monkeypatch):
    serve_imdb_archive(tmp_path, monkeypatch)
    monkeypatch.setattr(text_files, "IMDB_SHA256", "0" * 64)
    with pytest.raises(DataError, match="could not download"):
        text.load_text_classification()
    assert not (tmp_path / "data" / "aclImdb").exists()


def test_test_path_needs_a_table(tmp_path):
    with pytest.raises(DataError, match="data.test_path needs data.path"):
        text.load_text_classification(None, tmp_path / "test.csv")


def test_imdb_offline_fails_fast_before_downloading(tmp_path, monkeypatch):
    """Offline and not yet downloaded: one name lookup fails, no download is tried."""
    monkeypatch.setenv("RNNKIT_DATA_DIR", str(tmp_path / "data"))

    def no_network(host, port, *args, **kwargs):
        raise OSError(f"[Errno -2] Name or service not known: {host}")

    monkeypatch.setattr(text_files.socket, "getaddrinfo", no_network)
    with pytest.raises(DataError) as caught:
        text.load_text_classification()
    assert not (tmp_path / "data" / "aclImdb_v1.tar.gz").exists()
    message = str(caught.value)
    assert "cannot reach ai.stanford.edu" in message and "\n" not in message
    assert "--set data.path=../shared/data/sentiment/imdb_train.csv.gz" in message


def test_read_inputs_takes_files_and_texts_even_long_ones(tmp_path):
    from rnnkit.data.text import read_inputs

    file = tmp_path / "texts.txt"
    file.write_text("first line\n\n  second line  \n", "utf-8")
    long_review = "a very long review " * 40  # longer than a file name may be
    texts = read_inputs([str(file), long_review, "  "], "nothing")
    assert texts == ["first line", "second line", long_review.strip()]
    with pytest.raises(DataError, match="nothing to read"):
        read_inputs(["  "], "nothing to read")
