"""Translations as records for `rnnkit serve`: the recipe's own beam search with its
attention weights on the Keras model, or greedy search through the exported encoder
and one-step decoder in another runtime (the export guide's client loop)."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import keras
    from rnnkit_recipes.translation.config import TranslationConfig


def records(
    model: keras.Model,
    sentences: Sequence[str],
    config: TranslationConfig,
    vocabularies: tuple[Any, Any],
    calls: dict[str, Callable[[dict], dict]] | None,
) -> list[dict[str, Any]]:
    """One record per sentence: `translation`, `n_best` ([{text, score}]), and on
    the Keras model `source_tokens`, `target_tokens` and `attention` (one row of
    weights over the source tokens per target token)."""
    from rnnkit_recipes.translation.data import text_options
    from rnnkit_recipes.translation.decode import source_tokens

    from rnnkit.data.parallel_text import UNK

    source_vocabulary, target_vocabulary = vocabularies
    options = text_options(config)
    words = [source_tokens(sentence, options) for sentence in sentences]
    ids = [source_vocabulary.encode(w) for w in words]
    if calls is not None:
        return _portable(ids, config, target_vocabulary, calls)
    return _searched(model, ids, words, config, vocabularies, UNK)


def _searched(model, ids, words, config, vocabularies, unknown) -> list[dict]:
    import numpy as np
    from rnnkit_recipes.translation.decode import detokenized, search

    source_vocabulary, target_vocabulary = vocabularies
    n_best = config.evaluation.n_best
    result = search(
        model,
        ids,
        config,
        beam_width=max(config.evaluation.beam_width, n_best),
        n_best=n_best,
    )
    out = []
    for row, sentence_words in enumerate(words):
        texts = [detokenized(target_vocabulary, t) for t in result.tokens[row]]
        ranked = [
            {"text": text, "score": round(float(score), 4)}
            for text, score in zip(texts, result.scores[row], strict=True)
            if np.isfinite(score)
        ]
        length = int(result.lengths[row, 0])
        source = source_vocabulary.pieces(sentence_words) or [unknown]
        target = [target_vocabulary.tokens[i] for i in result.tokens[row, 0, :length]]
        record = {"translation": texts[0], "n_best": ranked}
        if getattr(model, "attention", None) != "none":
            weights = result.attention[row, :length, : len(source)]
            record.update(
                source_tokens=source,
                target_tokens=target,
                attention=np.round(weights.astype(float), 4).tolist(),
            )
        out.append(record)
    return out


def _portable(ids, config, target_vocabulary, calls) -> list[dict]:
    import numpy as np
    from rnnkit_recipes.translation.decode import detokenized, search_options

    from rnnkit.data.parallel_text import UNK_ID
    from rnnkit.errors import RnnkitError
    from rnnkit.export.clients import greedy_decode

    if "encoder" not in calls or "decoder_step" not in calls:
        raise RnnkitError(
            "this export has no encoder and one-step decoder to translate with; "
            "serve the run with --runtime keras"
        )
    length = config.data.max_length or 50
    options = search_options(config)
    source_ids = np.zeros((len(ids), length), "int32")
    limits = []  # the recipe's search: ceil(ratio * source length) + offset tokens
    for row, sentence_ids in enumerate(ids):
        sentence_ids = sentence_ids[:length] or [UNK_ID]
        source_ids[row, : len(sentence_ids)] = sentence_ids
        ratio, offset = options["max_length_ratio"], options["max_length_offset"]
        limits.append(math.ceil(ratio * len(sentence_ids)) + offset)
    tokens = greedy_decode(
        calls["encoder"],
        calls["decoder_step"],
        {"source_ids": source_ids},
        start_id=options["start_id"],
        end_id=options["end_id"],
        max_steps=max(limits),
        suppress_ids=options["suppress_ids"],
    )
    out = []
    for row, limit in zip(tokens, limits, strict=True):
        text = detokenized(target_vocabulary, list(row)[:limit])
        out.append({"translation": text, "n_best": [{"text": text, "score": None}]})
    return out
