"""Tests for rnnkit.data.parallel_text: readers, tokens, download."""

import gzip
import zipfile
from pathlib import Path

import pytest

from rnnkit.data import parallel_text as pt
from rnnkit.errors import DataError
from tests.shared_data import SHARED_DATA, require

SHARED = SHARED_DATA / "translation"
ANKI_LINES = "Go.\tVe.\nI'm hungry!\t¡Tengo hambre!\nWhere is it?\t¿Dónde está?\n"


def write_anki_zip(path: Path, text: str = ANKI_LINES) -> Path:
    """A zip in the layout of the tutorial's spa-eng.zip."""
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("spa-eng/", "")
        archive.writestr("spa-eng/spa.txt", text.encode("utf-8"))
        archive.writestr("spa-eng/_about.txt", "Terms of use.\n")
    return path


def test_tokenize_splits_punctuation_and_keeps_words_whole():
    options = pt.TextOptions()
    assert pt.tokenize("Two young, White males  outside.", options) == [
        "two", "young", ",", "white", "males", "outside", ".",
    ]  # fmt: skip
    assert pt.tokenize("¿Dónde está? A las 2:30.", options) == [
        "¿", "dónde", "está", "?", "a", "las", "2:30", ".",
    ]  # fmt: skip
    assert pt.tokenize("Don't wear a T-shirt", options) == [
        "don't", "wear", "a", "t-shirt",
    ]  # fmt: skip


def test_tokenize_options():
    cased = pt.TextOptions(lowercase=False, split_punctuation=False)
    assert pt.tokenize("Hello, World!", cased) == ["Hello,", "World!"]
    # NFKC folds compatibility characters: the ligature "ﬁ" and a full-width "Ａ".
    assert pt.tokenize("ﬁne Ａ", pt.TextOptions()) == ["fine", "a"]
    # NFC keeps them, but composes "e" + combining acute into one character.
    assert pt.tokenize("cafe\u0301", pt.TextOptions(unicode_form="NFC")) == ["café"]
    with pytest.raises(ValueError, match="unicode_form"):
        pt.TextOptions(unicode_form="NFX")


@pytest.mark.parametrize(
    "sentence",
    [
        "two young, white males are outside near many bushes.",
        "¿dónde está el baño? es a las 2:30.",
        'he said "hello, there" (loudly)!',
        "¡tengo hambre!",
    ],
)
def test_detokenize_inverts_tokenize(sentence):
    assert pt.detokenize(pt.tokenize(sentence, pt.TextOptions())) == sentence


def test_read_tab_separated_txt_and_zip(tmp_path):
    text_file = tmp_path / "spa.txt"
    text_file.write_text(ANKI_LINES + "Hi.\tHola.\tCC-BY 2.0 (France) Attribution\n")
    pairs = pt.read_tab_separated(text_file)
    assert pairs[0] == ("Go.", "Ve.") and pairs[-1] == ("Hi.", "Hola.")
    zipped = pt.read_tab_separated(write_anki_zip(tmp_path / "spa-eng.zip"))
    assert zipped == pairs[:3]


def test_read_tab_separated_errors(tmp_path):
    no_tab = tmp_path / "bad.txt"
    no_tab.write_text("Go.\tVe.\nno tab here\n")
    with pytest.raises(DataError, match=r"bad.txt: line 2 has no tab"):
        pt.read_tab_separated(no_tab)
    empty = tmp_path / "empty.txt"
    empty.write_text("Go.\tVe.\n\nHi.\t\n")
    with pytest.raises(DataError, match=r"2 pair\(s\) with an empty sentence.*2, 3"):
        pt.read_tab_separated(empty)
    with pytest.warns(UserWarning, match="dropped"):
        assert pt.read_tab_separated(empty, skip_empty=True) == [("Go.", "Ve.")]
    latin1 = tmp_path / "latin1.txt"
    latin1.write_bytes("Go.\tVe.\nNo.\tNiño.\n".encode("latin-1"))
    with pytest.raises(DataError, match="line 2 is not valid UTF-8"):
        pt.read_tab_separated(latin1)
    with pytest.raises(DataError, match="no such file"):
        pt.read_tab_separated(tmp_path / "missing.zip")
    (tmp_path / "broken.zip").write_bytes(b"not a zip")
    with pytest.raises(DataError, match="not a valid zip"):
        pt.read_tab_separated(tmp_path / "broken.zip")


