"""Data of the translation recipe: sentence pairs -> tokens -> ids -> `tf.data` batches.

Sources (`data.format`):

- "anki": tab-separated pairs (`.txt` or the tutorial's `.zip`); `data.columns` names
  the language of each column. Without `data.path` the English-Spanish pairs are
  downloaded once. The single file is split reproducibly (`data.split_seed`) by
  distinct source sentence, so no held-out source is trained on.
- "parallel": one plain-text file per language and split (optionally gzipped), found
  by filling `{split}` and `{lang}` in `data.path`, e.g.
  `../shared/data/translation/multi30k_{split}.{lang}.gz`.

Vocabularies (SentencePiece BPE pieces, or words with `data.tokenizer=word`) are learned
from the training split only. Training batches group pairs of
similar length (`tf.data.Dataset.bucket_by_sequence_length`), so short sentences are
not padded to the length of long ones.
"""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from rnnkit.data import downloads, parallel_text
from rnnkit.data.parallel_text import TextOptions, Vocabulary
from rnnkit.errors import ConfigError, DataError
from rnnkit.recipe import RecipeData

if TYPE_CHECKING:
    import tensorflow as tf
    from rnnkit_recipes.translation.config import TranslationConfig

log = logging.getLogger("rnnkit")

Pairs = list[tuple[str, str]]


@dataclasses.dataclass
class TranslationData(RecipeData):
    """Batched splits of ({"source", "target_in"}, target_out), and what decoding needs.

    `test_pairs` keeps the raw (source, reference) sentences: BLEU is computed
    against the references as written, not as tokenised. The batched test split
    holds every test pair, however long.
    """

    source_vocabulary: Vocabulary
    target_vocabulary: Vocabulary
    text_options: TextOptions
    test_pairs: Pairs
    source: str


def text_options(config: TranslationConfig) -> TextOptions:
    return TextOptions(
        unicode_form=config.data.unicode_form,
        lowercase=config.data.lowercase,
        split_punctuation=config.data.split_punctuation,
    )


def held_out_by_cut(config: TranslationConfig) -> bool:
    """Whether validation or test pairs are cut from the training pairs (with
    `data.split_seed` and the fractions): always for anki's one file, for parallel
    files when a split's name is left empty."""
    data = config.data
    return data.format == "anki" or not (data.validation_split and data.test_split)


def read_splits(config: TranslationConfig) -> tuple[Pairs, Pairs, Pairs, str]:
    """The (source, target) sentence pairs of train, validation and test."""
    data = config.data
    if data.source_lang == data.target_lang:
        raise ConfigError(
            f"data.source_lang and data.target_lang are both {data.source_lang!r}"
        )
    if data.format == "anki":
        return _read_anki(config)
    if not data.path or "{lang}" not in data.path or "{split}" not in data.path:
        raise ConfigError(
            "data.format=parallel needs data.path with {split} and {lang} in it, e.g. "
            "'../shared/data/translation/multi30k_{split}.{lang}.gz'"
        )
    splits = {}
    for name, split in (
        ("train", data.train_split),
        ("validation", data.validation_split),
        ("test", data.test_split),
    ):
        if not split:
            continue
        source_path, target_path = (
            Path(_filled(data.path, split, lang))
            for lang in (data.source_lang, data.target_lang)
        )
        splits[name] = parallel_text.read_parallel_files(
            source_path, target_path, skip_empty=data.skip_empty_lines
        )
    if "train" not in splits:
        raise ConfigError("data.train_split must name the training files' {split}")
    if held_out_by_cut(config):
        # No validation or test files: cut them from the training pairs.
        train, validation, test = parallel_text.split_pairs(
            splits["train"],
            data.validation_fraction,
            data.test_fraction,
            data.split_seed,
        )
        splits.setdefault("validation", validation)
        splits.setdefault("test", test)
        splits["train"] = train
    description = _filled(data.path, "*", f"{{{data.source_lang},{data.target_lang}}}")
    return splits["train"], splits["validation"], splits["test"], description


def _filled(path: str, split: str, lang: str) -> str:
    """`path` with `{split}` and `{lang}` replaced, the only placeholders: any other
    brace in a folder or file name stays as it is (no `str.format`)."""
    return path.replace("{split}", split).replace("{lang}", lang)


def _read_anki(config: TranslationConfig) -> tuple[Pairs, Pairs, Pairs, str]:
    data = config.data
    if len(data.columns) != 2 or len(set(data.columns)) != 2:
        raise ConfigError(
            f"data.columns must name the two languages of the tab-separated columns, "
            f"e.g. en,es; got {data.columns}"
        )
    for key, lang in (
        ("source_lang", data.source_lang),
        ("target_lang", data.target_lang),
    ):
        if lang not in data.columns:
            raise ConfigError(
                f"data.{key}={lang!r} is not one of data.columns {list(data.columns)}"
            )
    path = (
        Path(data.path)
        if data.path
        else downloads.download(data.url, local_hint=parallel_text.ANKI_LOCAL_HINT)
    )
    pairs = parallel_text.read_tab_separated(path, skip_empty=data.skip_empty_lines)
    if data.columns.index(data.source_lang) == 1:
        pairs = [(second, first) for first, second in pairs]
    train, validation, test = parallel_text.split_pairs(
        pairs, data.validation_fraction, data.test_fraction, data.split_seed
    )
    return train, validation, test, f"{path} ({data.source_lang}->{data.target_lang})"


