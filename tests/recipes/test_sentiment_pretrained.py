"""Language-model pre-training for the sentiment recipe (`model.pretrained`): a
word-level language model trained on real IMDB review text initialises the
classifier's word vectors (matched by token) and its forward recurrent layer."""

from __future__ import annotations

import numpy as np
import pytest
from click.testing import CliRunner
from rnnkit_recipes.sentiment.recipe import SentimentConfig, SentimentRecipe

from rnnkit import config as config_lib
from rnnkit.cli import main
from rnnkit.models.sequence_classifier import TextStandardizer
from rnnkit.training import runner
from tests.sentiment_support import SMOKE_CONFIG, write_imdb_csv


def invoke(*args: str):
    return CliRunner().invoke(main, list(args))


@pytest.fixture(scope="module")
def reviews(tmp_path_factory):
    folder = tmp_path_factory.mktemp("reviews")
    return (
        write_imdb_csv(folder / "train.csv.gz", "train", 100),
        write_imdb_csv(folder / "test.csv", "test", 50),
    )


def train_language_model(run_dir, train_csv, *extra):
    """One epoch of a GRU 16 word-level language model on the review texts."""
    result = invoke(
        "run", "language_model", "--run-dir", str(run_dir),
        "--set", f"data.path={train_csv}", "--set", "data.level=word",
        "--set", "data.min_frequency=2", "--set", "model.cell_type=gru",
        "--set", "model.units=16", "--set", "model.embedding_dim=32",
        "--set", "train.epochs=1", "--set", "train.batch_size=8",
        "--set", "train.bptt=16", "--set", "evaluation.batch_size=2",
        "--set", "data.limit=10000", *extra,
    )  # fmt: skip
    assert result.exit_code == 0, result.output[-3000:]
    return run_dir


@pytest.fixture(scope="module")
def language_model_run(reviews, tmp_path_factory):
    return train_language_model(tmp_path_factory.mktemp("lm") / "run", reviews[0])


def sentiment_config(reviews, **values):
    train, test = reviews
    settings = {"data.path": str(train), "data.test_path": str(test),
                "data.limit": 0, **values}  # fmt: skip
    return config_lib.resolve(SentimentConfig, SMOKE_CONFIG, settings)


def test_pretrained_vectors_and_recurrent_weights_are_copied(
    reviews, language_model_run
):
    config = sentiment_config(reviews, **{"model.pretrained": str(language_model_run)})
    recipe = SentimentRecipe()
    data = recipe.load_data(config)
    classifier = recipe.build_model(config, data)
    language_model = runner.load_model(language_model_run / "model.keras")

    vocabulary = classifier.get_layer("vectorizer").get_vocabulary()
    rows = classifier.get_layer("embedding").embeddings.numpy()
    vectors = language_model.embedding.embeddings.numpy()
    standardize = TextStandardizer()
    matched = {}
    # The most frequent language-model token (first in its vocabulary) whose
    # standardized form is one classifier token gives that token its vector.
    for lm_index, token in enumerate(language_model.tokens):
        parts = standardize(np.array([token]))[0].numpy().decode().split()
        if len(parts) == 1 and parts[0] in vocabulary[2:]:
            matched.setdefault(parts[0], lm_index)
    for word, lm_index in matched.items():
        np.testing.assert_array_equal(rows[vocabulary.index(word)], vectors[lm_index])
    assert len(matched) > 100
    forward = classifier.get_layer("bidirectional_1").forward_layer
    for ours, theirs in zip(
        forward.get_weights(),
        language_model.recurrent_layers[0].get_weights(),
        strict=True,
    ):
        np.testing.assert_array_equal(ours, theirs)


@pytest.mark.slow
def test_sentiment_run_with_a_pretrained_language_model(
    reviews, language_model_run, tmp_path
):
    train, test = reviews
    result = invoke(
        "run", "sentiment", "--config", str(SMOKE_CONFIG), "--run-dir",
        str(tmp_path / "run"), "--set", f"data.path={train}",
        "--set", f"data.test_path={test}", "--set", "data.limit=0",
        "--set", "train.epochs=2", "--set", f"model.pretrained={language_model_run}",
        "--set", "train.gradual_unfreezing=true",
        "--set", "train.discriminative_lr=2.6",
    )  # fmt: skip
    assert result.exit_code == 0, result.output[-3000:]
    assert "pre-trained:" in result.output and "word vectors" in result.output
    assert "gradual unfreezing, epoch 1: training probabilities\n" in result.output
    assert "gradual unfreezing, epoch 2: training probabilities, bidirectional" in (
        result.output
    )
    model = runner.load_model(tmp_path / "run" / "model.keras")
    assert model.optimizer.factors["embedding"] == pytest.approx(1 / 2.6**2)


def test_fine_tuning_options_choose_the_optimizer_and_callback(reviews):
    from rnnkit.models.transfer import GradualUnfreezing
    from rnnkit.optimizers import LayerwiseAdam

    recipe = SentimentRecipe()
    plain = sentiment_config(reviews)
    data = recipe.load_data(plain)
    assert not isinstance(recipe.build_model(plain, data).optimizer, LayerwiseAdam)
    assert recipe.callbacks(plain, data) == []
    tuned = sentiment_config(
        reviews,
        **{"train.discriminative_lr": 2.6, "train.gradual_unfreezing": True},
    )
    model = recipe.build_model(tuned, data)
    assert isinstance(model.optimizer, LayerwiseAdam)
    assert model.optimizer.factors["probabilities"] == 1.0
    assert model.optimizer.factors["embedding"] == pytest.approx(1 / 2.6**2)
    (callback,) = recipe.callbacks(tuned, data)
    assert isinstance(callback, GradualUnfreezing)
    with pytest.raises(config_lib.ConfigError, match="discriminative_lr"):
        sentiment_config(reviews, **{"train.discriminative_lr": 0.5})


@pytest.mark.parametrize(
    "values, message",
    [
        ({"model.units": 8}, "set the same cell type and units"),
        ({"model.embedding_dim": 16}, "embedding_dim is 32"),
    ],
)
def test_mismatched_shapes_are_one_line_errors(
    reviews, language_model_run, tmp_path, values, message
):
    config = sentiment_config(
        reviews, **{"model.pretrained": str(language_model_run), **values}
    )
    recipe = SentimentRecipe()
    with pytest.raises(config_lib.ConfigError, match=message):
        recipe.build_model(config, recipe.load_data(config))


def test_a_character_model_or_another_run_is_refused(reviews, tmp_path):
    from rnnkit_recipes.language_model.recipe import LanguageModelConfig

    # What the check reads: the recipe and data.level in the run's config.toml.
    char_run = tmp_path / "char"
    char_run.mkdir()
    runner.write_text(
        char_run / "config.toml",
        config_lib.to_toml(
            LanguageModelConfig(), runner.config_header("language_model")
        ),
    )
    recipe = SentimentRecipe()
    for run_dir, message in ((char_run, "char-level"), (tmp_path, "not a language")):
        config = sentiment_config(reviews, **{"model.pretrained": str(run_dir)})
        with pytest.raises(config_lib.ConfigError, match=message):
            recipe.build_model(config, recipe.load_data(config))
