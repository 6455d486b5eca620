"""Parallel text for translation: readers, normalisation and tokens.

Two layouts are read:

- tab-separated sentence pairs in the Anki/Tatoeba layout (`English<TAB>Spanish`, an
  optional third attribution column), as a `.txt` file or the `.zip` the TensorFlow
  translation tutorial downloads (`spa-eng/spa.txt` inside);
- parallel plain-text files, one sentence per line, line *i* of one file translating
  line *i* of the other, optionally gzipped (Multi30k ships this way).

Every problem in the input (bad UTF-8, a line without a tab, files of different
lengths, empty sentences) raises `rnnkit.errors.DataError` naming the file and the line.
The vocabularies live in `rnnkit.data.vocabulary` (and stay importable from here).
Only the Python standard library is imported here.
"""

from __future__ import annotations

import gzip
import os
import random
import re
import unicodedata
import warnings
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from rnnkit.data.vocabulary import (
    END,
    END_ID,
    PAD,
    PAD_ID,
    SPECIAL_TOKENS,
    START,
    START_ID,
    UNK,
    UNK_ID,
    SubwordVocabulary,
    Vocabulary,
    count_unknown,
    vocabulary_class,
)
from rnnkit.errors import DataError

__all__ = [
    "ANKI_LOCAL_HINT",
    "ANKI_SPA_ENG_URL",
    "END",
    "END_ID",
    "PAD",
    "PAD_ID",
    "SPECIAL_TOKENS",
    "START",
    "START_ID",
    "UNK",
    "UNK_ID",
    "SubwordVocabulary",
    "TextOptions",
    "Vocabulary",
    "count_unknown",
    "detokenize",
    "normalize",
    "read_parallel_files",
    "read_tab_separated",
    "source_key",
    "split_pairs",
    "tokenize",
    "vocabulary_class",
]


# The TensorFlow tutorial's archive, over https (rnnkit.data.downloads fetches it).
ANKI_SPA_ENG_URL = (
    "https://storage.googleapis.com/download.tensorflow.org/data/spa-eng.zip"
)
# Its local use instead, when the download fails.
ANKI_LOCAL_HINT = (
    "point the recipe at local files instead: --set data.path=PATH/spa-eng.zip (an "
    "Anki/Tatoeba .zip or .txt), or --set data.format=parallel "
    "--set data.path='PATH/corpus_{split}.{lang}.gz'"
)

# Numbers keep their inner separators ("2:30", "1,000"); words keep inner hyphens and
# apostrophes ("t-shirt", "don't"); every other non-space character is its own token.
_TOKEN_PATTERN = re.compile(r"\d+(?:[.,:]\d+)+|\w+(?:[-'’]\w+)*|[^\w\s]")
_NO_SPACE_BEFORE = set(".,!?;:%)]}»”…")
_NO_SPACE_AFTER = set("([{¿¡«“")


@dataclass(frozen=True)
class TextOptions:
    """How raw sentences become tokens.

    Args:
        unicode_form: Unicode normalisation applied first ("NFC", "NFKC", "NFD",
            "NFKD"), so that one character has one encoding. Defaults to "NFKC".
        lowercase: lower-case every sentence. Defaults to True.
        split_punctuation: make each punctuation mark its own token; when False,
            tokens are the whitespace-separated words. Defaults to True.
    """

    unicode_form: str = "NFKC"
    lowercase: bool = True
    split_punctuation: bool = True

    def __post_init__(self) -> None:
        if self.unicode_form not in ("NFC", "NFKC", "NFD", "NFKD"):
            raise ValueError(
                "unicode_form must be one of NFC, NFKC, NFD, NFKD; "
                f"received: {self.unicode_form!r}"
            )


def normalize(text: str, options: TextOptions) -> str:
    """Unicode-normalises, collapses whitespace and optionally lower-cases `text`."""
    text = " ".join(unicodedata.normalize(options.unicode_form, text).split())
    return text.lower() if options.lowercase else text


def tokenize(text: str, options: TextOptions) -> list[str]:
    """Splits a raw sentence into tokens after `normalize`."""
    text = normalize(text, options)
    if options.split_punctuation:
        return _TOKEN_PATTERN.findall(text)
    return text.split()


def detokenize(tokens: Sequence[str]) -> str:
    """Joins tokens into a sentence, undoing punctuation splitting.

    No space goes before closing punctuation (". , ! ? ) ...") or after opening
    punctuation ("( ¿ ¡ ..."); straight double quotes alternate between opening and
    closing. This is the text BLEU is computed on.
    """
    pieces: list[str] = []
    glue_next = True
    quote_open = False
    for token in tokens:
        if token == '"':
            quote_open = not quote_open
            glue = not quote_open
            pieces.append(token if glue or glue_next else " " + token)
            glue_next = quote_open
            continue
        glue = glue_next or token in _NO_SPACE_BEFORE
        pieces.append(token if glue else " " + token)
        glue_next = token in _NO_SPACE_AFTER
    return "".join(pieces)


def _read_text(path: Path, data: bytes | None = None) -> list[str]:
    """Lines of a UTF-8 file (gzip when the name ends in .gz), newlines removed."""
    if data is None:
        try:
            opener = gzip.open if path.suffix == ".gz" else open
            with opener(path, "rb") as handle:
                data = handle.read()
        except FileNotFoundError:
            raise DataError(f"{path}: no such file") from None
        except (OSError, EOFError) as error:
            raise DataError(f"{path}: cannot be read ({error})") from None
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        line = data[: error.start].count(b"\n") + 1
        raise DataError(
            f"{path}: line {line} is not valid UTF-8 (byte {error.start})"
        ) from None
    return text.splitlines()


