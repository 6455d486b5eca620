"""Data of the captioning recipe: images and captions -> arrays -> `tf.data` batches.

Sources (`data.format`):

- "flickr8k": a folder with `Flickr8k.token.txt` (or `.gz`; lines
  `name.jpg#k<TAB>caption`), the split lists `Flickr_8k.{train,dev,test}Images.txt`
  and the images, as a folder of JPEGs or a zip (found in the folder, or named by
  `data.images`). Without `data.path` the original Flickr8k is downloaded once.
- "coco": a COCO-style captions JSON (`images` with `id`/`file_name`, `annotations`
  with `image_id`/`caption`) and an image folder or zip (`data.images`, default: the
  JSON's folder). With `{split}` in `data.path` (and `data.images`), one file per split
  (`data.train_split`, ...); otherwise one file, split reproducibly by fractions.

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

import collections
import dataclasses
import gzip
import json
import logging
import random
import re
import zipfile
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from rnnkit_recipes.captioning.images import (
    DecodedImages,
    ImageSource,
    find_image_source,
)
from rnnkit_recipes.captioning.store import Rows

from rnnkit.errors import ConfigError, DataError
from rnnkit.recipe import RecipeData

if TYPE_CHECKING:
    from rnnkit_recipes.captioning.config import CaptioningConfig

log = logging.getLogger("rnnkit")

PAD, UNK, START, END = "", "<unk>", "<start>", "<end>"
PAD_ID, UNK_ID, START_ID, END_ID = 0, 1, 2, 3
SPLITS = ("train", "validation", "test")
FLICKR8K_URLS = (
    "https://github.com/jbrownlee/Datasets/releases/download/Flickr8k/"
    "Flickr8k_Dataset.zip",
    "https://github.com/jbrownlee/Datasets/releases/download/Flickr8k/"
    "Flickr8k_text.zip",
)
_FLICKR_SPLIT_FILES = {
    "train": "Flickr_8k.trainImages.txt",
    "validation": "Flickr_8k.devImages.txt",
    "test": "Flickr_8k.testImages.txt",
}
_LOCAL_HINT = (
    "point data.path at a local Flickr8k folder (Flickr8k.token.txt, the "
    "Flickr_8k.*Images.txt lists and the images as a folder or zip), e.g. "
    "--set data.path=../shared/data/captioning"
)


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


class Vocabulary:
    """Token <-> id; ids 0-3 are padding, `<unk>`, `<start>` and `<end>`."""

    def __init__(self, tokens: Sequence[str]):
        self.tokens = list(tokens)
        self.ids = {token: index for index, token in enumerate(self.tokens)}

    @classmethod
    def build(cls, captions: list[list[str]], min_frequency: int) -> Vocabulary:
        counts = collections.Counter(word for caption in captions for word in caption)
        words = sorted(
            (w for w, c in counts.items() if c >= min_frequency),
            key=lambda w: (-counts[w], w),
        )
        return cls([PAD, UNK, START, END, *words])

    def encode(self, words: list[str]) -> list[int]:
        return [self.ids.get(word, UNK_ID) for word in words]

    def decode(self, ids) -> list[str]:
        words = []
        for index in ids:
            if index == END_ID:
                break
            if index != PAD_ID:
                words.append(self.tokens[index])
        return words


# -- Caption files ---------------------------------------------------------------------


def _open_text(path: Path) -> str:
    try:
        if path.suffix == ".gz":
            with gzip.open(path, "rt", encoding="utf-8") as handle:
                return handle.read()
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError, EOFError) as error:
        raise DataError(f"{path}: cannot read it ({error})") from None


def _find_file(folder: Path, name: str) -> Path:
    for candidate in (folder / name, folder / f"{name}.gz"):
        if candidate.is_file():
            return candidate
    raise DataError(f"{folder}: no {name} (or {name}.gz) in it; {_LOCAL_HINT}")


def read_flickr8k_captions(path: Path) -> dict[str, list[str]]:
    """{image name: captions} from a `Flickr8k.token.txt` file."""
    captions: dict[str, list[str]] = collections.defaultdict(list)
    for number, line in enumerate(_open_text(path).splitlines(), start=1):
        if not line.strip():
            continue
        key, tab, caption = line.partition("\t")
        name = key.split("#", 1)[0].strip()
        if not tab or not name:
            raise DataError(
                f"{path}, line {number}: expected 'name.jpg#k<TAB>caption', "
                f"got {line[:60]!r}"
            )
        captions[name].append(caption.strip())
    if not captions:
        raise DataError(f"{path}: no captions in it")
    return dict(captions)


def read_flickr8k(
    folder: Path, images: str | None
) -> tuple[dict[str, list[str]], dict[str, list[str]], ImageSource]:
    """Captions by image, image names by split, and the image source."""
    if not folder.is_dir():
        raise DataError(f"data.path {folder} is not a folder; {_LOCAL_HINT}")
    captions = read_flickr8k_captions(_find_file(folder, "Flickr8k.token.txt"))
    splits = {}
    for split, file_name in _FLICKR_SPLIT_FILES.items():
        path = _find_file(folder, file_name)
        names = [line.strip() for line in _open_text(path).splitlines() if line.strip()]
        without_captions = [name for name in names if name not in captions]
        if without_captions:
            raise DataError(
                f"{path}: {len(without_captions)} image(s) have no caption in "
                f"Flickr8k.token.txt, e.g. {without_captions[0]}"
            )
        splits[split] = names
    return captions, splits, find_image_source(folder, images)


def read_coco(
    config: CaptioningConfig,
) -> tuple[dict[str, dict[str, list[str]]], dict[str, list[str]], dict]:
    """Captions by split and image, image names by split, and the image source of
    each split, from COCO-style captions JSON files."""
    data = config.data
    path = data.path or ""
    per_split = "{split}" in path
    split_names = {
        "train": data.train_split,
        "validation": data.validation_split,
        "test": data.test_split,
    }
    captions: dict[str, dict[str, list[str]]] = {}
    splits: dict[str, list[str]] = {}
    sources: dict[str, ImageSource] = {}
    opened: dict[Path, ImageSource] = {}
    files = (
        {split: Path(_with_split(path, name)) for split, name in split_names.items()}
        if per_split
        else {"all": Path(path)}
    )
    for split, json_path in files.items():
        captions[split] = _read_coco_json(json_path)
        splits[split] = sorted(captions[split])
        images = Path(
            _with_split(data.images, split_names.get(split, ""))
            if data.images
            else json_path.parent
        )
        if images not in opened:
            opened[images] = ImageSource(images)
        sources[split] = opened[images]
    if per_split:
        _check_disjoint(splits, sources, files)
        return captions, splits, sources
    names = splits.pop("all")
    order = list(range(len(names)))
    random.Random(data.split_seed).shuffle(order)
    n_test = max(1, round(data.test_fraction * len(names)))
    n_validation = max(1, round(data.validation_fraction * len(names)))
    if n_test + n_validation >= len(names):
        raise DataError(f"{path}: {len(names)} images are too few to split")
    shuffled = [names[i] for i in order]
    splits = {
        "test": shuffled[:n_test],
        "validation": shuffled[n_test : n_test + n_validation],
        "train": shuffled[n_test + n_validation :],
    }
    return (
        dict.fromkeys(SPLITS, captions["all"]),
        splits,
        dict.fromkeys(SPLITS, sources["all"]),
    )


def _check_disjoint(
    splits: dict[str, list[str]],
    sources: dict[str, ImageSource],
    files: dict[str, Path],
) -> None:
    """Stops when two splits' annotation files name the same image file (the same
    name in two different image folders is two images)."""

    def where(split: str, name: str) -> str:
        source = sources[split]
        member = source.resolve(name) or name
        return f"{source.path.resolve()}!{member}"

    first_split: dict[str, str] = {}
    shared: list[tuple[str, str, str]] = []
    for split in SPLITS:
        for name in splits[split]:
            key = where(split, name)
            if key in first_split and first_split[key] != split:
                shared.append((name, first_split[key], split))
            first_split.setdefault(key, split)
    if shared:
        name, one, other = shared[0]
        raise DataError(
            f"the COCO annotation files of the splits share {len(shared):,} "
            f"image(s), e.g. {name} in both {files[one]} and {files[other]}; an "
            "image must belong to one split only (remove it from all files but one)"
        )


def _with_split(path: str, split_name: str) -> str:
    """`path` with each `{split}` replaced: the only placeholder, so that any other
    brace in a folder or file name stays as it is (no `str.format`)."""
    return path.replace("{split}", split_name)


def _read_coco_json(path: Path) -> dict[str, list[str]]:
    try:
        document = json.loads(_open_text(path))
        file_names = {image["id"]: image["file_name"] for image in document["images"]}
        captions: dict[str, list[str]] = collections.defaultdict(list)
        for annotation in document["annotations"]:
            captions[file_names[annotation["image_id"]]].append(annotation["caption"])
    except json.JSONDecodeError as error:
        raise DataError(f"{path}: not valid JSON ({error})") from None
    except (KeyError, TypeError) as error:
        raise DataError(
            f"{path}: not a COCO captions file (needs 'images' with 'id' and "
            f"'file_name', 'annotations' with 'image_id' and 'caption'; "
            f"missing {error})"
        ) from None
    if not captions:
        raise DataError(f"{path}: no captions in it")
    return {name: texts for name, texts in captions.items()}


def download_flickr8k() -> Path:
    """The original Flickr8k, downloaded once (about 1.1 GB) into the rnnkit data
    folder; offline, a one-line error that says how to use local files."""
    from rnnkit.data import parallel_text

    folder = parallel_text.default_cache_dir() / "flickr8k"
    try:
        for url in FLICKR8K_URLS:
            parallel_text.download(url, folder)
    except DataError:
        raise DataError(
            f"could not download Flickr8k from {FLICKR8K_URLS[0].rsplit('/', 1)[0]} "
            f"(offline?); {_LOCAL_HINT}"
        ) from None
    if not (folder / "Flickr8k.token.txt").is_file():
        with zipfile.ZipFile(folder / "Flickr8k_text.zip") as archive:
            archive.extractall(folder)
    return folder


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
    splits: dict[str, Split] = {}
    for split in SPLITS:
        present = [name for name in names[split] if name in sources[split]]
        missing = len(names[split]) - len(present)
        if missing:
            log.warning(
                "%s of %s %s images not found, skipped",
                f"{missing:,}",
                f"{len(names[split]):,}",
                split,
            )
        if data.limit:
            present = present[: data.limit]
        filled = features.fill(
            store, sources[split], present, model.image_size, compute
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
        data.min_frequency,
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
