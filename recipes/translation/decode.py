"""Translations from sentences: greedy or beam search over sentences batched by length,
and the text on both sides of it (tokens in, detokenised words out, and the reference
as BLEU reads it)."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import keras
    import numpy as np
    from rnnkit_recipes.translation.config import TranslationConfig
    from rnnkit_recipes.translation.data import TranslationData

    from rnnkit.decoding import SearchResult


def source_tokens(sentence: str, options) -> list[str]:
    """A sentence's tokens under the data's text options."""
    from rnnkit.data.parallel_text import tokenize

    return tokenize(sentence, options)


def detokenized(vocabulary, ids) -> str:
    """The text of generated token ids."""
    from rnnkit.data.parallel_text import detokenize

    return detokenize(vocabulary.decode(ids))


def bleu_reference(sentence: str, data: TranslationData) -> str:
    """A reference as BLEU sees it: normalised, but neither tokenised nor lower-cased.

    (sacreBLEU lower-cases itself when the model is trained lower-cased.)
    """
    from rnnkit.data.parallel_text import TextOptions, normalize

    options = TextOptions(data.text_options.unicode_form, lowercase=False)
    return normalize(sentence, options)


def search_options(config: TranslationConfig) -> dict:
    """The special ids and length limits of every search of the recipe (its own
    decoding and the greedy loop of its exported SavedModel)."""
    from rnnkit.data.parallel_text import END_ID, PAD_ID, START_ID

    evaluation = config.evaluation
    return dict(
        start_id=START_ID,
        end_id=END_ID,
        pad_id=PAD_ID,
        suppress_ids=(PAD_ID, START_ID),
        max_length_ratio=evaluation.max_length_ratio,
        max_length_offset=evaluation.max_length_offset,
    )


def search(
    model: keras.Model,
    source_ids: list[list[int]],
    config: TranslationConfig,
    beam_width: int,
    n_best: int = 1,
) -> SearchResult:
    """Greedy (beam_width 1) or beam search over sentences, batched by length.

    Returns one `SearchResult` for all sentences, in their original order.
    """
    import keras
    import numpy as np

    from rnnkit import decoding
    from rnnkit.data.parallel_text import UNK_ID

    evaluation = config.evaluation
    common = search_options(config)
    # Sorting by length keeps padding, and so wasted decoder steps, small.
    order = np.argsort([len(ids) for ids in source_ids], kind="stable")
    batch_size = evaluation.decode_batch_size
    parts = []
    for start in range(0, len(order), batch_size):
        # A sentence without tokens still has one, unknown, so the encoder sees it.
        batch = keras.utils.pad_sequences(
            [source_ids[i] or [UNK_ID] for i in order[start : start + batch_size]],
            padding="post",
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
    inverse = np.argsort(order)
    steps = max(part.tokens.shape[2] for part in parts)
    source_length = max(part.attention.shape[2] for part in parts)

    def joined(name: str) -> np.ndarray:
        arrays = []
        for part in parts:
            array = getattr(part, name)
            if name == "tokens":
                array = np.pad(array, ((0, 0), (0, 0), (0, steps - array.shape[2])))
            elif name == "attention":
                array = np.pad(
                    array,
                    (
                        (0, 0),
                        (0, steps - array.shape[1]),
                        (0, source_length - array.shape[2]),
                    ),
                )
            arrays.append(array)
        return np.concatenate(arrays)[inverse]

    return decoding.SearchResult(
        **{f.name: joined(f.name) for f in dataclasses.fields(decoding.SearchResult)}
    )


def translate(
    model: keras.Model,
    sentences: list[str],
    data: TranslationData,
    config: TranslationConfig,
    beam_width: int | None,
) -> list[str]:
    """Detokenised best translations (beam_width None: the configured beam)."""
    source_ids = [
        data.source_vocabulary.encode(source_tokens(s, data.text_options))
        for s in sentences
    ]
    result = search(
        model, source_ids, config, beam_width or config.evaluation.beam_width
    )
    return [detokenized(data.target_vocabulary, tokens[0]) for tokens in result.tokens]