def _drop_empty(
    pairs: list[tuple[str, str]], line_numbers: list[int], where: str, skip: bool
) -> list[tuple[str, str]]:
    empty = [
        n
        for n, (a, b) in zip(line_numbers, pairs, strict=True)
        if not a.strip() or not b.strip()
    ]
    if not empty:
        return pairs
    message = (
        f"{where}: {len(empty)} pair(s) with an empty sentence, at line(s) "
        f"{', '.join(map(str, empty[:5]))}{' ...' if len(empty) > 5 else ''}"
    )
    if not skip:
        raise DataError(
            message + "; fix the file or set data.skip_empty_lines=true to drop them"
        )
    warnings.warn(message + "; dropped", stacklevel=3)
    return [(a, b) for a, b in pairs if a.strip() and b.strip()]


def read_tab_separated(
    path: str | os.PathLike, skip_empty: bool = False
) -> list[tuple[str, str]]:
    """Reads Anki/Tatoeba pairs: a `.txt` file, or a `.zip` holding exactly one.

    Each line is `first<TAB>second[<TAB>attribution]`; the attribution column of
    newer Anki files is ignored. Inside a zip, `_about.txt` is not a data file.

    Returns:
        (first column, second column) pairs, in file order.
    """
    path = Path(path)
    where = str(path)
    data = None
    if path.suffix == ".zip":
        try:
            with zipfile.ZipFile(path) as archive:
                members = [
                    name
                    for name in archive.namelist()
                    if name.endswith(".txt") and not name.endswith("_about.txt")
                ]
                if len(members) != 1:
                    raise DataError(
                        f"{path}: expected one sentence-pair .txt file in the zip; "
                        f"found {members or 'none'}"
                    )
                data = archive.read(members[0])
                where = f"{path}:{members[0]}"
        except FileNotFoundError:
            raise DataError(f"{path}: no such file") from None
        except zipfile.BadZipFile as error:
            raise DataError(f"{path}: not a valid zip file ({error})") from None
    lines = _read_text(Path(where), data)
    pairs, line_numbers = [], []
    for number, line in enumerate(lines, start=1):
        fields = line.split("\t")
        if len(fields) < 2:
            if not line.strip():
                fields = ["", ""]
            else:
                raise DataError(
                    f"{where}: line {number} has no tab; expected "
                    f"'source<TAB>target' (Anki/Tatoeba layout), got {line[:60]!r}"
                )
        pairs.append((fields[0], fields[1]))
        line_numbers.append(number)
    if not pairs:
        raise DataError(f"{where}: no sentence pairs")
    return _drop_empty(pairs, line_numbers, where, skip_empty)


def read_parallel_files(
    source_path: str | os.PathLike,
    target_path: str | os.PathLike,
    skip_empty: bool = False,
) -> list[tuple[str, str]]:
    """Reads two aligned plain-text files (optionally .gz) into sentence pairs."""
    source_path, target_path = Path(source_path), Path(target_path)
    source_lines = _read_text(source_path)
    target_lines = _read_text(target_path)
    if len(source_lines) != len(target_lines):
        raise DataError(
            f"misaligned parallel files: {source_path} has {len(source_lines)} lines "
            f"but {target_path} has {len(target_lines)}; line i of one must be the "
            "translation of line i of the other"
        )
    if not source_lines:
        raise DataError(f"{source_path}: no sentences")
    pairs = list(zip(source_lines, target_lines, strict=True))
    where = f"{source_path} / {target_path}"
    return _drop_empty(pairs, list(range(1, len(pairs) + 1)), where, skip_empty)


def source_key(sentence: str) -> str:
    """What makes two source sentences the same for splitting: NFKC, spaces, case."""
    return " ".join(unicodedata.normalize("NFKC", sentence).split()).casefold()


def split_pairs(
    pairs: Sequence[tuple[str, str]],
    validation_fraction: float,
    test_fraction: float,
    seed: int,
) -> tuple[list[tuple[str, str]], list[tuple[str, str]], list[tuple[str, str]]]:
    """Splits pairs reproducibly into train, validation and test by source sentence.

    Anki/Tatoeba files hold several translations of one source sentence, so a split of
    the pairs at random would put the same source in training and in testing. Here
    the distinct source sentences (`source_key`: same text after NFKC, whitespace
    and case folding) are shuffled with `seed`, and all pairs of one source go to the
    same split: test first, then validation, each taking whole sources until it
    holds its fraction of the pairs; training gets the rest. No test or validation
    source occurs in training.
    """
    for name, value in (
        ("validation_fraction", validation_fraction),
        ("test_fraction", test_fraction),
    ):
        if not 0.0 < value < 0.5:
            raise ValueError(f"{name} must be in (0, 0.5); received: {value}")
    groups: dict[str, list[int]] = {}
    for index, (source, _) in enumerate(pairs):
        groups.setdefault(source_key(source), []).append(index)
    keys = list(groups)
    random.Random(seed).shuffle(keys)
    wanted = [
        max(1, round(fraction * len(pairs)))
        for fraction in (test_fraction, validation_fraction)
    ]
    parts: list[list[tuple[str, str]]] = [[], [], []]  # test, validation, train
    part = 0
    for key in keys:
        while part < 2 and len(parts[part]) >= wanted[part]:
            part += 1
        parts[part].extend(pairs[i] for i in groups[key])
    test, validation, train = parts
    if not test or not validation or not train:
        raise DataError(
            f"{len(pairs)} pairs ({len(keys)} distinct source sentences) are too few "
            "to split into train, validation and test"
        )
    return train, validation, test
