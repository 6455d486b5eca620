"""The baselines of the captioning recipe and the score they share with the model:
sacreBLEU BLEU-1..4 against several references, the consensus caption (the training
caption closest to all others), and the nearest training image by pooled encoder
features."""

from __future__ import annotations

import collections
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import keras
    import numpy as np
    from rnnkit_recipes.captioning.config import CaptioningConfig


def bleu_scores(
    hypotheses: list[str], references: list[list[str]], suffix: str = ""
) -> dict[str, float]:
    """sacreBLEU corpus BLEU-1..4 against all references of each image.

    Images with fewer references repeat theirs, which changes no BLEU statistic
    (n-gram counts are clipped by the maximum over references; the closest
    reference length is the same).
    """
    import sacrebleu

    most = max(len(refs) for refs in references)
    streams = [[refs[k % len(refs)] for refs in references] for k in range(most)]
    return {
        f"bleu{n}{suffix}": sacrebleu.metrics.BLEU(max_ngram_order=n)
        .corpus_score(hypotheses, streams)
        .score
        for n in (1, 2, 3, 4)
    }


def consensus_index(captions: list[list[str]]) -> int:
    """The caption with the highest corpus BLEU-4 against all the others.

    For caption c the corpus is c repeated once per other caption r_j, each with r_j
    as its only reference, as `sacrebleu.corpus_bleu([c] * M, [others])` computes it;
    here its n-gram statistics come from counts over all captions at once (linear
    time), and sacreBLEU turns them into the score.
    """
    import sacrebleu

    ngram_histograms: dict[tuple[str, ...], collections.Counter] = (
        collections.defaultdict(collections.Counter)
    )
    counted = []
    for caption in captions:
        counts = _ngram_counts(caption)
        counted.append(counts)
        for gram, count in counts.items():
            ngram_histograms[gram][count] += 1
    total_length = sum(len(c) for c in captions)
    others = len(captions) - 1
    best, best_score = 0, -1.0
    for index, (caption, counts) in enumerate(zip(captions, counted, strict=True)):
        correct = [0, 0, 0, 0]
        for gram, count in counts.items():
            clipped = sum(
                min(count, other) * number
                for other, number in ngram_histograms[gram].items()
            )
            correct[len(gram) - 1] += clipped - count  # less the caption itself
        total = [others * max(0, len(caption) - n + 1) for n in (1, 2, 3, 4)]
        score = sacrebleu.metrics.BLEU.compute_bleu(
            correct,
            total,
            others * len(caption),
            total_length - len(caption),
            smooth_method="exp",
        ).score
        if score > best_score:
            best, best_score = index, score
    return best


def _ngram_counts(words: list[str]) -> collections.Counter:
    return collections.Counter(
        tuple(words[i : i + n]) for n in (1, 2, 3, 4) for i in range(len(words) - n + 1)
    )


def pooled_features(
    model: keras.Model, inputs: np.ndarray, config: CaptioningConfig
) -> np.ndarray:
    """Mean annotation vector `(n, D)` of each image (or of its cached features)."""
    import numpy as np
    from keras import ops

    pooled = []
    for start in range(0, len(inputs), config.evaluation.decode_batch_size):
        batch = np.asarray(
            inputs[start : start + config.evaluation.decode_batch_size], "float32"
        )
        memory = model.encode(batch, training=False)
        pooled.append(ops.convert_to_numpy(memory["mean"]))
    return np.concatenate(pooled)


def nearest_neighbours(queries: np.ndarray, keys: np.ndarray) -> np.ndarray:
    """Index of the most cosine-similar key of every query."""
    import numpy as np

    def normalised(x):
        return x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)

    return np.argmax(normalised(queries) @ normalised(keys).T, axis=1)
