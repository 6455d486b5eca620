"""Sentiment: many-to-one classification of reviews with an rnnkit recurrent classifier.

`rnnkit run sentiment` trains a bidirectional rnnkit GRU on IMDB movie reviews
(downloaded once from its authors' site, or local files through `data.path`) and
reports accuracy, precision, recall, F1 and ROC AUC on the test split next to three
baselines trained on the same training texts: the majority class, a unigram
bag-of-words logistic regression, and word uni+bigram tf-idf logistic regression (the
linear baseline of IMDB papers). The class names and their order are the run's, saved
in the model: data whose labels are named or ordered otherwise is renumbered to match,
or refused.

The module stays light: TensorFlow, Keras and scikit-learn are imported inside the
methods, because `rnnkit list` imports every recipe module to read its summary.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from rnnkit_recipes.sentiment.config import SentimentConfig

from rnnkit.recipe import (
    ConfigError,
    Metrics,
    Recipe,
    RnnkitError,
    texts_of,
)

if TYPE_CHECKING:
    import keras
    import keras_tuner
    import numpy as np
    from rnnkit_recipes.sentiment.data import SentimentData


class SentimentRecipe(Recipe):
    """IMDB-style sentiment classification with an rnnkit sequence classifier."""

    name = "sentiment"
    summary = (
        "Review sentiment (IMDB): bidirectional rnnkit GRU vs majority, "
        "bag-of-words and tf-idf bigram baselines"
    )
    Config = SentimentConfig
    record_options: ClassVar[tuple[str, ...]] = ("explain",)

    def __init__(self) -> None:
        # evaluate() and write_plots() both need the test predictions of one model.
        self._predictions: tuple[object, object, np.ndarray] | None = None

    def check_config(self, config: SentimentConfig) -> None:
        super().check_config(config)
        _check_pretraining(config)
        try:
            # str.encode, unlike codecs.lookup, also refuses the codecs that are not
            # text encodings (rot13, base64), as reading a file with them does.
            "".encode(config.data.encoding)
        except LookupError:
            raise ConfigError(
                f"data.encoding={config.data.encoding!r} is not a text encoding "
                "Python knows; use e.g. utf-8 or latin-1"
            ) from None

    def prepare(self, config: SentimentConfig, run_dir: Path) -> SentimentConfig:
        """With `model.pretrain`, trains the language model(s) as stages of this run
        first (kept when finished, resumed when interrupted) and returns the config
        that starts the classifier from them."""
        if config.model.pretrain is None:
            return config
        from rnnkit_recipes.sentiment.pretrain import run_pretraining

        return run_pretraining(config, run_dir)

    def load_data(self, config: SentimentConfig) -> SentimentData:
        from rnnkit_recipes.sentiment import data

        return data.load(config)

    def build_model(self, config: SentimentConfig, data: SentimentData) -> keras.Model:
        from rnnkit.models.sequence_classifier import (
            build_sequence_classifier,
            compile_sequence_classifier,
            make_text_vectorizer,
        )

        vectorizer = make_text_vectorizer(
            data.text.train.texts,
            vocabulary_size=config.data.vocabulary_size,
            lowercase=config.data.lowercase,
        )
        model = build_sequence_classifier(
            vectorizer,
            data.text.class_names,
            sequence_length=config.data.sequence_length,
            keep=config.data.keep,
            embedding_dim=config.model.embedding_dim,
            cell_type=config.model.cell_type,
            units=config.model.units,
            num_layers=config.model.num_layers,
            bidirectional=config.model.bidirectional,
            pooling=config.model.pooling,
            embedding_dropout=config.model.embedding_dropout,
            dropout=config.model.dropout,
            recurrent_dropout=config.model.recurrent_dropout,
            seed=config.train.seed,
        )
        if config.model.pretrain is not None:
            raise ConfigError(
                "model.pretrain trains a language model as a stage of `rnnkit run "
                "sentiment`, which this command does not run; train it once (rnnkit "
                f"run language_model --config {config.model.pretrain}) and set "
                "model.pretrained=RUN_DIR instead"
            )
        if config.model.pretrained is not None:
            _initialize_from_language_model(model, config)
        learning_rate = config.train.learning_rate
        steps = max(1, int(data.train.cardinality()) * config.train.epochs)
        if config.train.schedule == "cosine":
            import keras

            learning_rate = keras.optimizers.schedules.CosineDecay(
                learning_rate, decay_steps=steps
            )
        elif config.train.schedule == "slanted_triangular":
            from rnnkit.optimizers import SlantedTriangular

            learning_rate = SlantedTriangular(learning_rate, total_steps=steps)
        factors = None
        if config.train.discriminative_lr != 1.0 or config.train.gradual_unfreezing:
            # LayerwiseAdam also counts Adam's steps per variable, which layers that
            # join training late (gradual unfreezing) need.
            from rnnkit.models.transfer import discriminative_factors, layer_groups

            factors = discriminative_factors(
                layer_groups(model), config.train.discriminative_lr
            )
        return compile_sequence_classifier(model, learning_rate, factors=factors)

    def callbacks(
        self, config: SentimentConfig, data: SentimentData
    ) -> list[keras.callbacks.Callback]:
        if not config.train.gradual_unfreezing:
            return []
        from rnnkit.models.transfer import GradualUnfreezing

        return [GradualUnfreezing()]

    def search_space(
        self, hp: keras_tuner.HyperParameters, config: SentimentConfig
    ) -> SentimentConfig:
        return config.with_values(
            {
                "model.cell_type": hp.Choice("cell_type", ["lstm", "gru"]),
                "model.units": hp.Int("units", 32, 128, step=32),
                "model.num_layers": hp.Int("num_layers", 1, 2),
                "model.bidirectional": hp.Boolean("bidirectional", default=True),
                "model.embedding_dim": hp.Choice("embedding_dim", [64, 128]),
                "model.dropout": hp.Float("dropout", 0.0, 0.5, step=0.1),
                "train.learning_rate": hp.Float(
                    "learning_rate", 3e-4, 3e-3, sampling="log"
                ),
                "data.sequence_length": hp.Choice("sequence_length", [200, 400]),
            }
        )

    def evaluate(
        self, model: keras.Model, data: SentimentData, config: SentimentConfig
    ) -> Metrics:
        from rnnkit.metrics import classification_metrics

        data = _in_model_order(model, data)
        test_probabilities = self._test_probabilities(model, data, config)
        model_row = classification_metrics(data.text.test.labels, test_probabilities)
        if not config.evaluation.baselines:
            return {"model": model_row}
        from rnnkit_recipes.sentiment.baselines import baseline_table

        validation = _probabilities_by_length(
            model, data.text.validation.texts, config.train.batch_size
        )
        return {
            "model": model_row,
            **baseline_table(data, config, (validation, test_probabilities)),
        }

    def evaluate_validation(
        self, model: keras.Model, data: SentimentData, config: SentimentConfig
    ) -> Metrics:
        """The model's row on the validation split (`rnnkit evaluate --split
        validation`): what a choice between runs or ensembles reads."""
        from rnnkit.metrics import classification_metrics

        data = _in_model_order(model, data)
        probabilities = _probabilities_by_length(
            model, data.text.validation.texts, config.train.batch_size
        )
        return {
            "model": classification_metrics(data.text.validation.labels, probabilities)
        }

    def ensemble(self, models, configs, combine="mean"):
        from rnnkit_recipes.sentiment.ensemble import ensemble_model

        return ensemble_model(models, configs, combine)

    def predict(
        self, model: keras.Model, inputs: Sequence[str], config: SentimentConfig
    ) -> list[str]:
        from rnnkit.data.text import read_inputs
        from rnnkit.models.sequence_classifier import (
            class_names_of,
            class_probabilities,
        )

        texts = read_inputs(
            inputs,
            "nothing to classify: give a text, or a file with one per line",
            config.data.encoding,
        )
        probabilities = class_probabilities(model, texts, verbose=0)
        names = class_names_of(model)
        width = max(len(name) for name in names)
        lines = []
        for text, row in zip(texts, probabilities, strict=True):
            best = int(row.argmax())
            preview = text if len(text) <= 60 else text[:57] + "..."
            lines.append(f"{names[best]:<{width}}  {row[best]:.3f}  {preview}")
        return lines

    def predict_records(
        self,
        model: keras.Model,
        inputs: Sequence[Any],
        config: SentimentConfig,
        calls: dict | None = None,
        explain: bool = False,
    ) -> list[dict[str, Any]]:
        from rnnkit_recipes.sentiment.serve import records

        if not isinstance(explain, bool):
            raise RnnkitError(f"explain must be true or false, got {explain!r}")
        texts = texts_of(inputs, "a text to classify")
        return records(model, texts, config, calls, explain)

    def write_plots(
        self,
        model: keras.Model,
        data: SentimentData,
        config: SentimentConfig,
        plot_dir: Path,
    ) -> None:
        from rnnkit import metrics, plots

        data = _in_model_order(model, data)
        test = data.text.test
        predicted = self._test_probabilities(model, data, config).argmax(axis=1)
        matrix = metrics.confusion_matrix(test.labels, predicted, data.text.num_classes)
        plots.confusion_matrix(
            matrix,
            data.text.class_names,
            plot_dir / "confusion_matrix.png",
            title=f"{self.name}: test split ({len(test)} texts)",
        )

    def export_plan(self, model: keras.Model, config: SentimentConfig, format: str):
        from rnnkit_recipes.sentiment.export import export_plan

        return export_plan(model, config, format)

    def _test_probabilities(
        self, model: keras.Model, data: SentimentData, config: SentimentConfig
    ) -> np.ndarray:
        """Class probabilities (n, K) of the test texts, computed once per model."""
        cached = self._predictions
        if cached is None or cached[0] is not model or cached[1] is not data:
            probabilities = _probabilities_by_length(
                model, data.text.test.texts, config.train.batch_size
            )
            self._predictions = (model, data, probabilities)
        return self._predictions[2]


def _probabilities_by_length(
    model: keras.Model, texts: np.ndarray, batch_size: int
) -> np.ndarray:
    """Class probabilities (n, K) of `texts`, in their order, computed in batches of
    texts of similar length (which pad less)."""
    from rnnkit_recipes.sentiment.data import length_order

    from rnnkit.models.sequence_classifier import class_probabilities

    order = length_order(texts)
    probabilities = class_probabilities(
        model, texts[order], batch_size=batch_size, verbose=0
    )
    probabilities[order] = probabilities.copy()
    return probabilities


def _in_model_order(model: keras.Model, data: SentimentData) -> SentimentData:
    """The data's labels numbered in the class order saved in the model."""
    from rnnkit_recipes.sentiment.data import in_class_order

    from rnnkit.models.sequence_classifier import class_names_of

    return in_class_order(data, class_names_of(model))


def _check_pretraining(config: SentimentConfig) -> None:
    """One-line errors for pre-training settings that cannot work together."""
    model = config.model
    if model.pretrain is not None:
        if model.pretrained is not None or model.pretrained_backward is not None:
            raise ConfigError(
                "model.pretrain trains the language model this run starts from; "
                "model.pretrained names one trained before: set one of them"
            )
        if config.train.strategy == "multiworker":
            raise ConfigError(
                "model.pretrain runs its language model on the chief alone; with "
                "train.strategy=multiworker train it first and set model.pretrained"
            )
    elif model.pretrain_backward or model.pretrain_set:
        key = "pretrain_backward" if model.pretrain_backward else "pretrain_set"
        raise ConfigError(
            f"model.{key} sets up model.pretrain, which is not set; give "
            "model.pretrain a language_model config file"
        )
    if model.pretrained_backward is not None and model.pretrained is None:
        raise ConfigError(
            "model.pretrained_backward initialises the backward directions beside "
            "model.pretrained's forward ones; set model.pretrained too"
        )
    backward = model.pretrained_backward is not None or model.pretrain_backward
    if backward and not model.bidirectional:
        raise ConfigError(
            "a backward language model initialises the backward directions of a "
            "bidirectional classifier; set model.bidirectional=true"
        )
    if model.pretrain is not None:
        # The language model's file and settings, as the run will read them.
        from rnnkit_recipes.sentiment.pretrain import checked_language_model_config

        checked_language_model_config(config)


def _language_model_of(key: str, run_dir: Path, reverse: bool) -> Any:
    """The LanguageModel of the word-level run in `run_dir` (`key` names the setting
    in errors); `reverse`: whether it must read text backwards."""
    from rnnkit.models.language_model import LanguageModel
    from rnnkit.models.transfer import settings_in
    from rnnkit.training import run_dir as run_dir_lib
    from rnnkit.training import runner

    recipe, tables = run_dir_lib.read_run_config(run_dir / runner.CONFIG_FILE)
    if recipe != "language_model":
        raise ConfigError(
            f"{key}: {run_dir} is not a language_model run directory "
            "(train one with: rnnkit run language_model --set data.level=word ...)"
        )
    # The language-model recipe's defaults, for a config.toml that records none.
    recorded = settings_in(tables, {"data.level": "char", "data.reverse": False})
    level = recorded["data.level"]
    if level != "word":
        raise ConfigError(
            f"{key}: {run_dir} is a {level}-level language model; the "
            "classifier reads words (train it with --set data.level=word)"
        )
    if bool(recorded["data.reverse"]) != reverse:
        raise ConfigError(
            f"{key}: {run_dir} reads text "
            + (
                "forwards; the backward directions need one trained with "
                "--set data.reverse=true"
                if reverse
                else "backwards (data.reverse=true); give it as "
                "model.pretrained_backward and a forward model as model.pretrained"
            )
        )
    language_model = runner.load_model(run_dir / runner.MODEL_FILE)
    if not isinstance(language_model, LanguageModel):
        raise ConfigError(f"{key}: {run_dir} holds no LanguageModel")
    return language_model


def _initialize_from_language_model(
    model: keras.Model, config: SentimentConfig
) -> None:
    """Loads the word vectors and recurrent layers of the `model.pretrained` run (and
    the backward directions from `model.pretrained_backward`'s)."""
    import logging

    from rnnkit.models.transfer import initialize_from_language_model

    forward = _language_model_of(
        "model.pretrained", Path(config.model.pretrained), reverse=False
    )
    backward = None
    if config.model.pretrained_backward is not None:
        backward = _language_model_of(
            "model.pretrained_backward",
            Path(config.model.pretrained_backward),
            reverse=True,
        )
    try:
        report = initialize_from_language_model(
            model, forward, lowercase=config.data.lowercase, backward=backward
        )
    except ValueError as error:
        raise ConfigError(f"model.pretrained: {error}") from None
    logging.getLogger("rnnkit").info("pre-trained: %s", report)
