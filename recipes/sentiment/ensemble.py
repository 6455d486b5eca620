"""`rnnkit ensemble` of sentiment runs: one classifier whose probabilities are the mean
of its members' (Mesnil et al. 2014 and ULMFiT average classifiers that err
differently: a forward- and a backward-initialised model, other cells or poolings).

The members must have seen the same examples in the same roles: the same data, the
same split keys and the same `train.seed`, which cuts this recipe's validation split
out of the training data (runs of two seeds would each have trained on reviews the
other validates on, and every choice made on the ensemble's validation split would
lean its way). They must also read text alike (the same vocabulary, length and
truncation), so that the ensemble keeps one text front end, and exports, serves and
explains as one classifier.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from rnnkit.errors import ConfigError

if TYPE_CHECKING:
    import keras
    from rnnkit_recipes.sentiment.config import SentimentConfig

# What every member shares beyond the recipe's split keys: the examples and their
# roles (train.seed cuts the validation split), and how a text becomes token ids.
SHARED_KEYS = (
    "data.path",
    "data.test_path",
    "data.text_column",
    "data.label_column",
    "data.class_names",
    "data.encoding",
    "data.limit",
    "train.seed",
    "data.vocabulary_size",
    "data.sequence_length",
    "data.keep",
    "data.lowercase",
)


def ensemble_model(
    models: Sequence[keras.Model],
    configs: Sequence[SentimentConfig],
    combine: str = "mean",
) -> tuple[keras.Model, SentimentConfig]:
    """The mean of `models`' class probabilities as one classifier (raw texts in,
    as each member), and the first member's config, which feeds and evaluates it."""
    import keras
    from rnnkit_recipes.sentiment.recipe import SentimentRecipe

    from rnnkit.models.sequence_classifier import MeanProbabilities, class_names_of
    from rnnkit.training.ensemble import require_shared

    if combine != "mean":
        raise ConfigError(
            f"combine={combine!r}: sentiment runs are combined by the mean of their "
            "probabilities only; drop --combine"
        )
    require_shared(
        configs,
        (*SentimentRecipe.split_keys, *SHARED_KEYS),
        "the members of a sentiment ensemble share the data, its split (train.seed "
        "cuts the validation split) and the text settings: combine runs that share "
        "them, e.g. different models of one seed",
    )
    names = [class_names_of(model) for model in models]
    if any(other != names[0] for other in names[1:]):
        raise ConfigError(
            f"the runs' models name their classes differently ({names[0]} and "
            f"{next(o for o in names[1:] if o != names[0])}); combine runs of one "
            "labelling"
        )
    first = models[0]
    vocabulary = first.get_layer("vectorizer").get_vocabulary()
    for model in models[1:]:
        if model.get_layer("vectorizer").get_vocabulary() != vocabulary:
            raise ConfigError(
                "the runs' vocabularies differ although their settings agree (were "
                "they trained on different versions of the data file?); combine runs "
                "trained on the same data"
            )
    text = keras.Input(shape=(), dtype="string", name="text")
    truncate = first.get_layer("truncate")
    token_ids = truncate(first.get_layer("vectorizer")(text))
    outputs = []
    for index, model in enumerate(models, start=1):
        after_text = keras.Model(
            model.get_layer("truncate").output, model.output, name=f"member_{index}"
        )
        outputs.append(after_text(token_ids))
    probabilities = MeanProbabilities(names[0], dtype="float32", name="probabilities")(
        outputs
    )
    return keras.Model(text, probabilities, name="classifier_ensemble"), configs[0]
