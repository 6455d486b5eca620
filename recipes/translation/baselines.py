"""The baselines the translation model is measured against, on the same sentences:
copying the source sentence (BLEU, chrF) and a unigram model of the target language,
which ignores source and context (token accuracy, perplexity)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rnnkit_recipes.translation.data import TranslationData


def copy_source(sources: list[str], data: TranslationData) -> list[str]:
    """The source sentences as translations, normalised as the references are."""
    from rnnkit_recipes.translation.decode import bleu_reference

    return [bleu_reference(source, data) for source in sources]


def unigram_figures(train, validation, vocabulary_size: int) -> dict[str, float]:
    """The baseline that ignores source and context: training token frequencies."""
    import numpy as np

    counts = np.zeros(vocabulary_size)
    for _, target_out in train:
        counts += np.bincount(np.asarray(target_out).ravel(), minlength=vocabulary_size)
    counts[0] = 0  # padding
    # Add-one smoothing, so that a token unseen in training has a finite cost.
    probabilities = (counts + 1) / (counts.sum() + vocabulary_size)
    log_prob, correct, count = 0.0, 0, 0
    for _, target_out in validation:
        ids = np.asarray(target_out)
        ids = ids[ids != 0]
        log_prob += float(np.log(probabilities[ids]).sum())
        correct += int((ids == counts.argmax()).sum())
        count += len(ids)
    return {
        "val_token_accuracy": correct / count,
        "val_perplexity": math.exp(-log_prob / count),
    }
