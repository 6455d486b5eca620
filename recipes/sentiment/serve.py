"""Sentiment predictions as records for `rnnkit serve`: the label, every class's
probability and, on request, how much each word weighs in the decision.

The classifier has no attention to show, so a word's weight is measured by
occlusion: the predicted class's probability for the whole text minus its
probability with that word left out (one batch of texts, one call). A positive
weight is a word that pushed the model towards its answer.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import keras
    import numpy as np
    from rnnkit_recipes.sentiment.config import SentimentConfig

# Occlusion scores the first words only: one text per word is classified.
MAX_EXPLAINED_WORDS = 200
# The token list of each loaded model's vectorizer, for the token ids of a runtime.
_VOCABULARIES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def records(
    model: keras.Model,
    texts: Sequence[str],
    config: SentimentConfig,
    calls: dict[str, Callable[[dict], dict]] | None,
    explain: bool = False,
) -> list[dict[str, Any]]:
    """One record per text: `label`, `probability` (of the label) and
    `probabilities` by class name; with `explain`, `words` (the text split at
    whitespace) and `weights` (each word's occlusion weight, None past the first
    `MAX_EXPLAINED_WORDS`)."""
    from rnnkit.models.sequence_classifier import class_names_of

    names = class_names_of(model)
    classify = _classifier(model, config, calls)
    probabilities = classify(list(texts))
    out = []
    for text, row in zip(texts, probabilities, strict=True):
        best = int(row.argmax())
        record = {
            "label": names[best],
            "probability": round(float(row[best]), 6),
            "probabilities": {
                n: round(float(p), 6) for n, p in zip(names, row, strict=True)
            },
        }
        if explain:
            record.update(_occlusion(classify, text, best, float(row[best])))
        out.append(record)
    return out


def _classifier(model, config, calls) -> Callable[[list[str]], np.ndarray]:
    """texts -> (n, classes) probabilities, on the Keras model or the runtime's."""
    import numpy as np

    from rnnkit.models.sequence_classifier import class_probabilities

    if calls is None:
        return lambda texts: class_probabilities(model, texts, verbose=0)
    if "model" not in calls:
        raise ValueError("the served export has no classifier model")
    from rnnkit.export.clients import sentiment_token_ids, vocabulary_index

    truncate = model.get_layer("truncate")
    if model not in _VOCABULARIES:  # indexed once per model, not once per request
        vocabulary = model.get_layer("vectorizer").get_vocabulary()
        _VOCABULARIES[model] = vocabulary_index(vocabulary)
    vocabulary = _VOCABULARIES[model]

    def classify(texts: list[str]) -> np.ndarray:
        ids = sentiment_token_ids(
            texts,
            vocabulary,
            truncate.max_length,
            truncate.keep,
            config.data.lowercase,
        )
        outputs = calls["model"]({"token_ids": ids})
        return np.asarray(outputs["probabilities"], np.float64)

    return classify


def _occlusion(classify, text: str, best: int, probability: float) -> dict:
    words = text.split()
    scored = words[:MAX_EXPLAINED_WORDS]
    if not scored:
        return {"words": [], "weights": []}
    variants = [" ".join(words[:i] + words[i + 1 :]) for i in range(len(scored))]
    without = classify(variants)[:, best]
    weights = [round(probability - float(p), 6) for p in without]
    return {"words": words, "weights": weights + [None] * (len(words) - len(scored))}