def test_read_parallel_files_gzip_and_misalignment(tmp_path):
    with gzip.open(tmp_path / "c_train.de.gz", "wt") as handle:
        handle.write("Ein Hund.\nZwei Katzen.\n")
    (tmp_path / "c_train.en").write_text("A dog.\nTwo cats.\n")
    pairs = pt.read_parallel_files(tmp_path / "c_train.de.gz", tmp_path / "c_train.en")
    assert pairs == [("Ein Hund.", "A dog."), ("Zwei Katzen.", "Two cats.")]
    (tmp_path / "short.en").write_text("A dog.\n")
    with pytest.raises(DataError, match="misaligned.*has 2 lines.*short.en has 1"):
        pt.read_parallel_files(tmp_path / "c_train.de.gz", tmp_path / "short.en")
    (tmp_path / "hole.en").write_text("A dog.\n \n")
    with pytest.raises(DataError, match="empty sentence, at line.*2"):
        pt.read_parallel_files(tmp_path / "c_train.de.gz", tmp_path / "hole.en")


def test_real_corpora():
    require(SHARED)
    multi30k = pt.read_parallel_files(
        SHARED / "multi30k_val.de.gz", SHARED / "multi30k_val.en.gz"
    )
    assert len(multi30k) == 1014
    anki = pt.read_tab_separated(SHARED / "spa-eng.zip")
    assert len(anki) == 118964 and anki[0] == ("Go.", "Ve.")


def test_split_pairs_is_reproducible_and_disjoint():
    pairs = [(str(i), str(i)) for i in range(100)]
    train, validation, test = pt.split_pairs(pairs, 0.1, 0.02, seed=3)
    assert (len(train), len(validation), len(test)) == (88, 10, 2)
    assert sorted(train + validation + test) == sorted(pairs)
    assert pt.split_pairs(pairs, 0.1, 0.02, seed=3)[2] == test
    with pytest.raises(DataError, match="too few"):
        pt.split_pairs(pairs[:2], 0.1, 0.02, seed=3)


def leaked_sources(train, held_out) -> set[str]:
    """Held-out source sentences that also occur (normalised) as training sources."""

    def key(source: str) -> str:
        return " ".join(source.split()).casefold()

    training = {key(source) for source, _ in train}
    return {source for source, _ in held_out if key(source) in training}


def test_split_pairs_keeps_every_source_sentence_in_one_split():
    """Anki files translate one source many times; no held-out source is trained on."""
    path = require(SHARED / "spa-eng.zip")
    pairs = pt.read_tab_separated(path)[:20000]
    # The slice is one where a split of the pairs at random leaks: it has many
    # sources with several translations ("Go." -> "Ve.", "Vete.", "Vaya." ...).
    order = list(range(len(pairs)))
    __import__("random").Random(0).shuffle(order)
    shuffled = [pairs[i] for i in order]
    assert len(leaked_sources(shuffled[1400:], shuffled[:400])) > 50

    train, validation, test = pt.split_pairs(pairs, 0.05, 0.02, seed=0)
    assert sorted(train + validation + test) == sorted(pairs)
    assert leaked_sources(train, test) == set()
    assert leaked_sources(train, validation) == set()
    assert leaked_sources(validation, test) == set()
    # The fractions are still fractions of the pairs.
    assert abs(len(test) - 400) < 20 and abs(len(validation) - 1000) < 20
    assert pt.split_pairs(pairs, 0.05, 0.02, seed=0)[2] == test
    assert pt.split_pairs(pairs, 0.05, 0.02, seed=1)[2] != test


def test_split_pairs_groups_sources_that_differ_only_in_case_and_spaces():
    pairs = [("Go.", "Ve."), ("go. ", "Vete."), ("GO.", "Vaya.")] + [
        (f"Sentence {i}.", f"Frase {i}.") for i in range(40)
    ]
    for seed in range(10):
        train, validation, test = pt.split_pairs(pairs, 0.1, 0.1, seed=seed)
        for part in (train, validation, test):
            assert len([s for s, _ in part if s.strip().lower() == "go."]) in (0, 3)
