"""Labelled text for classification: readers, cleanup, label mapping and splits.

Three sources, each returning texts and raw labels that `load_text_classification`
cleans, maps to class indices and splits reproducibly:

- IMDB itself (the aclImdb archive, downloaded once when online);
- a CSV or TSV table, optionally gzipped, with configurable text and label columns;
- an aclImdb folder: `train/<class>/*.txt`, optionally `test/<class>/*.txt`.

The readers live in `rnnkit.data.text_files` (and stay importable from here). Every
problem with the input (a missing column, an unknown label, a single class, bytes
that are not in the declared encoding) raises `rnnkit.errors.DataError` with a one-line
message that names the file and the fix, before TensorFlow ever sees the data.
"""

from __future__ import annotations

import html
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from rnnkit.data.text_files import load_imdb, read_aclimdb, read_table
from rnnkit.errors import DataError

# A tag such as `<br />` or `<i>`: IMDB reviews keep the HTML line breaks of the site.
HTML_TAG_PATTERN = r"<[^<>]{0,64}>"
_HTML_TAG = re.compile(HTML_TAG_PATTERN)

# Well-known sentiment label spellings, listed negative first so that negative -> 0.
_ORDERED_LABEL_SETS = (("negative", "positive"), ("neg", "pos"))


@dataclass(frozen=True)
class TextSplit:
    """Texts and their class indices (0 .. num_classes - 1)."""

    texts: np.ndarray
    labels: np.ndarray

    def __len__(self) -> int:
        return len(self.texts)


@dataclass(frozen=True)
class TextClassificationData:
    """Train, validation and test splits with the class names in index order.

    `notes` records what loading did that a person should know about: dropped empty
    texts, how labels were mapped, where the validation split came from.
    """

    train: TextSplit
    validation: TextSplit
    test: TextSplit
    class_names: tuple[str, ...]
    source: str
    notes: tuple[str, ...] = field(default=())

    @property
    def num_classes(self) -> int:
        return len(self.class_names)


def clean_text(text: str) -> str:
    """Removes HTML remnants (tags, entities) and collapses whitespace."""
    # The check skips the regular expression where it cannot match, and `split()`
    # splits where `\s+` matches (str.isspace): the same text at a fraction of the
    # cost over a corpus, which every run of a text recipe cleans whole.
    if "<" in text:
        text = _HTML_TAG.sub(" ", text)
    return " ".join(html.unescape(text).split())


def read_inputs(
    inputs: Sequence[str], nothing_given: str, encoding: str = "utf-8"
) -> list[str]:
    """Texts given on a command line: a path to a file gives one text per non-blank
    line; anything else is a text itself. `nothing_given` is the error when none is.
    """
    texts: list[str] = []
    for item in inputs:
        path = Path(item)
        if _is_file(path):
            try:
                lines = path.read_text(encoding=encoding).splitlines()
            except UnicodeDecodeError as error:
                raise DataError(
                    f"{path}: not valid {encoding} text ({error.reason})"
                ) from error
            texts.extend(line.strip() for line in lines if line.strip())
        elif item.strip():
            texts.append(item.strip())
    if not texts:
        raise DataError(nothing_given)
    return texts


def _is_file(path: Path) -> bool:
    """`path.is_file()`, False for a text too long to be a file name."""
    try:
        return path.is_file()
    except OSError:  # e.g. "File name too long": a review is not a path
        return False


def map_labels(
    raw_labels: Sequence[object], class_names: Sequence[str] = ()
) -> tuple[np.ndarray, tuple[str, ...], str]:
    """Maps raw labels to class indices; returns (indices, class names, description).

    With `class_names`, labels are either the names themselves (case-insensitive) or,
    when the names are not numbers, indices into the list (0, 1, ...). Without,
    integer labels keep their numeric order, negative/positive (or neg/pos) put
    negative first, and other strings are sorted.
    """
    keys = [_label_key(label) for label in raw_labels]
    missing = [row for row, key in enumerate(keys) if key == ""]
    if missing:
        raise DataError(
            f"{len(missing)} empty label(s), the first at example {missing[0] + 1}"
        )
    distinct = sorted(set(keys))
    if class_names:
        names = tuple(str(name) for name in class_names)
        lookup = {name.lower(): index for index, name in enumerate(names)}
        if not all(_is_integer(name) for name in names) and all(
            _is_integer(key) and 0 <= int(key) < len(names) for key in distinct
        ):
            lookup = {str(index): index for index in range(len(names))}
        unknown = [key for key in distinct if key.lower() not in lookup]
        if unknown:
            raise DataError(
                f"unknown label(s) {_preview(unknown)}; the classes are "
                f"{list(names)} (labels may also be their indices 0..{len(names) - 1})"
            )
        indices = np.array([lookup[key.lower()] for key in keys], dtype="int64")
    else:
        names = _infer_class_order(distinct)
        position = {name: index for index, name in enumerate(names)}
        indices = np.array([position[key] for key in keys], dtype="int64")
    key_of = dict(zip(indices.tolist(), keys, strict=True))
    description = "labels " + ", ".join(
        f"{key_of[index]!r} -> {index}"
        + (f" ({name})" if name != key_of[index] else "")
        for index, name in enumerate(names)
        if index in key_of
    )
    return indices, names, description


