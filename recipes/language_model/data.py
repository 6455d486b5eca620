"""Data of the language-model recipe: running text -> tokens -> ids -> windows.

Sources (`data.path`):

- unset: H. G. Wells, "The Time Machine" (public domain; the d2l.ai copy, shipped
  gzipped inside this package), split contiguously.
- a text file (`.txt`, optionally `.gz`), or a folder of `.txt` files read in name
  order, split contiguously: the first part trains, then `data.validation_fraction`
  validates and the last `data.test_fraction` tests (never a shuffled split: the
  text runs on).
- a CSV/TSV table (optionally gzipped): the `data.text_column` of every row, one
  document after another in an order drawn from `data.split_seed`, split contiguously
  (e.g. the IMDB review texts). A table's order may follow something else than the
  text (the IMDB training table holds all its positive reviews, then all its negative
  ones): shuffled first, every split draws from the whole table; the same seed gives
  the same split. The order's seed is not `train.seed`: runs with several seeds, and
  `rnnkit evaluate` with another `train.seed`, test on the same documents, never on
  text a model trained on.
- a pattern with `{split}`, e.g. `../shared/data/language_model/ptb.{split}.txt.gz`:
  one file per split, `{split}` filled with `data.train_split`, `data.validation_split`
  and `data.test_split` (Penn Treebank: train, valid, test).

Levels (`data.level`): "char" keeps every character (line breaks too); "word" splits
lines on whitespace and ends every line with `<eos>` (the Penn Treebank convention of
Mikolov et al. 2010, whose files already hold `<unk>` for rare words). The vocabulary
comes from the training split only; `<unk>` (id 0) stands for anything else. A
trained model is evaluated with the vocabulary saved in it
(`LanguageModelData.with_vocabulary`), never with one learned again from today's data,
whose ids would mean other tokens; data that the saved vocabulary does not fit (read
at another level, casing or cleanup) is refused.

`data.standardize` first cleans raw text as the sentiment classifier does
(`rnnkit.models.TextStandardizer`: HTML tags such as `<br />` and punctuation become
spaces, apostrophes go): without it, web text such as IMDB reviews splits into tokens
like "film." and "/><br", each a word of its own. A language model pre-trained for the
classifier must see the text as the classifier will.
"""

from __future__ import annotations

import collections
import dataclasses
import gzip
import zlib
from collections.abc import Sequence
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from rnnkit.errors import ConfigError, DataError
from rnnkit.recipe import RecipeData

if TYPE_CHECKING:
    from rnnkit_recipes.language_model.config import LanguageModelConfig

UNK = "<unk>"
EOS = "<eos>"
TIME_MACHINE = "timemachine.txt.gz"
_TABLE_SUFFIXES = (".csv", ".tsv", ".tab")


@dataclasses.dataclass
class LanguageModelData(RecipeData):
    """Batched windows for training, and the raw id streams for evaluation.

    `train`/`validation` are `tf.data` datasets of (inputs, targets) windows of
    (batch_size, bptt) ids, in stream order; `test` is the test id stream.
    `train_ids`, `validation_ids` and `test_ids` are the whole splits as 1-D arrays.
    """

    tokens: list[str]
    train_ids: np.ndarray
    validation_ids: np.ndarray
    test_ids: np.ndarray
    source: str
    config: LanguageModelConfig | None = dataclasses.field(
        default=None, repr=False, compare=False
    )

    def with_vocabulary(self, tokens: Sequence[str]) -> LanguageModelData:
        """The same splits encoded with `tokens` (the vocabulary saved in a model):
        this data when it already is, else read again (`load`), or a `DataError`
        when the saved vocabulary does not fit the text."""
        tokens = list(tokens)
        if tokens == self.tokens:
            return self
        if self.config is None:
            raise DataError(
                f"{self.source}: encoded with another vocabulary than the model's"
            )
        return load(self.config, vocabulary=tokens)


# A saved vocabulary fits a text when it leaves at most this share more of the text's
# tokens unknown than a vocabulary learned from the text itself would: a few rare
# tokens, not a text read at another level, casing or cleanup.
MAX_EXTRA_UNKNOWN = 0.01


