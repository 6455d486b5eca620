"""Captions from images: greedy or beam search over images or cached features, in
batches, and the caption words of the generated token ids."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import keras
    import numpy as np
    from rnnkit_recipes.captioning.config import CaptioningConfig

    from rnnkit.decoding import SearchResult


def words(model: keras.Model, tokens) -> list[str]:
    """The words of generated token ids, up to the end token."""
    from rnnkit_recipes.captioning.data import Vocabulary

    return Vocabulary(model.tokens).decode(tokens)


def search_options(config: CaptioningConfig) -> dict:
    """The special ids and the length limit of every search of the recipe (its own
    decoding and the greedy loop of its exported SavedModel): `data.max_length`
    words and the end token."""
    from rnnkit_recipes.captioning.data import END_ID, PAD_ID, START_ID

    return dict(
        start_id=START_ID,
        end_id=END_ID,
        pad_id=PAD_ID,
        suppress_ids=(PAD_ID, START_ID),
        max_length=config.data.max_length + 1,
    )


def search(
    model: keras.Model,
    inputs: np.ndarray,
    config: CaptioningConfig,
    beam_width: int,
    n_best: int = 1,
) -> SearchResult:
    """Greedy (beam_width 1) or beam search over images or cached features, batched.

    Generated captions stop after `data.max_length` words and the end token.
    """
    import numpy as np

    from rnnkit import decoding

    evaluation = config.evaluation
    common = search_options(config)
    parts = []
    for start in range(0, len(inputs), evaluation.decode_batch_size):
        batch = np.asarray(
            inputs[start : start + evaluation.decode_batch_size], "float32"
        )
        if beam_width == 1:
            parts.append(decoding.greedy_search(model, batch, **common))
        else:
            parts.append(
                decoding.beam_search(
                    model,
                    batch,
                    beam_width=beam_width,
                    n_best=n_best,
                    length_penalty_alpha=evaluation.length_penalty,
                    **common,
                )
            )
    return decoding.SearchResult(
        **{
            f.name: np.concatenate([getattr(part, f.name) for part in parts])
            for f in dataclasses.fields(decoding.SearchResult)
        }
    )


def caption_texts(
    model: keras.Model, inputs: np.ndarray, config: CaptioningConfig, beam_width: int
) -> list[str]:
    """The best caption of every image, as space-separated words."""
    result = search(model, inputs, config, beam_width)
    return [" ".join(words(model, tokens[0])) for tokens in result.tokens]


def caption_images(
    model: keras.Model,
    read: Callable[[str], bytes],
    names: Sequence[str],
    config: CaptioningConfig,
    unreadable: str,
) -> tuple[SearchResult, list[list[str]]]:
    """The images `names` (`read(name)` gives a file's bytes) captioned by the
    recipe's search with `evaluation.n_best` captions each: the search's result and
    every image's captions as text, best first. An image that cannot be decoded is
    a DataError, `unreadable` formatted with its `name` and the `reason`."""
    from rnnkit_recipes.captioning.images import decode_images

    from rnnkit.errors import DataError

    _, pixels, failures = decode_images(read, list(names), model.image_size)
    if failures:
        name, reason = next(iter(failures.items()))
        raise DataError(unreadable.format(name=name, reason=reason))
    n_best = config.evaluation.n_best
    result = search(
        model,
        pixels,
        config,
        beam_width=max(config.evaluation.beam_width, n_best),
        n_best=n_best,
    )
    texts = [
        [" ".join(words(model, tokens)) for tokens in row] for row in result.tokens
    ]
    return result, texts