def stratified_split(
    labels: np.ndarray, fractions: Sequence[float], seed: int
) -> list[np.ndarray]:
    """Splits example indices into len(fractions) + 1 parts, class by class.

    Part k gets `fractions[k]` of every class (rounded, at least one example when the
    fraction is positive); the last part gets the rest. The same labels and seed give
    the same parts on every machine. Each part's indices are sorted.
    """
    rng = np.random.default_rng(seed)
    parts: list[list[np.ndarray]] = [[] for _ in range(len(fractions) + 1)]
    for label in np.unique(labels):
        members = rng.permutation(np.flatnonzero(labels == label))
        start = 0
        for part, fraction in zip(parts, fractions, strict=False):
            size = max(1, round(fraction * len(members))) if fraction > 0 else 0
            part.append(members[start : start + size])
            start += size
        if start >= len(members):
            raise DataError(
                f"class {label} has only {len(members)} example(s): too few to split "
                f"into fractions {list(fractions)} with some left for training"
            )
        parts[-1].append(members[start:])
    return [np.sort(np.concatenate(part)) for part in parts]


def stratified_sample(labels: np.ndarray, size: int, seed: int) -> np.ndarray:
    """Sorted indices of a class-balanced reproducible sample of at most `size`."""
    if size <= 0 or size >= len(labels):
        return np.arange(len(labels))
    return stratified_split(labels, [size / len(labels)], seed)[0]


def load_text_classification(
    path: str | Path | None = None,
    test_path: str | Path | None = None,
    *,
    text_column: str = "text",
    label_column: str = "label",
    class_names: Sequence[str] = (),
    encoding: str = "utf-8",
    validation_fraction: float = 0.1,
    test_fraction: float = 0.1,
    limit: int = 0,
    seed: int = 0,
    download_dir: str | None = None,
    split_seed: int = 0,
) -> TextClassificationData:
    """Loads, cleans, maps and splits labelled text from the source `path` names.

    - `path` None: IMDB, downloaded once into `download_dir` (default: rnnkit's data
      folder) with its own train/test split (`rnnkit.data.text_files.load_imdb`).
    - `path` a folder: the aclImdb layout; `test/` is the test split when present.
    - `path` a file: a CSV/TSV table; the test split is `test_path` when given,
      otherwise `test_fraction` of the file.
    The validation split is always `validation_fraction` of the training data,
    stratified and seeded, so early stopping never sees the test split. `limit` > 0
    keeps a stratified sample of at most that many examples per split before the
    validation split is carved out (for quick trials on large data).

    Two seeds: `split_seed` draws the test split cut from a file and the `limit`
    sample of the test split, `seed` the validation split and the training sample.
    Runs with several training seeds, and an evaluation with another one, so test
    on the same examples, never on ones that another seed trained on.
    """
    if not 0 < validation_fraction < 1 or not 0 <= test_fraction < 1:
        raise DataError(
            "validation_fraction must be in (0, 1) and test_fraction in [0, 1); got "
            f"{validation_fraction} and {test_fraction}"
        )
    if test_path and (path is None or Path(path).is_dir()):
        raise DataError("data.test_path needs data.path to be a CSV or TSV file")
    notes: list[str] = []
    if path is None:
        (train_texts, train_raw), test_part = load_imdb(download_dir)
        source = "IMDB (aclImdb_v1, Maas et al. 2011)"
        class_names = class_names or ("negative", "positive")
    elif Path(path).is_dir():
        train_texts, train_raw = _read_aclimdb_split(path, "train", encoding)
        has_test = (Path(path) / "test").is_dir()
        test_part = read_aclimdb(path, "test", encoding) if has_test else None
        source = f"aclImdb folder {path}"
    else:
        columns = dict(text_column=text_column, label_column=label_column)
        train_texts, train_raw = read_table(path, encoding=encoding, **columns)
        test_part = (
            read_table(test_path, encoding=encoding, **columns) if test_path else None
        )
        source = str(path) + (f" (test: {test_path})" if test_path else "")

    train = _labelled_split(train_texts, train_raw, class_names, "training", notes)
    names = train.class_names
    if len(np.unique(train.split.labels)) < 2:
        raise DataError(
            f"the training data has a single class ({names[train.split.labels[0]]!r}); "
            "a classifier needs examples of at least two classes"
        )
    if test_part is None:
        test_index, train_index = stratified_split(
            train.split.labels, [test_fraction], split_seed
        )
        test = _subset(train.split, test_index)
        train_split = _subset(train.split, train_index)
        notes.append(
            f"test split: {test_fraction:.0%} of the data (split seed {split_seed})"
        )
    else:
        test = _labelled_split(*test_part, class_names or names, "test", notes).split
        train_split = train.split
    if limit > 0:
        train_split = _subset(
            train_split, stratified_sample(train_split.labels, limit, seed)
        )
        test = _subset(test, stratified_sample(test.labels, limit, split_seed))
        notes.append(f"data.limit: at most {limit} examples per split")
    validation_index, fit_index = stratified_split(
        train_split.labels, [validation_fraction], seed
    )
    notes.append(
        f"validation split: {validation_fraction:.0%} of the training data "
        f"(seed {seed})"
    )
    return TextClassificationData(
        train=_subset(train_split, fit_index),
        validation=_subset(train_split, validation_index),
        test=test,
        class_names=names,
        source=source,
        notes=tuple(notes),
    )


