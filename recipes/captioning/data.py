"""Data of the captioning recipe: images and captions -> arrays -> `tf.data` batches.

Sources (`data.format`: "flickr8k" folders, COCO-style JSON files): sources.py.

Images named by a split but absent from the image source are counted and reported once
per split, then skipped; an image that cannot be decoded is reported by name and
skipped; a damaged member of an image zip stops loading with an error that names it.
Only `{split}` is replaced in `data.path` and `data.images`: other braces are part of
the name. COCO files given per split must not share an image.

No split is ever held in memory as images. Each image is read once to take the digest
of its bytes; the images the on-disk store lacks are decoded (Pillow, in parallel
through `tf.data`), squashed to `model.image_size` squares and turned into rows of a
content-keyed store (features.py, store.py): a frozen encoder's float16 annotation
vectors, or, for a trainable encoder, the decoded pixels. Training, evaluation and the
plots read the rows from disk, a batch at a time. Later runs and tuning trials find
the rows by content and skip the decoding and the CNN. Captions are lower-cased and
tokenised into words; the vocabulary (words seen `data.min_frequency` times in
training, `<unk>` for the rest) is built from the training captions.
"""

from __future__ import annotations

import dataclasses
import logging
import re
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from rnnkit_recipes.captioning.images import DecodedImages
from rnnkit_recipes.captioning.sources import (
    SPLITS,
    check_contents_disjoint,
    download_flickr8k,
    read_coco,
    read_flickr8k,
)
from rnnkit_recipes.captioning.store import Rows

from rnnkit.data.vocabulary import (  # noqa: F401 - the ids this module gives too
    END_ID,
    PAD_ID,
    START_ID,
    UNK_ID,
)
from rnnkit.data.vocabulary import Vocabulary as _Vocabulary
from rnnkit.errors import ConfigError, DataError
from rnnkit.recipe import RecipeData

if TYPE_CHECKING:
    from rnnkit_recipes.captioning.config import CaptioningConfig

log = logging.getLogger("rnnkit")

PAD, UNK, START, END = "", "<unk>", "<start>", "<end>"


def tokenize(caption: str) -> list[str]:
    """Lower-cased words: letters and digits only ("A man's hat." -> a mans hat)."""
    return re.findall(r"[a-z0-9]+", caption.lower().replace("'", ""))


@dataclasses.dataclass
class Split:
    """One split: image names, their caption tokens and model inputs (one row per
    image, read from disk when indexed: `(n, size, size, 3)` uint8 images, or
    `(n, L, D)` float16 cached features)."""

    names: list[str]
    captions: list[list[list[str]]]
    inputs: Rows


@dataclasses.dataclass
class CaptionData(RecipeData):
    """Batched splits of ({input_key, "caption_in"}, caption_out) and what evaluation,
    the baselines and the plots need.

    `input_key` is "image" or "features" (cached annotation vectors of a frozen
    encoder); `splits` holds the unbatched train / validation / test images with all
    their captions; `test_images` the test images as pixels (`test_images[i]`,
    decoded or read when indexed), for the plots.
    """

    vocabulary: list[str]
    splits: dict[str, Split]
    input_key: str
    test_images: Sequence[np.ndarray]
    encoder_weights: list[np.ndarray] | None
    source: str


class Vocabulary(_Vocabulary):
    """`rnnkit.data.vocabulary.Vocabulary` with the special tokens this recipe's runs
    were made with (ids 0-3: padding, `<unk>`, `<start>`, `<end>`), so their
    captions, BLEU figures and saved token lists read as before."""

    special_tokens = (PAD, UNK, START, END)


# -- Loading ---------------------------------------------------------------------------