def load(
    config: LanguageModelConfig, vocabulary: Sequence[str] | None = None
) -> LanguageModelData:
    """Reads, tokenizes, encodes and windows the splits that `config` names.

    The vocabulary is learned from the training split, or is `vocabulary` (a trained
    model's) when given: then a text it does not fit raises `DataError`.
    """
    data = config.data
    texts, source = read_splits(config)
    splits = []
    for text in texts:
        split_tokens = tokenize(text, data.level, data.lowercase, data.standardize)
        if data.reverse:
            # A backward language model: the running text from its last token on.
            split_tokens.reverse()
        splits.append(split_tokens[: data.limit] if data.limit else split_tokens)
    tokens = build_vocabulary(splits[0], data.vocabulary_size, data.min_frequency)
    if vocabulary is not None:
        check_vocabulary_fits(list(vocabulary), tokens, splits, source, data.level)
        tokens = list(vocabulary)
    index = {token: i for i, token in enumerate(tokens)}
    train_ids, validation_ids, test_ids = (encode(split, index) for split in splits)
    batch_size, bptt = config.train.batch_size, config.train.bptt
    for name, split in (("training", train_ids), ("validation", validation_ids)):
        if len(split) <= batch_size * bptt:
            raise DataError(
                f"{source}: the {name} split has {len(split)} tokens, too few for "
                f"one batch of train.batch_size x train.bptt = {batch_size} x {bptt}; "
                "give more text or lower them"
            )
    if len(test_ids) < 2:
        raise DataError(f"{source}: the test split has fewer than 2 tokens")
    return LanguageModelData(
        train=windows(train_ids, config, training=True),
        validation=windows(validation_ids, config, training=False),
        test=test_ids,
        tokens=tokens,
        train_ids=train_ids,
        validation_ids=validation_ids,
        test_ids=test_ids,
        source=source,
        config=config,
    )


def check_vocabulary_fits(
    saved: list[str],
    learned: list[str],
    splits: Sequence[list[str]],
    source: str,
    level: str,
) -> None:
    """Raises `DataError` when the `saved` vocabulary leaves more than
    `MAX_EXTRA_UNKNOWN` more of the tokens of `splits` unknown than the vocabulary
    `learned` from this data does."""

    def unknown_share(vocabulary: list[str]) -> float:
        known = set(vocabulary[1:])  # all but <unk>
        total = sum(len(split) for split in splits)
        missing = sum(token not in known for split in splits for token in split)
        return missing / max(total, 1)

    with_saved, with_learned = unknown_share(saved), unknown_share(learned)
    if with_saved > with_learned + MAX_EXTRA_UNKNOWN:
        raise DataError(
            f"{source}: {with_saved:.1%} of its {level} tokens are unknown to the "
            f"run's vocabulary of {len(saved)} tokens ({with_learned:.1%} to one "
            "learned from this data), so this data needs another vocabulary; read it "
            "as the run did (its data.level, data.lowercase and data.standardize)"
        )


def windows(ids: np.ndarray, config: LanguageModelConfig, training: bool):
    """A `tf.data` dataset of (inputs, targets) batches of (batch_size, bptt) ids.

    Truncated BPTT ("truncated", an RNN): batch w holds window w of every stream, in
    order, never shuffled. Independent windows ("independent", and always for the
    Transformer): the same windows, shuffled for training with `train.seed`
    (reshuffled every epoch) when `train.shuffle`.
    """
    import tensorflow as tf
    from rnnkit_recipes.language_model.config import carries_state

    from rnnkit.data.token_stream import stream_windows

    train = config.train
    inputs, targets = stream_windows(ids, train.batch_size, train.bptt)
    dataset = tf.data.Dataset.from_tensor_slices((inputs, targets))
    if training and not carries_state(config) and train.shuffle:
        dataset = dataset.shuffle(len(inputs), seed=train.seed)
    return dataset.batch(train.batch_size, drop_remainder=True).prefetch(2)


# -- Reading -------------------------------------------------------------------------


def read_splits(config: LanguageModelConfig) -> tuple[list[str], str]:
    """The train, validation and test texts, and a description of the source."""
    data = config.data
    if data.path is None:
        text = _read_packaged(TIME_MACHINE)
        return contiguous_split(text, data.validation_fraction, data.test_fraction), (
            "The Time Machine (H. G. Wells, public domain)"
        )
    if "{split}" in data.path:
        names = (data.train_split, data.validation_split, data.test_split)
        texts = []
        for name in names:
            path = Path(data.path.replace("{split}", name))
            if not path.is_file():
                raise DataError(
                    f"{path}: no such file (data.path {data.path!r} with "
                    f"{{split}}={name!r}; set data.train_split, data.validation_split "
                    "and data.test_split to the names of your files)"
                )
            texts.append(read_text(path, data.text_column))
        return texts, data.path
    path = Path(data.path)
    if path.is_dir():
        files = sorted(path.glob("*.txt")) + sorted(path.glob("*.txt.gz"))
        if not files:
            raise DataError(f"{path}: the folder holds no .txt or .txt.gz files")
        text = "\n".join(read_text(file, data.text_column) for file in sorted(files))
    elif path.is_file():
        documents = read_documents(path, data.text_column)
        if documents is None:
            text = read_text(path, data.text_column)
        else:
            text = "\n".join(shuffled(documents, data.split_seed))
    else:
        raise DataError(
            f"{path}: no such file or folder (data.path takes a text file, a folder of "
            ".txt files, a CSV/TSV table or a pattern with {split})"
        )
    return contiguous_split(text, data.validation_fraction, data.test_fraction), str(
        path
    )


