"""Captions as records for `rnnkit serve`: images given as bytes (an upload) or as
TensorFlow Serving's `{"b64": ...}`, captioned by the recipe's own search, with the
attention of each word over the image's grid of locations."""

from __future__ import annotations

import base64
import binascii
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from rnnkit.errors import DataError

if TYPE_CHECKING:
    import keras
    from rnnkit_recipes.captioning.config import CaptioningConfig


def image_bytes(inputs: Sequence[Any]) -> list[bytes]:
    """The encoded images of `inputs`: bytes, or {"b64": base64 text}."""
    if not inputs:
        raise DataError("nothing to caption: give an image (a JPEG or PNG file)")
    images = []
    for index, value in enumerate(inputs):
        if isinstance(value, dict) and set(value) == {"b64"}:
            try:
                value = base64.b64decode(value["b64"], validate=True)
            except (binascii.Error, TypeError, ValueError):
                raise DataError(f"input {index}: b64 is not base64 text") from None
        if not isinstance(value, bytes | bytearray):
            raise DataError(
                f"input {index} is not an image: upload a file, or give "
                '{"b64": "<the file in base64>"}'
            )
        images.append(bytes(value))
    return images


def records(
    model: keras.Model, inputs: Sequence[Any], config: CaptioningConfig
) -> list[dict[str, Any]]:
    """One record per image: `caption`, `n_best` ([{text, score}]), and with an
    attention model `words` and `attention` (per word, the weights over the
    `grid` [rows, columns] of image locations, row by row)."""
    import numpy as np
    from rnnkit_recipes.captioning.decode import caption_images

    images = image_bytes(inputs)
    result, captions = caption_images(
        model,
        lambda name: images[int(name)],
        [str(i) for i in range(len(images))],
        config,
        "input {name} is not an image that can be read ({reason})",
    )
    side = int(round(model.num_locations**0.5))
    out = []
    for row, texts in enumerate(captions):
        ranked = [
            {"text": text, "score": round(float(score), 4)}
            for text, score in zip(texts, result.scores[row], strict=True)
            if np.isfinite(score)
        ]
        record = {"caption": texts[0], "n_best": ranked}
        if model.attention != "none":
            length = int(result.lengths[row, 0])
            weights = result.attention[row, :length].astype(float)
            record.update(
                words=[model.tokens[i] for i in result.tokens[row, 0, :length]],
                grid=[side, weights.shape[-1] // side],
                attention=np.round(weights, 4).tolist(),
            )
        out.append(record)
    return out
