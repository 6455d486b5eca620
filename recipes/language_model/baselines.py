"""Count-based baselines of the language-model recipe: unigram and add-k bigram.

Both are estimated on the training ids and score the same tokens as the model: every
token of an evaluated stream but its first, `ids[1:]`.
"""

from __future__ import annotations

import numpy as np

# The add-k constants tried on the validation split for the bigram baseline.
BIGRAM_K = (1.0, 0.3, 0.1, 0.03, 0.01, 0.003, 0.001)


def unigram_probabilities(train_ids: np.ndarray, vocabulary_size: int) -> np.ndarray:
    """Add-one smoothed token frequencies of the training ids, (vocabulary_size,)."""
    counts = np.bincount(train_ids, minlength=vocabulary_size).astype("float64")
    return (counts + 1) / (counts.sum() + vocabulary_size)


def unigram_cross_entropy(
    train_ids: np.ndarray, ids: np.ndarray, vocabulary_size: int
) -> float:
    """Mean cross-entropy (nats) of add-one smoothed token frequencies on `ids[1:]`."""
    probabilities = unigram_probabilities(train_ids, vocabulary_size)
    return float(-np.log(probabilities[ids[1:]]).mean())


def bigram_cross_entropy(
    train_ids: np.ndarray,
    validation_ids: np.ndarray,
    ids: np.ndarray,
    vocabulary_size: int,
) -> tuple[float, float]:
    """Mean cross-entropy (nats) on `ids[1:]` of the add-k bigram model

        P(w | v) = (c(v, w) + k) / (c(v) + k V),

    with the k of `BIGRAM_K` that is best on the validation ids; returns it too.
    Counts are kept sparse (pairs coded as v * V + w), so a 10k vocabulary is cheap.
    """
    pairs = train_ids[:-1].astype("int64") * vocabulary_size + train_ids[1:]
    pair_codes, pair_counts = np.unique(pairs, return_counts=True)
    context_counts = np.bincount(train_ids[:-1], minlength=vocabulary_size)

    def cross_entropy(stream: np.ndarray, k: float) -> float:
        codes = stream[:-1].astype("int64") * vocabulary_size + stream[1:]
        position = np.searchsorted(pair_codes, codes)
        position = np.minimum(position, len(pair_codes) - 1)
        found = pair_codes[position] == codes
        counts = np.where(found, pair_counts[position], 0)
        probabilities = (counts + k) / (
            context_counts[stream[:-1]] + k * vocabulary_size
        )
        return float(-np.log(probabilities).mean())

    best_k = min(BIGRAM_K, key=lambda k: cross_entropy(validation_ids, k))
    return cross_entropy(ids, best_k), best_k