def _read_packaged(name: str) -> str:
    resource = resources.files("rnnkit_recipes.language_model").joinpath(name)
    return gzip.decompress(resource.read_bytes()).decode("utf-8")


def read_documents(path: Path, text_column: str = "text") -> list[str] | None:
    """The `text_column` of every row of a CSV/TSV table (optionally gzipped), in
    the table's order; None when `path` is not a table."""
    suffixes = [s.lower() for s in path.suffixes]
    if suffixes and suffixes[-1] == ".gz":
        suffixes = suffixes[:-1]
    if not suffixes or suffixes[-1] not in _TABLE_SUFFIXES:
        return None
    from rnnkit.data.text import read_table

    texts, _ = read_table(path, text_column=text_column, label_column=text_column)
    return list(texts)


def shuffled(documents: list[str], seed: int) -> list[str]:
    """`documents` in an order drawn from `seed`: the same seed, the same order."""
    order = np.random.default_rng(seed).permutation(len(documents))
    return [documents[i] for i in order]


def read_text(path: Path, text_column: str = "text") -> str:
    """The text of a plain-text file (optionally gzipped), or of a table's column
    (its rows in the table's order, one per line)."""
    documents = read_documents(path, text_column)
    if documents is not None:
        return "\n".join(documents)
    try:
        raw = path.read_bytes()
        if raw[:2] == b"\x1f\x8b":
            raw = gzip.decompress(raw)
        return raw.decode("utf-8")
    except (EOFError, OSError, zlib.error, gzip.BadGzipFile) as error:
        raise DataError(f"{path}: cannot read the file ({error})") from error
    except UnicodeDecodeError as error:
        raise DataError(
            f"{path}: not UTF-8 text ({error.reason} at byte {error.start})"
        ) from error


def contiguous_split(
    text: str, validation_fraction: float, test_fraction: float
) -> list[str]:
    """[train, validation, test]: consecutive parts of `text`, cut at line breaks
    where there is one near the cut (so that no word is cut in two)."""
    if validation_fraction + test_fraction >= 1:
        raise ConfigError(
            "data.validation_fraction + data.test_fraction must be below 1, got "
            f"{validation_fraction} + {test_fraction}"
        )
    length = len(text)
    cuts = []
    for fraction in (1 - validation_fraction - test_fraction, 1 - test_fraction):
        cut = int(length * fraction)
        line_break = text.rfind("\n", 0, cut)
        cuts.append(line_break + 1 if line_break > cut - 1000 else cut)
    return [text[: cuts[0]], text[cuts[0] : cuts[1]], text[cuts[1] :]]


# -- Tokens and ids --------------------------------------------------------------------


def tokenize(
    text: str, level: str, lowercase: bool, standardize: bool = False
) -> list[str]:
    """Characters, or whitespace-separated words with `<eos>` ending every line.

    `standardize`: clean every line first as the sentiment classifier does (HTML tags
    and punctuation to spaces, apostrophes dropped; `TextStandardizer`).
    """
    if standardize:
        text = standardize_text(text, lowercase)
    elif lowercase:
        text = text.lower()
    if level == "char":
        return list(text)
    tokens: list[str] = []
    for line in text.splitlines():
        words = line.split()
        if words:
            tokens.extend(words)
            tokens.append(EOS)
    return tokens


def standardize_text(text: str, lowercase: bool) -> str:
    """`text` line by line through the classifier's `TextStandardizer`."""
    import tensorflow as tf

    from rnnkit.models.text_standardizer import TextStandardizer

    standardizer = TextStandardizer(lowercase=lowercase)
    lines = text.split("\n")
    cleaned: list[str] = []
    for start in range(0, len(lines), 10_000):  # bounded tensors for long texts
        chunk = standardizer(tf.constant(lines[start : start + 10_000]))
        cleaned.extend(line.decode("utf-8") for line in chunk.numpy())
    return "\n".join(cleaned)


def build_vocabulary(
    tokens: list[str], vocabulary_size: int, min_frequency: int
) -> list[str]:
    """`<unk>` first, then the training tokens by falling frequency (ties by first
    appearance), at most `vocabulary_size` in all (0: no limit)."""
    counts = collections.Counter(tokens)
    ordered = sorted(counts, key=lambda token: -counts[token])
    kept = [t for t in ordered if counts[t] >= min_frequency and t != UNK]
    if vocabulary_size:
        kept = kept[: vocabulary_size - 1]
    return [UNK, *kept]


def encode(tokens: list[str], index: dict[str, int]) -> np.ndarray:
    return np.fromiter((index.get(t, 0) for t in tokens), "int32", len(tokens))