def load(config: CaptioningConfig) -> CaptionData:
    from rnnkit_recipes.captioning import features

    data, model = config.data, config.model
    if data.format == "flickr8k":
        folder = Path(data.path) if data.path else download_flickr8k()
        all_captions, names, source = read_flickr8k(folder, data.images)
        captions = dict.fromkeys(SPLITS, all_captions)
        sources = dict.fromkeys(SPLITS, source)
        description = str(folder)
    else:
        if not data.path:
            raise ConfigError(
                "data.format=coco needs data.path, the captions JSON file (with "
                "{split} in it for one file per split)"
            )
        captions, names, sources = read_coco(config)
        description = data.path
    # The rows a split is read as: a frozen encoder's annotation vectors (computed
    # once, the encoder's weights kept for the model), or decoded pixels.
    encoder_weights = None
    if model.encoder_trainable:
        input_key, store = "image", features.pixel_store(config)

        def compute(pixels):
            return pixels
    else:
        encoder = features.build_encoder(config)
        encoder_weights = encoder.get_weights()
        input_key, store = "features", features.feature_store(config, encoder)
        compute = encoder.predict_on_batch
    present: dict[str, list[str]] = {}
    for split in SPLITS:
        present[split] = [name for name in names[split] if name in sources[split]]
        missing = len(names[split]) - len(present[split])
        if missing:
            log.warning(
                "%s of %s %s images not found, skipped",
                f"{missing:,}",
                f"{len(names[split]):,}",
                split,
            )
        if data.limit:
            present[split] = present[split][: data.limit]
    if data.format == "coco":
        # Before anything is computed: no image in two splits under two names.
        # (Flickr8k's lists are the official split; benchmarks/captioning_memory.py
        # lists dev and test images in train on purpose.)
        check_contents_disjoint(
            {
                split: features.content_keys(
                    store, sources[split], list(dict.fromkeys(present[split]))
                )
                for split in SPLITS
            },
            sources,
        )
    splits: dict[str, Split] = {}
    for split in SPLITS:
        filled = features.fill(
            store, sources[split], present[split], model.image_size, compute
        )
        for name, reason in filled.failures.items():
            log.warning("image %s is not a readable image (%s), skipped", name, reason)
        if not filled.names:
            raise DataError(
                f"no readable {split} images in {description}: none of the "
                f"{len(names[split]):,} images of the {split} split could be read"
            )
        splits[split] = Split(
            filled.names,
            _tokens(captions[split], filled.names),
            Rows(store, filled.locations),
        )
    vocabulary = Vocabulary.build(
        [c for per_image in splits["train"].captions for c in per_image],
        min_frequency=data.min_frequency,
    )
    log.info(
        "captioning data: %s train / %s validation / %s test images, vocabulary %d",
        *(f"{len(splits[s].names):,}" for s in SPLITS),
        len(vocabulary.tokens),
    )
    batched = {
        split: _dataset(
            splits[split],
            vocabulary,
            input_key,
            config,
            shuffle=split == "train" and config.train.shuffle,
        )
        for split in SPLITS
    }
    test = splits["test"]
    return CaptionData(
        train=batched["train"],
        validation=batched["validation"],
        test=batched["test"],
        vocabulary=vocabulary.tokens,
        splits=splits,
        input_key=input_key,
        test_images=test.inputs
        if model.encoder_trainable
        else DecodedImages(sources["test"], test.names, model.image_size),
        encoder_weights=encoder_weights,
        source=description,
    )


def _tokens(captions: dict[str, list[str]], names: list[str]) -> list[list[list[str]]]:
    """The caption words of each named image; a name repeated in a split shares
    its lists, and each distinct word is one string object."""
    words: dict[str, str] = {}
    by_name: dict[str, list[list[str]]] = {}
    for name in names:
        if name not in by_name:
            by_name[name] = [
                [words.setdefault(word, word) for word in tokenize(caption)]
                for caption in captions[name]
            ]
    return [by_name[name] for name in names]


def caption_arrays(
    captions: list[list[list[str]]], vocabulary: Vocabulary, per_image: int, length: int
) -> tuple[np.ndarray, np.ndarray]:
    """(caption_in, caption_out), each `(images, per_image, length + 1)` int32:
    `<start> w_1 .. w_n` and `w_1 .. w_n <end>`, words cut at `length`, zero-padded.
    An image with fewer captions than `per_image` repeats them in turn."""
    shape = (len(captions), per_image, length + 1)
    caption_in, caption_out = np.zeros(shape, np.int32), np.zeros(shape, np.int32)
    for row, per_image_captions in enumerate(captions):
        for k in range(per_image):
            ids = vocabulary.encode(per_image_captions[k % len(per_image_captions)])
            ids = ids[:length]
            caption_in[row, k, : len(ids) + 1] = [START_ID, *ids]
            caption_out[row, k, : len(ids) + 1] = [*ids, END_ID]
    return caption_in, caption_out


def _dataset(split: Split, vocabulary, input_key, config, shuffle: bool):
    """Batches read from the split's rows on disk: the shuffled indices are batched
    first, then each batch's rows are read (in parallel with training)."""
    import tensorflow as tf

    caption_in, caption_out = caption_arrays(
        split.captions,
        vocabulary,
        config.data.captions_per_image,
        config.data.max_length,
    )
    rows = split.inputs

    def gather(indices):
        return rows[indices], caption_in[indices], caption_out[indices]

    @tf.autograph.experimental.do_not_convert
    def read(indices):
        inputs, words_in, words_out = tf.numpy_function(
            gather,
            [indices],
            (tf.as_dtype(rows.dtype), tf.int32, tf.int32),
            stateful=False,
        )
        inputs = tf.ensure_shape(inputs, (None, *rows.shape[1:]))
        words_in = tf.ensure_shape(words_in, (None, *caption_in.shape[1:]))
        words_out = tf.ensure_shape(words_out, (None, *caption_out.shape[1:]))
        return {input_key: inputs, "caption_in": words_in}, words_out

    dataset = tf.data.Dataset.range(len(rows))
    if shuffle:
        dataset = dataset.shuffle(len(rows), seed=config.train.seed)
    return (
        dataset.batch(config.train.batch_size)
        .map(read, num_parallel_calls=tf.data.AUTOTUNE)
        .prefetch(tf.data.AUTOTUNE)
    )
