"""Captions from images: greedy or beam search over images or cached features, in
batches, and the caption words of the generated token ids."""

from __future__ import annotations

import dataclasses
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
