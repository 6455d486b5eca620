"""Images of the captioning recipe: bytes by file name from a folder or a zip, decoded
with Pillow in a thread pool and squashed to `model.image_size` squares."""

from __future__ import annotations

import concurrent.futures
import io
import zipfile
import zlib
from collections.abc import Callable
from pathlib import Path

import numpy as np

from rnnkit.errors import DataError

IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png")


class ImageSource:
    """Image bytes by file name, from a folder (searched recursively) or a zip."""

    def __init__(self, path: Path):
        self.path = path
        self._zip: zipfile.ZipFile | None = None
        if path.is_file() and zipfile.is_zipfile(path):
            try:
                self._zip = zipfile.ZipFile(path)
            except (zipfile.BadZipFile, OSError) as error:
                raise DataError(_damaged(path, error)) from None
            self.members = {
                Path(n).name: n
                for n in self._zip.namelist()
                if n.lower().endswith(IMAGE_SUFFIXES)
            }
        elif path.is_dir():
            self.members = {
                p.name: str(p)
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

    def __contains__(self, name: str) -> bool:
        return name in self.members

    def read(self, name: str) -> bytes:
        """The bytes of image `name`; a `DataError` when the zip holding it is
        damaged (a bad checksum, a corrupt or truncated compressed stream)."""
        if self._zip is not None:
            try:
                return self._zip.read(self.members[name])
            except (zipfile.BadZipFile, zlib.error, EOFError) as error:
                raise DataError(
                    _damaged(self.path, error, self.members[name])
                ) from None
        return Path(self.members[name]).read_bytes()


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


def decode_images(
    read: Callable[[str], bytes], names: list[str], size: int, threads: int = 4
) -> tuple[list[str], np.ndarray, dict[str, str]]:
    """Decodes and resizes images in a thread pool (Pillow releases the GIL while it
    decodes), squashing each to `size` x `size`.

    Returns the names decoded, their `(n, size, size, 3)` uint8 pixels, and
    {name: reason} of those that could not be read.
    """
    from PIL import Image, UnidentifiedImageError

    def decode(name: str) -> np.ndarray | str:
        try:
            with Image.open(io.BytesIO(read(name))) as image:
                image = image.convert("RGB").resize((size, size), Image.BILINEAR)
                return np.asarray(image, dtype=np.uint8)
        except DataError:
            raise  # a damaged zip: the data is wrong, not one image
        except UnidentifiedImageError:
            return "not a known image format"
        except (OSError, ValueError) as error:
            return f"{type(error).__name__}: {error}"

    kept, pixels, failures = [], [], {}
    with concurrent.futures.ThreadPoolExecutor(threads) as pool:
        for name, result in zip(names, pool.map(decode, names), strict=True):
            if isinstance(result, str):
                failures[name] = result
                continue
            kept.append(name)
            pixels.append(result)
    array = np.stack(pixels) if pixels else np.zeros((0, size, size, 3), np.uint8)
    return kept, array, failures