def load(config: TranslationConfig) -> TranslationData:
    """Reads, tokenises and batches the data as `config` says."""
    data = config.data
    train, validation, test, description = read_splits(config)
    if data.limit > 0:
        train, validation, test = (
            split[: data.limit] for split in (train, validation, test)
        )
    options = text_options(config)

    def tokens(pairs: Pairs) -> tuple[list[list[str]], list[list[str]]]:
        return (
            [parallel_text.tokenize(s, options) for s, _ in pairs],
            [parallel_text.tokenize(t, options) for _, t in pairs],
        )

    train_tokens = _short_enough(tokens(train), data.max_length, "training")
    validation_tokens = _short_enough(tokens(validation), data.max_length, "validation")
    kind = parallel_text.vocabulary_class(data.tokenizer)
    if data.tokenizer == "subword":
        max_size = data.subword_vocabulary_size
    else:
        max_size = data.vocabulary_size or None
    # Trained on the training split only.
    source_vocabulary = kind.build(train_tokens[0], max_size, data.min_frequency)
    target_vocabulary = kind.build(train_tokens[1], max_size, data.min_frequency)
    log.info(
        "%s: %d / %d / %d pairs (train / validation / test); %s vocabularies: "
        "%d %s, %d %s tokens",
        description, len(train_tokens[0]), len(validation_tokens[0]), len(test),
        data.tokenizer, len(source_vocabulary), data.source_lang,
        len(target_vocabulary), data.target_lang,
    )  # fmt: skip

    def dataset(split_tokens, shuffle: bool) -> tf.data.Dataset:
        sources = [source_vocabulary.encode(s) for s in split_tokens[0]]
        targets = [
            target_vocabulary.encode(t, add_start=True, add_end=True)
            for t in split_tokens[1]
        ]
        return pair_dataset(
            sources,
            targets,
            config.train.batch_size,
            shuffle=shuffle and config.train.shuffle,
            seed=config.train.seed,
        )

    return TranslationData(
        train=dataset(train_tokens, shuffle=True),
        validation=dataset(validation_tokens, shuffle=False),
        test=dataset(_short_enough(tokens(test), 0, "test"), shuffle=False),
        source_vocabulary=source_vocabulary,
        target_vocabulary=target_vocabulary,
        text_options=options,
        test_pairs=test,
        source=description,
    )


def _short_enough(split_tokens, max_length: int, split: str):
    """Drops pairs with a side longer than `max_length` tokens (0 keeps all)."""
    sources, targets = split_tokens
    keep = [
        i
        for i, (s, t) in enumerate(zip(sources, targets, strict=True))
        if s and t and (max_length <= 0 or max(len(s), len(t)) <= max_length)
    ]
    if len(keep) < len(sources):
        log.info(
            "%s: dropped %d pair(s) with no tokens or more than data.max_length=%d",
            split, len(sources) - len(keep), max_length,
        )  # fmt: skip
    if not keep:
        raise DataError(
            f"no {split} pair has at most data.max_length={max_length} tokens"
        )
    return [sources[i] for i in keep], [targets[i] for i in keep]


def pair_dataset(
    sources: list[list[int]],
    targets: list[list[int]],
    batch_size: int,
    *,
    shuffle: bool,
    seed: int,
) -> tf.data.Dataset:
    """Batches of ({"source", "target_in"}, target_out), padded per batch.

    `targets` are framed as [START] ... [END]; target_in drops the last token and
    target_out the first (teacher forcing). Shuffled data is grouped into buckets of
    similar length; unshuffled data is batched in length order.
    """
    import tensorflow as tf

    from rnnkit.data.buckets import bucket_by_length

    lengths = np.array(
        [max(len(s), len(t)) for s, t in zip(sources, targets, strict=True)]
    )

    def flat(sequences):
        """All ids end to end, and where each sequence starts and ends."""
        ends = np.cumsum([len(sequence) for sequence in sequences])
        starts = ends - np.array([len(sequence) for sequence in sequences])
        ids = np.concatenate(sequences).astype("int32")
        return (
            tf.constant(ids),
            tf.constant(starts, tf.int32),
            tf.constant(ends, tf.int32),
        )

    if not shuffle:
        order = np.argsort(lengths, kind="stable")
        sources, targets = [sources[i] for i in order], [targets[i] for i in order]
    source_ids, source_starts, source_ends = flat(sources)
    target_ids, target_starts, target_ends = flat(targets)

    def pair(index):
        return (
            source_ids[source_starts[index] : source_ends[index]],
            target_ids[target_starts[index] : target_ends[index]],
        )

    dataset = tf.data.Dataset.range(len(sources))
    if shuffle:
        dataset = dataset.shuffle(
            len(sources), seed=seed, reshuffle_each_iteration=True
        ).map(pair)
        dataset = bucket_by_length(
            dataset,
            lambda source, target: tf.maximum(tf.shape(source)[0], tf.shape(target)[0]),
            lengths,
            [b for b in (8, 12, 16, 20, 25, 30, 40, 50) if b <= lengths.max()],
            batch_size,
        )
    else:
        dataset = dataset.map(pair).padded_batch(batch_size)

    def split_target(source, target):
        inputs = {"source": source, "target_in": target[:, :-1]}
        return inputs, target[:, 1:]

    return dataset.map(split_target).prefetch(tf.data.AUTOTUNE)
