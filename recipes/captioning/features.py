"""The image encoder of the captioning recipe: its weights (ImageNet, a file, random)
and the on-disk cache of a frozen encoder's annotation vectors."""

from __future__ import annotations

import hashlib
import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from rnnkit.errors import ConfigError

if TYPE_CHECKING:
    import keras
    from rnnkit_recipes.captioning.config import CaptioningConfig

log = logging.getLogger("rnnkit")


def build_encoder(config: CaptioningConfig) -> keras.Model:
    """The configured CNN with its weights: random ("none"), ImageNet or a file."""
    from rnnkit.models.image_encoder import image_encoder

    model = config.model
    encoder = image_encoder(model.encoder, model.image_size, model.encoder_width)
    load_encoder_weights(encoder, model.encoder, model.encoder_weights)
    return encoder


def load_encoder_weights(encoder: keras.Model, name: str, weights: str) -> None:
    """Loads "imagenet" (keras.applications download) or a weights file into the
    encoder built by `image_encoder`; "none" keeps the random initialisation."""
    if weights == "none":
        return
    hint = (
        "use --set model.encoder_weights=none to train the encoder from scratch, or "
        "--set model.encoder_weights=PATH for a local weights file"
    )
    backbone = next(
        (layer for layer in encoder.layers if isinstance(layer, _keras().Model)), None
    )
    if weights == "imagenet":
        if backbone is None:
            raise ConfigError(
                f"model.encoder={name} has no ImageNet weights; {hint.split(', or')[0]}"
            )
        try:
            pretrained = _application(name)(
                include_top=False,
                weights="imagenet",
                input_shape=backbone.input_shape[1:],
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
    target = backbone or encoder
    try:
        target.load_weights(path)
    except Exception as error:  # noqa: BLE001 - h5/keras loaders raise many types
        reason = (str(error).strip().splitlines() or [type(error).__name__])[0]
        raise ConfigError(
            f"model.encoder_weights: {path} does not fit model.encoder={name} "
            f"({reason})"
        ) from None


def _keras():
    import keras

    return keras


def _application(name: str) -> Callable[..., Any]:
    applications = _keras().applications
    return {
        "mobilenet_v2": applications.MobileNetV2,
        "efficientnet_b0": applications.EfficientNetB0,
        "resnet50": applications.ResNet50,
    }[name]


def feature_cache_dir(config: CaptioningConfig, weights: list[np.ndarray]) -> Path:
    """`data.cache_dir` (default `$RNNKIT_DATA_DIR/captioning_features`) /
    `<encoder>-<size>px-<hash of the encoder weights>`."""
    from rnnkit.data import parallel_text

    root = (
        Path(config.data.cache_dir)
        if config.data.cache_dir
        else parallel_text.default_cache_dir() / "captioning_features"
    )
    digest = hashlib.sha1()
    for array in weights:
        digest.update(np.ascontiguousarray(array).tobytes())
    model = config.model
    return root / f"{model.encoder}-{model.image_size}px-{digest.hexdigest()[:12]}"


def cached_features(
    encoder: keras.Model,
    names: list[str],
    pixels: np.ndarray,
    cache: Path,
    batch_size: int = 32,
) -> np.ndarray:
    """Annotation vectors `(n, L, D)` of the images, from `cache` where it has them
    (one float16 `.npy` per image), computed by `encoder` and stored otherwise.

    They stay float16 in memory (the model casts them to its compute dtype): the
    MobileNetV2 vectors of Flickr8k's 8,000 images take 1 GB so, 2 GB as float32.
    """
    cache.mkdir(parents=True, exist_ok=True)
    files = [cache / f"{Path(name).stem}.npy" for name in names]
    todo = [i for i, f in enumerate(files) if not f.is_file()]
    if todo:
        log.info("computing features of %d images into %s", len(todo), cache)
    for start in range(0, len(todo), batch_size):
        rows = todo[start : start + batch_size]
        features = np.asarray(encoder.predict(pixels[rows], verbose=0), np.float16)
        for row, array in zip(rows, features, strict=True):
            temporary = files[row].with_name(
                f".{files[row].stem}.tmp-{os.getpid()}.npy"
            )
            np.save(temporary, array)
            os.replace(temporary, files[row])
    return np.stack([np.load(f) for f in files])