@dataclass(frozen=True)
class _Labelled:
    split: TextSplit
    class_names: tuple[str, ...]


def _labelled_split(
    texts: Sequence[str],
    raw_labels: Sequence[object],
    class_names: Sequence[str],
    split: str,
    notes: list[str],
) -> _Labelled:
    """Cleans the texts, drops empty ones (noted) and maps the labels."""
    cleaned = [clean_text(text) for text in texts]
    keep = [index for index, text in enumerate(cleaned) if text]
    if not keep:
        raise DataError(f"every {split} text is empty after HTML cleanup")
    if len(keep) < len(cleaned):
        notes.append(
            f"dropped {len(cleaned) - len(keep)} empty {split} text(s) "
            f"of {len(cleaned)}"
        )
    try:
        labels, names, description = map_labels(
            [raw_labels[index] for index in keep], class_names
        )
    except DataError as error:
        raise DataError(f"{split} data: {error}") from error
    notes.append(f"{split} {description}")
    texts_array = np.empty(len(keep), dtype=object)
    texts_array[:] = [cleaned[index] for index in keep]
    return _Labelled(TextSplit(texts_array, labels), names)


def _subset(split: TextSplit, index: np.ndarray) -> TextSplit:
    return TextSplit(split.texts[index], split.labels[index])


def _read_aclimdb_split(
    folder: str | Path, split: str, encoding: str
) -> tuple[list[str], list[str]]:
    if not (Path(folder) / split).is_dir():
        raise DataError(
            f"{folder}: not a file and not an aclImdb folder (no {split}/ inside); "
            "expected train/pos/*.txt, train/neg/*.txt and optionally test/..."
        )
    return read_aclimdb(folder, split, encoding)


def _label_key(label: object) -> str:
    """A canonical string for a raw label: 1, 1.0 and "1" all become "1"."""
    if isinstance(label, bytes):
        label = label.decode("utf-8", errors="replace")
    if isinstance(label, (bool, np.bool_)):
        return str(int(label))
    if isinstance(label, (int, np.integer)):
        return str(int(label))
    if isinstance(label, (float, np.floating)):
        if np.isnan(label):
            return ""
        return str(int(label)) if float(label).is_integer() else str(label)
    key = str(label).strip()
    try:
        number = float(key)
    except ValueError:
        return key
    return str(int(number)) if number.is_integer() else key


def _is_integer(key: str) -> bool:
    return re.fullmatch(r"-?\d+", key) is not None


def _infer_class_order(distinct: list[str]) -> tuple[str, ...]:
    if all(_is_integer(key) for key in distinct):
        return tuple(sorted(distinct, key=int))
    lowered = {key.lower() for key in distinct}
    for ordered in _ORDERED_LABEL_SETS:
        if lowered <= set(ordered):
            by_lower = {key.lower(): key for key in distinct}
            return tuple(by_lower[name] for name in ordered if name in by_lower)
    return tuple(distinct)


def _preview(values: list[str], size: int = 5) -> str:
    shown = ", ".join(repr(value) for value in values[:size])
    return shown + (f" and {len(values) - size} more" if len(values) > size else "")
