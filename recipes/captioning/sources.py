"""The sources of the captioning recipe: image names by split, their captions, and
where the images lie.

- "flickr8k": a folder with `Flickr8k.token.txt` (or `.gz`; lines
  `name.jpg#k<TAB>caption`), the split lists `Flickr_8k.{train,dev,test}Images.txt`
  and the images, as a folder of JPEGs or a zip (found in the folder, or named by
  `data.images`). Without `data.path` the original Flickr8k is downloaded once.
- "coco": COCO-style captions JSON files (`images` with `id`/`file_name`,
  `annotations` with `image_id`/`caption`) and an image folder or zip (`data.images`,
  default: the JSON's folder). With `{split}` in `data.path` (and `data.images`), one
  file per split (`data.train_split`, ...), which must not share an image file;
  otherwise one file, split reproducibly by fractions.
"""

from __future__ import annotations

import collections
import gzip
import json
import random
import zipfile
from pathlib import Path
from typing import TYPE_CHECKING

from rnnkit_recipes.captioning.images import ImageSource, find_image_source

from rnnkit.errors import DataError

if TYPE_CHECKING:
    from rnnkit_recipes.captioning.config import CaptioningConfig

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


def splits_given(config: CaptioningConfig) -> bool:
    """Whether the data come split already: Flickr8k's official lists, or one COCO
    file per split (`{split}` in data.path); else one COCO file is cut with
    `data.split_seed` and the fractions."""
    data = config.data
    return data.format == "flickr8k" or "{split}" in (data.path or "")


def read_coco(
    config: CaptioningConfig,
) -> tuple[dict[str, dict[str, list[str]]], dict[str, list[str]], dict]:
    """Captions by split and image, image names by split, and the image source of
    each split, from COCO-style captions JSON files."""
    data = config.data
    path = data.path or ""
    per_split = splits_given(config)
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


def check_contents_disjoint(
    keys: dict[str, dict[str, str]], sources: dict[str, ImageSource]
) -> None:
    """Stops when two splits hold the same image bytes under different names or
    paths (a test image that is also a training image), given {split: {name:
    content digest}}; equal images within one split are allowed."""
    first: dict[str, tuple[str, str]] = {}
    for split in SPLITS:
        for name, key in keys[split].items():
            other_split, other_name = first.setdefault(key, (split, name))
            if other_split != split:
                one = sources[other_split].identity(other_name)
                raise DataError(
                    f"the {other_split} image {one} and the {split} image "
                    f"{sources[split].identity(name)} have the "
                    "same bytes; an image must belong to one split only (remove one "
                    "of them from its split)"
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
    from rnnkit.data import downloads

    folder = downloads.default_cache_dir() / "flickr8k"
    for url in FLICKR8K_URLS:
        downloads.download(url, folder, local_hint=_LOCAL_HINT)
    if not (folder / "Flickr8k.token.txt").is_file():
        with zipfile.ZipFile(folder / "Flickr8k_text.zip") as archive:
            archive.extractall(folder)
    return folder
