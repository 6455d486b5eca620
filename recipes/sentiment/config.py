"""The configuration of the sentiment recipe.

The typed configuration of the recipe: one dataclass per section, each field with its
default and help text; the command line's options come from the same fields.
"""

from __future__ import annotations

import dataclasses

from rnnkit.recipe import (
    DataConfig,
    EvaluationConfig,
    ModelConfig,
    RecipeConfig,
    TrainConfig,
    field,
    section,
)
from rnnkit.registry import recurrent_names


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
    split_seed: int = field(
        0,
        help="Seed of the test split held out of a file without data.test_path, and "
        "of a data.limit sample of the test split (not train.seed, so that every seed "
        "and every evaluation tests on the same examples).",
        at_least=0,
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
    cell_type: str = field("gru", help="Recurrent cell.", choices=recurrent_names())
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
            " of the outputs over time, or concat: the last state, the maximum and"
            " the mean (ULMFiT's concat pooling)."
        ),
        choices=("last", "mean", "max", "mean_max", "concat"),
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
    pretrained_backward: str | None = field(
        None,
        help="Run directory of a language_model run on reversed text (data.reverse) "
        "whose recurrent layers initialise the backward directions (with "
        "model.pretrained and model.bidirectional).",
    )
    pretrain: str | None = field(
        None,
        help="A language_model config file: rnnkit run first trains that language "
        "model into RUN_DIR/stages/language_model (resumable) and starts the "
        "classifier from it, as model.pretrained does.",
    )
    pretrain_backward: bool = field(
        False,
        help="With model.pretrain: also train it on reversed text (stage "
        "language_model_backward) for the backward directions.",
    )
    pretrain_set: tuple[str, ...] = field(
        (),
        help="With model.pretrain: KEY=VALUE settings of the language model's config, "
        "e.g. train.epochs=2 (its train.seed is the classifier's unless set here; "
        "its model.cell_type, units and embedding_dim are the classifier's).",
    )


@dataclasses.dataclass
class SentimentTrainConfig(TrainConfig):
    schedule: str = field(
        "cosine",
        help="Learning rate over training: constant; cosine decay from "
        "train.learning_rate to 0 at the end of train.epochs; or slanted_triangular "
        "(ULMFiT): up from train.learning_rate / 32 to it over the first 10% of the "
        "steps, then back down by the end of train.epochs.",
        choices=("constant", "cosine", "slanted_triangular"),
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
        "baselines (minutes on all of IMDB; see docs/performance.md).",
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
