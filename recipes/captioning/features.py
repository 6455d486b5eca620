"""The image encoder of the captioning recipe (its weights: ImageNet, a file, random)
and the on-disk, content-keyed stores of what the images turn into: a frozen encoder's
annotation vectors, or the decoded pixels a trainable encoder reads every epoch.

A row is found by the BLAKE2b digest of the image's bytes inside a folder named after
everything else that made it: the encoder, its width or alpha, a digest of its weights,
the image size and `PREPROCESSING_VERSION`. A different image under a known name is
computed afresh; the same image under two names or in two folders is computed once.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from rnnkit_recipes.captioning.images import ImageSource, decode, digests
from rnnkit_recipes.captioning.store import RowStore

from rnnkit.errors import ConfigError, DataError
from rnnkit.files import write_json

if TYPE_CHECKING:
    import keras
    from rnnkit_recipes.captioning.config import CaptioningConfig

log = logging.getLogger("rnnkit")

# The version of what turns image bytes into encoder inputs (images.decode: Pillow,
# RGB, bilinear squash); part of every store's folder name, so changing it means
# bumping this, and old rows are never read again.
PREPROCESSING_VERSION = 2
# In each store's folder: {image place: [stamp, digest]} of the images hashed so far.
DIGEST_INDEX = "digests.json"


def build_encoder(config: CaptioningConfig) -> keras.Model:
    """The configured CNN with its weights: random ("none"), ImageNet or a file."""
    from rnnkit.models.image_encoder import image_encoder

    model = config.model
    encoder = image_encoder(
        model.encoder, model.image_size, model.encoder_width, model.encoder_alpha
    )
    load_encoder_weights(
        encoder, model.encoder, model.encoder_weights, model.encoder_alpha
    )
    return encoder


def load_encoder_weights(
    encoder: keras.Model, name: str, weights: str, alpha: float = 1.0
) -> None:
    """Loads "imagenet" (keras.applications download) or a weights file into the
    encoder built by `image_encoder`; "none" keeps the random initialisation.

    A file is either the backbone's own (`keras.applications` .h5 files such as
    `mobilenet_7_5_224_tf_no_top.h5`: Keras 3 loads these legacy files in layer
    order, not by layer name, so the backbone must be the same architecture) or the
    whole encoder's (`encoder.save_weights`).
    """
    import keras

    from rnnkit.models.image_encoder import application

    if weights == "none":
        return
    hint = (
        "use --set model.encoder_weights=none to train the encoder from scratch, or "
        "--set model.encoder_weights=PATH for a local weights file"
    )
    backbone = next(
        (layer for layer in encoder.layers if isinstance(layer, keras.Model)), None
    )
    if weights == "imagenet":
        if backbone is None:
            raise ConfigError(
                f"model.encoder={name} has no ImageNet weights; {hint.split(', or')[0]}"
            )
        try:
            pretrained = application(name)(
                include_top=False,
                weights="imagenet",
                input_shape=backbone.input_shape[1:],
                **({"alpha": alpha} if name == "mobilenet" else {}),
            )
        except Exception as error:  # noqa: BLE001 - download failures come in many types
            reason = (str(error).strip().splitlines() or [type(error).__name__])[0]
            raise ConfigError(
                f"cannot get the ImageNet weights of {name} (offline? {reason}); {hint}"
            ) from None
        backbone.set_weights(pretrained.get_weights())
        return
    path = Path(weights)
    if not path.is_file():
        raise ConfigError(f"model.encoder_weights: no file {path}; {hint}")
    # A `.weights.h5` file is the whole encoder's (`encoder.save_weights`); another
    # `.h5` is a keras.applications backbone's, in its layer order.
    whole = path.name.endswith(".weights.h5") or backbone is None
    try:
        (encoder if whole else backbone).load_weights(path)
    except Exception as error:  # noqa: BLE001 - h5/keras loaders raise many types
        reason = (str(error).strip().splitlines() or [type(error).__name__])[0]
        shape = f", alpha {alpha}" if name == "mobilenet" else ""
        raise ConfigError(
            f"model.encoder_weights: {path} does not fit model.encoder={name}{shape} "
            f"({reason[:300]})"
        ) from None


def cache_root(config: CaptioningConfig) -> Path:
    """`data.cache_dir`, default `$RNNKIT_DATA_DIR/captioning_features`."""
    from rnnkit.data import downloads

    if config.data.cache_dir:
        return Path(config.data.cache_dir)
    return downloads.default_cache_dir() / "captioning_features"


def weights_digest(weights: list[np.ndarray]) -> str:
    """A digest of an encoder's weights (the identity of a weights file, whatever
    its name)."""
    digest = hashlib.blake2b(digest_size=8)
    for array in weights:
        digest.update(str(array.shape).encode())
        digest.update(np.ascontiguousarray(array).tobytes())
    return digest.hexdigest()


def feature_store(config: CaptioningConfig, encoder: keras.Model) -> RowStore:
    """The store of `encoder`'s float16 annotation vectors `(L, D)`:
    `<cache root>/<encoder>[-alpha<a>]-<size>px-<weights digest>-v<version>`."""
    model = config.model
    variant = f"-alpha{model.encoder_alpha:g}" if model.encoder == "mobilenet" else ""
    folder = (
        f"{model.encoder}{variant}-{model.image_size}px-"
        f"{weights_digest(encoder.get_weights())}-v{PREPROCESSING_VERSION}"
    )
    return RowStore(cache_root(config) / folder, encoder.output_shape[1:], np.float16)


def pixel_store(config: CaptioningConfig) -> RowStore:
    """The store of decoded `(size, size, 3)` uint8 images, for a trainable
    encoder: `<cache root>/pixels-<size>px-v<version>`."""
    size = config.model.image_size
    folder = cache_root(config) / f"pixels-{size}px-v{PREPROCESSING_VERSION}"
    return RowStore(folder, (size, size, 3), np.uint8)


@dataclasses.dataclass
class Filled:
    """What `fill` found: the names whose rows are stored (in order; repeated names
    stay repeated), their `(n, 2)` locations, {name: reason} of the unreadable
    images, and how many distinct images were computed or already stored."""

    names: list[str]
    locations: np.ndarray
    failures: dict[str, str]
    computed: int
    stored: int


def fill(
    store: RowStore,
    source: ImageSource,
    names: list[str],
    size: int,
    compute: Callable[[np.ndarray], np.ndarray],
    batch_size: int = 32,
) -> Filled:
    """Makes sure `store` holds the row of every named image.

    Every image new or changed since the last run is read once to take its digest
    (`content_keys`); only those whose digest the store lacks are decoded
    (`tf.data`, in parallel), passed through `compute` in batches of `(batch, size,
    size, 3)` uint8 pixels and appended to the store. No more than a few batches of
    images are in memory at any time.
    """
    store.refresh()
    distinct = list(dict.fromkeys(names))
    key_of = content_keys(store, source, distinct)
    todo: dict[str, str] = {}
    for name in distinct:
        key = key_of[name]
        if key not in store and key not in todo:
            todo[key] = name
    unique_keys = len(set(key_of.values()))
    failed_keys: dict[str, str] = {}
    if todo:
        log.info(
            "computing %s of %s distinct images into %s",
            f"{len(todo):,}",
            f"{unique_keys:,}",
            store.folder,
        )
        failed_keys = _compute(store, source, todo, size, compute, batch_size)
    kept = [name for name in names if key_of[name] in store]
    return Filled(
        names=kept,
        locations=store.locate([key_of[name] for name in kept]),
        failures={
            name: failed_keys[key_of[name]]
            for name in distinct
            if key_of[name] in failed_keys
        },
        computed=len(todo) - len(failed_keys),
        stored=unique_keys - len(todo),
    )


def content_keys(store: RowStore, source: ImageSource, names: list[str]) -> dict:
    """{name: content digest} of distinct `names`, hashing only the images that are
    new or changed since a run last hashed them.

    The store's `digests.json` maps each image's place (`ImageSource.identity`) to
    its stamp (size and times, or a zip member's CRC-32) and digest; a stamp that
    differs means the bytes may have changed, and the image is read and hashed again.
    The index is merged with what other processes wrote and replaced atomically.
    """
    path = store.folder / DIGEST_INDEX
    index = _read_digest_index(path)
    places = {name: source.identity(name) for name in names}
    stamps = {name: source.stamp(name) for name in names}
    stale = [
        name
        for name in names
        if index.get(places[name], (None, None))[0] != stamps[name]
    ]
    if stale:
        fresh = {
            places[name]: (stamps[name], key)
            for name, key in zip(stale, digests(source.read, stale), strict=True)
        }
        # Another run may have added entries since this one read the file.
        index = {**_read_digest_index(path), **fresh}
        write_json(path, {place: list(entry) for place, entry in index.items()})
    return {name: index[places[name]][1] for name in names}


def _read_digest_index(path: Path) -> dict[str, tuple[str, str]]:
    """{place: (stamp, digest)} from `path`; empty when it is missing or unreadable
    (the digests are then taken again, and the file rewritten)."""
    try:
        entries = json.loads(path.read_text())
        return {
            place: (str(stamp), str(key)) for place, (stamp, key) in entries.items()
        }
    except FileNotFoundError:
        return {}
    except (OSError, ValueError, TypeError, AttributeError):
        log.warning("%s cannot be read; the images are hashed again", path)
        return {}


def _compute(
    store: RowStore,
    source: ImageSource,
    todo: dict[str, str],
    size: int,
    compute: Callable[[np.ndarray], np.ndarray],
    batch_size: int,
) -> dict[str, str]:
    """Decodes, computes and stores the rows of {key: name}; {key: reason} of the
    images that cannot be decoded."""
    import tensorflow as tf

    keys, names = list(todo), list(todo.values())
    damaged: list[str] = []

    def load(position):
        try:
            result = decode(source.read(names[int(position)]), size)
        except DataError as error:  # a damaged zip: stop, naming it
            damaged.append(str(error))
            result = "damaged"
        if isinstance(result, str):
            return np.zeros((size, size, 3), np.uint8), result.encode()
        return result, b""

    @tf.autograph.experimental.do_not_convert
    def load_tensors(position):
        pixels, reason = tf.numpy_function(
            load, [position], (tf.uint8, tf.string), stateful=False
        )
        return tf.ensure_shape(pixels, (size, size, 3)), tf.ensure_shape(reason, ())

    batches = (
        tf.data.Dataset.range(len(names))
        .map(load_tensors, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
        .batch(batch_size)
        .prefetch(1)
    )
    failures: dict[str, str] = {}
    start = 0
    with store.writer() as writer:
        for pixels, reasons in batches.as_numpy_iterator():
            if damaged:
                raise DataError(damaged[0])
            good = reasons == b""
            rows = compute(pixels[good]) if good.any() else ()
            batch_keys = keys[start : start + len(reasons)]
            for key, reason in zip(batch_keys, reasons, strict=True):
                if reason:
                    failures[key] = reason.decode()
            for key, row in zip(
                (k for k, ok in zip(batch_keys, good, strict=True) if ok),
                rows,
                strict=True,
            ):
                writer.add(key, row)
            start += len(reasons)
    return failures
