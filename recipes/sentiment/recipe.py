"""Sentiment: many-to-one classification of reviews with an rnnkit recurrent classifier.

`rnnkit run sentiment` trains a bidirectional rnnkit GRU on IMDB movie reviews
(tensorflow-datasets, or local files through `data.path`) and reports accuracy,
precision, recall, F1 and ROC AUC on the test split next to three baselines trained on
the same training texts: the majority class, a unigram bag-of-words logistic
regression, and word uni+bigram tf-idf logistic regression (the linear baseline of IMDB
papers).

The module stays light: TensorFlow, Keras and scikit-learn are imported inside the
methods, because `rnnkit list` imports every recipe module to read its summary.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from rnnkit.recipe import (
    DataConfig,
    EvaluationConfig,
    Metrics,
    ModelConfig,
    Recipe,
    RecipeConfig,
    TrainConfig,
    field,
    section,
)

if TYPE_CHECKING:
    import keras
    import keras_tuner
    import numpy as np
    from rnnkit_recipes.sentiment.data import SentimentData

    from rnnkit.data.text import TextSplit


@dataclasses.dataclass
class SentimentDataConfig(DataConfig):
    test_path: str | None = field(
        None,
        help="CSV/TSV file of test examples for a data.path file (otherwise "
        "data.test_fraction of data.path is held out).",
    )
    text_column: str = field("text", help="Column of a CSV/TSV that holds the text.")
    label_column: str = field("label", help="Column of a CSV/TSV that holds the label.")
    class_names: tuple[str, ...] = field(
        (),
        help="Class names in label order; labels may be these names or their indices "
        "(empty: inferred, and 0/1 read as negative/positive).",
    )
    encoding: str = field("utf-8", help="Text encoding of local files.")
    validation_fraction: float = field(
        0.1,
        help="Share of the training data held out for early stopping (stratified).",
        above=0.0,
        below=1.0,
    )
    test_fraction: float = field(
        0.1,
        help="Share held out for testing when the source has no test split.",
        above=0.0,
        below=1.0,
    )
    limit: int = field(
        0,
        help="Keep a stratified sample of at most this many examples per split "
        "(0 keeps all); for quick trials.",
        at_least=0,
    )
    vocabulary_size: int = field(
        30000,
        help="Most frequent tokens kept (with padding and out-of-vocabulary).",
        at_least=3,
    )
    sequence_length: int = field(
        800, help="Most tokens of a text that the model reads.", at_least=1
    )
    keep: str = field(
        "first",
        help="Tokens kept from longer texts: the first or the last sequence_length.",
        choices=("first", "last"),
    )
    lowercase: bool = field(True, help="Lower-case texts before tokenizing.")
    bucket: bool = field(
        True, help="Batch training texts of similar length together (faster)."
    )


@dataclasses.dataclass
class SentimentModelConfig(ModelConfig):
    cell_type: str = field(
        "gru", help="Recurrent cell.", choices=("lstm", "gru", "simple_rnn")
    )
    units: int = field(128, help="Units per recurrent layer and direction.", at_least=1)
    num_layers: int = field(1, help="Stacked recurrent layers.", at_least=1)
    bidirectional: bool = field(True, help="Read texts in both directions.")
    embedding_dim: int = field(
        128, help="Size of the learned word vectors.", at_least=1
    )
    pooling: str = field(
        "mean_max",
        help=(
            "Summary of the text: the last state, or the mean, the maximum or both"
            " of the outputs over time."
        ),
        choices=("last", "mean", "max", "mean_max"),
    )
    embedding_dropout: float = field(
        0.3, help="Spatial dropout rate on the word vectors.", at_least=0.0, below=1.0
    )
    dropout: float = field(
        0.5,
        help="Dropout rate on the recurrent inputs and before the output layer.",
        at_least=0.0,
        below=1.0,
    )
    recurrent_dropout: float = field(
        0.0,
        help="Dropout rate on the recurrent state (slower when > 0).",
        at_least=0.0,
        below=1.0,
    )
    pretrained: str | None = field(
        None,
        help="Run directory of a word-level language_model run whose word vectors "
        "(matched by token) and recurrent layers initialise the classifier.",
    )


@dataclasses.dataclass
class SentimentTrainConfig(TrainConfig):
    schedule: str = field(
        "cosine",
        help="Learning rate over training: constant, or cosine decay from "
        "train.learning_rate to 0 at the end of train.epochs.",
        choices=("constant", "cosine"),
    )
    discriminative_lr: float = field(
        1.0,
        help="Divide the learning rate by this per layer group going down from the "
        "output layer (ULMFiT: 2.6); 1 trains every layer at train.learning_rate.",
        at_least=1.0,
    )
    gradual_unfreezing: bool = field(
        False,
        help="Train only the output layer in epoch 1 and one more layer group "
        "(recurrent layers from the top, then the word vectors) in each later epoch.",
    )


@dataclasses.dataclass
class SentimentEvaluationConfig(EvaluationConfig):
    baselines: bool = field(
        True,
        help="Also fit and test the majority, bag-of-words and tf-idf bigram "
        "baselines (about 3 minutes on all of IMDB on 2 cores).",
    )


@dataclasses.dataclass
class SentimentConfig(RecipeConfig):
    data: SentimentDataConfig = section(SentimentDataConfig, "Reviews and tokens.")
    model: SentimentModelConfig = section(SentimentModelConfig, "The classifier.")
    train: SentimentTrainConfig = section(
        SentimentTrainConfig, "The training loop.", epochs=3, batch_size=64, patience=1
    )
    evaluation: SentimentEvaluationConfig = section(
        SentimentEvaluationConfig, "How the test figures are computed."
    )


class SentimentRecipe(Recipe):
    """IMDB-style sentiment classification with an rnnkit sequence classifier."""

    name = "sentiment"
    summary = (
        "Review sentiment (IMDB): bidirectional rnnkit GRU vs majority, "
        "bag-of-words and tf-idf bigram baselines"
    )
    Config = SentimentConfig

    def __init__(self) -> None:
        # evaluate() and write_plots() both need the test predictions of one model.
        self._predictions: tuple[object, object, np.ndarray] | None = None

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
        if config.model.pretrained is not None:
            _initialize_from_language_model(model, config)
        learning_rate = config.train.learning_rate
        if config.train.schedule == "cosine":
            import keras

            steps = int(data.train.cardinality()) * config.train.epochs
            learning_rate = keras.optimizers.schedules.CosineDecay(
                learning_rate, decay_steps=max(1, steps)
            )
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

        model_row = classification_metrics(
            data.text.test.labels, self._test_probabilities(model, data, config)
        )
        if not config.evaluation.baselines:
            return {"model": model_row}
        return {"model": model_row, **baseline_table(data, config)}

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

    def write_plots(
        self,
        model: keras.Model,
        data: SentimentData,
        config: SentimentConfig,
        plot_dir: Path,
    ) -> None:
        from rnnkit import metrics, plots

        test = data.text.test
        predicted = self._test_probabilities(model, data, config).argmax(axis=1)
        matrix = metrics.confusion_matrix(test.labels, predicted, data.text.num_classes)
        plots.confusion_matrix(
            matrix,
            data.text.class_names,
            plot_dir / "confusion_matrix.png",
            title=f"{self.name}: test split ({len(test)} texts)",
        )

    def _test_probabilities(
        self, model: keras.Model, data: SentimentData, config: SentimentConfig
    ) -> np.ndarray:
        """Class probabilities (n, K) of the test texts, computed once per model."""
        from rnnkit_recipes.sentiment.data import length_order

        from rnnkit.models.sequence_classifier import class_probabilities

        cached = self._predictions
        if cached is None or cached[0] is not model or cached[1] is not data:
            texts = data.text.test.texts
            # Texts of similar length in one batch pad less; the order is undone below.
            order = length_order(texts)
            probabilities = class_probabilities(
                model, texts[order], batch_size=config.train.batch_size, verbose=0
            )
            probabilities[order] = probabilities.copy()
            self._predictions = (model, data, probabilities)
        return self._predictions[2]


def _initialize_from_language_model(
    model: keras.Model, config: SentimentConfig
) -> None:
    """Loads the word vectors and recurrent layers of the `model.pretrained` run."""
    import logging

    from rnnkit.config import load_toml
    from rnnkit.errors import ConfigError
    from rnnkit.models.language_model import LanguageModel
    from rnnkit.models.transfer import initialize_from_language_model
    from rnnkit.training import runner

    run_dir = Path(config.model.pretrained)
    if runner.recipe_of(run_dir / runner.CONFIG_FILE) != "language_model":
        raise ConfigError(
            f"model.pretrained: {run_dir} is not a language_model run directory "
            "(train one with: rnnkit run language_model --set data.level=word ...)"
        )
    from rnnkit_recipes.language_model.recipe import LanguageModelConfig

    level = load_toml(LanguageModelConfig, run_dir / runner.CONFIG_FILE).data.level
    if level != "word":
        raise ConfigError(
            f"model.pretrained: {run_dir} is a {level}-level language model; the "
            "classifier reads words (train it with --set data.level=word)"
        )
    language_model = runner.load_model(run_dir / runner.MODEL_FILE)
    if not isinstance(language_model, LanguageModel):
        raise ConfigError(f"model.pretrained: {run_dir} holds no LanguageModel")
    try:
        report = initialize_from_language_model(
            model, language_model, lowercase=config.data.lowercase
        )
    except ValueError as error:
        raise ConfigError(f"model.pretrained: {error}") from None
    logging.getLogger("rnnkit").info("pre-trained: %s", report)


def _majority_probabilities(
    train: TextSplit, test: TextSplit, num_classes: int
) -> np.ndarray:
    """Every test text gets the training class frequencies: the majority class wins."""
    import numpy as np

    frequencies = np.bincount(train.labels, minlength=num_classes) / len(train)
    return np.tile(frequencies, (len(test), 1))


def baseline_table(data: SentimentData, config: SentimentConfig) -> Metrics:
    """The baselines' test figures, each fitted on the same training texts: the
    majority class, unigram bag-of-words and uni+bigram tf-idf logistic regressions."""
    from rnnkit.metrics import classification_metrics

    text = data.text
    train, test, num_classes = text.train, text.test, text.num_classes
    return {
        "majority": classification_metrics(
            test.labels, _majority_probabilities(train, test, num_classes)
        ),
        "bag_of_words": classification_metrics(
            test.labels, _bag_of_words_probabilities(train, test, num_classes, config)
        ),
        "tfidf_bigrams": classification_metrics(
            test.labels,
            _tfidf_bigram_probabilities(
                train, text.validation, test, num_classes, config
            ),
        ),
    }


def _bag_of_words_probabilities(
    train: TextSplit, test: TextSplit, num_classes: int, config: SentimentConfig
) -> np.ndarray:
    """A unigram bag-of-words logistic regression (scikit-learn) on the same training
    texts, with the same vocabulary size and lower-casing as the model."""
    import numpy as np
    from sklearn.feature_extraction.text import CountVectorizer
    from sklearn.linear_model import LogisticRegression

    vectorizer = CountVectorizer(
        binary=True,
        lowercase=config.data.lowercase,
        max_features=config.data.vocabulary_size,
    )
    features = vectorizer.fit_transform(train.texts)
    classifier = LogisticRegression(max_iter=1000)
    classifier.fit(features, train.labels)
    probabilities = classifier.predict_proba(vectorizer.transform(test.texts))
    # Columns follow classifier.classes_ (the classes seen in training).
    by_class = np.zeros((len(test), num_classes))
    by_class[:, classifier.classes_] = probabilities
    return by_class


# The inverse regularisation strengths the tf-idf baseline chooses from.
TFIDF_C_GRID = (1.0, 4.0, 16.0, 64.0)


def _tfidf_bigram_probabilities(
    train: TextSplit,
    validation: TextSplit,
    test: TextSplit,
    num_classes: int,
    config: SentimentConfig,
) -> np.ndarray:
    """The standard strong linear baseline of IMDB papers: word unigram + bigram tf-idf
    (sublinear term frequency, n-grams seen in at least two training texts) and a
    logistic regression whose C is chosen on the validation split (never the test)."""
    import numpy as np
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import LogisticRegression

    vectorizer = TfidfVectorizer(
        ngram_range=(1, 2),
        min_df=2,
        sublinear_tf=True,
        lowercase=config.data.lowercase,
    )
    features = vectorizer.fit_transform(train.texts)
    best, best_accuracy = None, -1.0
    validation_features = vectorizer.transform(validation.texts)
    for strength in TFIDF_C_GRID:
        classifier = LogisticRegression(C=strength, max_iter=1000)
        classifier.fit(features, train.labels)
        accuracy = classifier.score(validation_features, validation.labels)
        if accuracy > best_accuracy:
            best, best_accuracy = classifier, accuracy
    probabilities = best.predict_proba(vectorizer.transform(test.texts))
    by_class = np.zeros((len(test), num_classes))
    by_class[:, best.classes_] = probabilities
    return by_class
