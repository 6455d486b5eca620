"""Images of the captioning recipe: bytes by file name from a folder or a zip, their
content digests, and their pixels, decoded with Pillow and squashed to
`model.image_size` squares (one function, so training, the caches and `predict` see
the same pixels)."""

from __future__ import annotations

import collections
import concurrent.futures
import hashlib
import os
import zipfile
import zlib
from collections.abc import Callable, Iterable
from pathlib import Path

import numpy as np

from rnnkit.errors import DataError

IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png")


class ImageSource:
    """Image bytes by file name, from a folder (searched recursively) or a zip.

    A name is looked up as a path relative to the folder or zip first, then as a
    bare file name; a bare name that two files share is an error (name them by
    their path instead), so two images never collapse into one.
    """

    def __init__(self, path: Path):
        self.path = path
        self._zip: zipfile.ZipFile | None = None
        if path.is_file() and zipfile.is_zipfile(path):
            try:
                self._zip = zipfile.ZipFile(path)
            except (zipfile.BadZipFile, OSError) as error:
                raise DataError(_damaged(path, error)) from None
            self.members = {
                n: n for n in self._zip.namelist() if n.lower().endswith(IMAGE_SUFFIXES)
            }
        elif path.is_dir():
            self.members = {
                p.relative_to(path).as_posix(): str(p)
                for p in path.rglob("*")
                if p.suffix.lower() in IMAGE_SUFFIXES and p.is_file()
            }
        else:
            raise DataError(
                f"{path}: not an image folder or zip (set data.images to the folder "
                "or zip that holds the images)"
            )
        if not self.members:
            raise DataError(f"{path}: no .jpg/.jpeg/.png images in it")
        self._by_name: dict[str, list[str]] = collections.defaultdict(list)
        for relative in self.members:
            self._by_name[relative.rsplit("/", 1)[-1]].append(relative)

    def resolve(self, name: str) -> str | None:
        """The member (relative path) that `name` means, or None when absent."""
        if name in self.members:
            return name
        found = self._by_name.get(name, ())
        if len(found) > 1:
            raise DataError(
                f"{self.path}: {len(found)} images are named {name} ({found[0]}, "
                f"{found[1]}); name them by their path under {self.path} in the "
                "captions file, or set data.images to the folder that holds the one "
                "you mean"
            )
        return found[0] if found else None

    def __contains__(self, name: str) -> bool:
        return self.resolve(name) is not None

    def identity(self, name: str) -> str:
        """Where image `name` lies: the source's resolved path and the member."""
        return f"{self.path.resolve()}!{self.resolve(name)}"

    def stamp(self, name: str) -> str:
        """What changes when the bytes of image `name` change, found without reading
        them: a file's size, modification and change times; a zip member's size and
        CRC-32."""
        member = self.members[self.resolve(name)]
        if self._zip is not None:
            info = self._zip.getinfo(member)
            return f"{info.file_size}:crc{info.CRC:08x}"
        stat = os.stat(member)
        return f"{stat.st_size}:{stat.st_mtime_ns}:{stat.st_ctime_ns}"

    def read(self, name: str) -> bytes:
        """The bytes of image `name`; a `DataError` when the zip holding it is
        damaged (a bad checksum, a corrupt or truncated compressed stream)."""
        member = self.members[self.resolve(name)]
        if self._zip is not None:
            try:
                return self._zip.read(member)
            except (zipfile.BadZipFile, zlib.error, EOFError) as error:
                raise DataError(_damaged(self.path, error, member)) from None
        return Path(member).read_bytes()


def _damaged(path: Path, error: Exception, member: str | None = None) -> str:
    where = f"{path}: member {member}" if member else str(path)
    return (
        f"{where} is damaged ({error}); download the zip again or re-create it "
        f"(`python -m zipfile -t {path}` checks it)"
    )


def find_image_source(folder: Path, images: str | None) -> ImageSource:
    """`data.images` (relative to the data folder), else the one zip or image folder
    found in `folder`."""
    if images:
        path = Path(images)
        return ImageSource(path if path.is_absolute() else folder / path)
    zips = sorted(p for p in folder.glob("*.zip") if "text" not in p.name.lower())
    if zips:
        return ImageSource(zips[0])
    for candidate in sorted(p for p in folder.iterdir() if p.is_dir()):
        if any(candidate.glob("*.jpg")):
            return ImageSource(candidate)
    if any(folder.glob("*.jpg")):
        return ImageSource(folder)
    raise DataError(
        f"{folder}: no images found (no .zip and no folder of .jpg files); "
        "set data.images to the image folder or zip"
    )


def digest(content: bytes) -> str:
    """The content key of an image: a BLAKE2b-128 hex digest of its bytes."""
    return hashlib.blake2b(content, digest_size=16).hexdigest()


def digests(
    read: Callable[[str], bytes], names: Iterable[str], threads: int = 4
) -> list[str]:
    """The content digest of each named image, read in a thread pool (one image's
    bytes in memory per thread)."""
    with concurrent.futures.ThreadPoolExecutor(threads) as pool:
        return list(pool.map(lambda name: digest(read(name)), names))


def decode(content: bytes, size: int) -> np.ndarray | str:
    """`(size, size, 3)` uint8 RGB pixels of an encoded image, squashed (not
    cropped) with bilinear filtering; or why it cannot be read."""
    from PIL import UnidentifiedImageError

    # The one definition, shared with the exported model's client.
    from rnnkit.export.clients import squash_image

    try:
        return squash_image(content, size)
    except UnidentifiedImageError:
        return "not a known image format"
    except (OSError, ValueError) as error:
        return f"{type(error).__name__}: {error}"


def decode_images(
    read: Callable[[str], bytes], names: list[str], size: int, threads: int = 4
) -> tuple[list[str], np.ndarray, dict[str, str]]:
    """Decodes and resizes a few images in a thread pool (Pillow releases the GIL
    while it decodes): for `predict` and the plots, not for whole splits.

    Returns the names decoded, their `(n, size, size, 3)` uint8 pixels, and
    {name: reason} of those that could not be read.
    """
    kept, pixels, failures = [], [], {}
    with concurrent.futures.ThreadPoolExecutor(threads) as pool:
        results = pool.map(lambda name: decode(read(name), size), names)
        for name, result in zip(names, results, strict=True):
            if isinstance(result, str):
                failures[name] = result
                continue
            kept.append(name)
            pixels.append(result)
    array = np.stack(pixels) if pixels else np.zeros((0, size, size, 3), np.uint8)
    return kept, array, failures


class DecodedImages:
    """The pixels of named images, decoded when indexed (`images[i]`, `(size, size,
    3)` uint8): the test images a plot draws, without decoding a whole split."""

    def __init__(self, source: ImageSource, names: list[str], size: int):
        self.source, self.names, self.size = source, names, size

    def __len__(self) -> int:
        return len(self.names)

    def __getitem__(self, index: int) -> np.ndarray:
        name = self.names[index]
        pixels = decode(self.source.read(name), self.size)
        if isinstance(pixels, str):
            raise DataError(f"{name}: not an image that can be read ({pixels})")
        return pixels
