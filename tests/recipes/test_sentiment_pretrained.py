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


@pytest.fixture(scope="module")
def backward_language_model_run(reviews, tmp_path_factory):
    """The same language model on the reviews read backwards (data.reverse)."""
    return train_language_model(
        tmp_path_factory.mktemp("lm_backward") / "run",
        reviews[0],
        "--set",
        "data.reverse=true",
    )


def test_backward_directions_take_the_backward_language_model(
    reviews, language_model_run, backward_language_model_run
):
    config = sentiment_config(
        reviews,
        **{
            "model.pretrained": str(language_model_run),
            "model.pretrained_backward": str(backward_language_model_run),
        },
    )
    recipe = SentimentRecipe()
    classifier = recipe.build_model(config, recipe.load_data(config))
    layer = classifier.get_layer("bidirectional_1")
    for direction, run_dir in (
        (layer.forward_layer, language_model_run),
        (layer.backward_layer, backward_language_model_run),
    ):
        source = runner.load_model(run_dir / "model.keras").recurrent_layers[0]
        weights = source.get_weights()
        assert len(weights) == len(direction.get_weights()) == 3
        for ours, theirs in zip(direction.get_weights(), weights, strict=True):
            np.testing.assert_array_equal(ours, theirs)
    # The two language models learned different weights: the check above can fail.
    forward_kernel = layer.forward_layer.get_weights()[0]
    assert not np.allclose(forward_kernel, layer.backward_layer.get_weights()[0])


def test_a_language_model_in_the_wrong_direction_is_refused(
    reviews, language_model_run, backward_language_model_run
):
    recipe = SentimentRecipe()
    for values, message in (
        ({"model.pretrained": str(backward_language_model_run)}, "reads text backw"),
        (
            {
                "model.pretrained": str(language_model_run),
                "model.pretrained_backward": str(language_model_run),
            },
            "reads text forwards; the backward directions need",
        ),
    ):
        config = sentiment_config(reviews, **values)
        with pytest.raises(config_lib.ConfigError, match=message):
            recipe.build_model(config, recipe.load_data(config))


@pytest.mark.parametrize(
    "values, message",
    [
        ({"model.pretrain_backward": True}, "model.pretrain_backward sets up"),
        ({"model.pretrain_set": ("train.epochs=2",)}, "model.pretrain_set sets up"),
        (
            {"model.pretrain": "lm.toml", "model.pretrained": "runs/lm"},
            "set one of them",
        ),
        ({"model.pretrained_backward": "runs/lm"}, "set model.pretrained too"),
        (
            {
                "model.pretrain": "lm.toml",
                "model.pretrain_backward": True,
                "model.bidirectional": False,
            },
            "set model.bidirectional=true",
        ),
        (
            {"model.pretrain": "lm.toml", "train.strategy": "multiworker"},
            "train it first and set model.pretrained",
        ),
    ],
)
def test_pretraining_settings_that_cannot_work_together(reviews, values, message):
    config = sentiment_config(reviews, **values)
    with pytest.raises(config_lib.ConfigError, match=message):
        SentimentRecipe().check_config(config)


def write_language_model_config(path, train_csv, **values):
    """A language_model config file for model.pretrain: the tiny word-level GRU of
    `train_language_model`."""
    from rnnkit_recipes.language_model.recipe import LanguageModelConfig

    settings = {
        "data.path": str(train_csv), "data.level": "word", "data.min_frequency": 2,
        "data.limit": 10000, "model.cell_type": "gru", "model.units": 16,
        "model.embedding_dim": 32, "train.epochs": 1, "train.batch_size": 8,
        "train.bptt": 16, "evaluation.batch_size": 2, **values,
    }  # fmt: skip
    config = config_lib.resolve(LanguageModelConfig, None, settings)
    path.write_text(config_lib.to_toml(config, runner.config_header("language_model")))
    return path


def test_pretraining_files_and_settings_are_checked_before_training(reviews, tmp_path):
    recipe = SentimentRecipe()
    char_file = write_language_model_config(
        tmp_path / "char.toml", reviews[0], **{"data.level": "char"}
    )
    word_file = write_language_model_config(tmp_path / "word.toml", reviews[0])
    for values, message in (
        ({"model.pretrain": str(tmp_path / "none.toml")}, "model.pretrain: no file"),
        ({"model.pretrain": str(char_file)}, "char-level language model"),
        (
            {"model.pretrain": str(word_file), "model.pretrain_set": ("x.y=1",)},
            "model.pretrain_set: unknown config key 'x.y'",
        ),
        (
            {
                "model.pretrain": str(word_file),
                "model.units": 32,
                "model.pretrain_set": ("model.units=16",),
            },
            "model.pretrain_set: the language model's model.units is 16, the "
            "classifier's 32; leave model.units out of model.pretrain_set",
        ),
        (
            {
                "model.pretrain": str(word_file),
                "model.pretrain_set": ("model.architecture=transformer",),
            },
            "trains a transformer language model",
        ),
        (
            {
                "model.pretrain": str(word_file),
                "model.pretrain_set": ("model.block=hawk",),
            },
            "trains a language model of hawk blocks",
        ),
        (
            {
                "model.pretrain": str(word_file),
                "model.pretrain_set": ("data.vocabulary_size=1",),
            },
            "model.pretrain: the language model's config: data.vocabulary_size=1",
        ),
    ):
        config = sentiment_config(reviews, **values)
        with pytest.raises(config_lib.ConfigError, match=message):
            recipe.prepare(config, tmp_path / "run")
        assert not (tmp_path / "run").exists()
        # The same before the run starts, and in `--dry-run`: check_config.
        with pytest.raises(config_lib.ConfigError, match=message):
            recipe.check_config(config)
    result = invoke(
        "run", "sentiment", "--config", str(SMOKE_CONFIG),
        "--set", f"model.pretrain={word_file}",
        "--set", 'model.pretrain_set=["train.seed=7", "x.y=1"]', "--dry-run",
    )  # fmt: skip
    assert result.exit_code == 1, result.output
    assert result.output.strip().splitlines()[-1] == (
        "Error: model.pretrain_set: unknown config key 'x.y' (--set)"
    )
    # Tuning and other commands that build the model without running the stage.
    config = sentiment_config(reviews, **{"model.pretrain": str(word_file)})
    with pytest.raises(config_lib.ConfigError, match="train it once"):
        recipe.build_model(config, recipe.load_data(config))


def test_the_language_model_takes_the_classifiers_cell_sizes_and_seed(
    reviews, tmp_path
):
    """A width, cell or seed of the classifier is one setting: the language model
    of `model.pretrain` takes them (its file says GRU, 16 units, 32-dimensional
    vectors); `model.pretrain_set` still sets its other keys."""
    from rnnkit_recipes.sentiment.pretrain import checked_language_model_config

    word_file = write_language_model_config(tmp_path / "word.toml", reviews[0])
    config = sentiment_config(reviews, **{
        "model.pretrain": str(word_file), "model.cell_type": "mingru",
        "model.units": 24, "model.embedding_dim": 12, "train.seed": 7,
        "model.pretrain_set": ("train.epochs=2",),
    })  # fmt: skip
    SentimentRecipe().check_config(config)
    _, language_model = checked_language_model_config(config)
    model = language_model.model
    assert (model.cell_type, model.units, model.embedding_dim) == ("mingru", 24, 12)
    assert (language_model.train.seed, language_model.train.epochs) == (7, 2)
    assert language_model.data.path == str(reviews[0])  # the file's own settings


@pytest.mark.slow
def test_one_command_pretrains_both_directions_and_resumes_every_stage(
    reviews, tmp_path
):
    """`model.pretrain`: one `rnnkit run sentiment` trains the forward and backward
    language models as stages of its run directory, then the classifier from them;
    `--resume` keeps a finished stage, continues an interrupted one, then the rest."""
    import shutil

    from rnnkit_recipes.sentiment.pretrain import language_model_config

    from rnnkit.training.stages import run_stage

    train, test = reviews
    lm_file = write_language_model_config(tmp_path / "lm.toml", train)
    run_dir = tmp_path / "run"
    arguments = [
        "--config", str(SMOKE_CONFIG), "--set", f"data.path={train}",
        "--set", f"data.test_path={test}", "--set", "data.limit=0",
        "--set", "train.epochs=1", "--set", f"model.pretrain={lm_file}",
        "--set", "model.pretrain_backward=true",
        "--set", "model.pretrain_set=train.bptt=12",
    ]  # fmt: skip
    result = invoke("run", "sentiment", "--run-dir", str(run_dir), *arguments)
    assert result.exit_code == 0, result.output[-3000:]
    assert "1 backward layer(s) of the backward model" in result.output
    stages = run_dir / "stages"
    for name, reverse in (("language_model", False), ("language_model_backward", True)):
        recorded = config_lib.read_toml(stages / name / "config.toml")
        assert recorded["data"]["reverse"] is reverse
        assert recorded["train"]["bptt"] == 12 and recorded["train"]["seed"] == 1337
        assert (stages / name / "run.json").is_file()
        assert (stages / name / "model.keras").is_file()
    recorded = config_lib.read_toml(run_dir / "config.toml")
    assert recorded["model"]["pretrain"] == str(lm_file)
    assert (run_dir / "run.json").is_file()

    # An interruption during the backward stage: the forward stage finished, the
    # backward one has its config and nothing more, the classifier nothing.
    interrupted = tmp_path / "interrupted"
    (interrupted / "stages").mkdir(parents=True)
    shutil.copytree(stages / "language_model", interrupted / "stages/language_model")
    (interrupted / "stages/language_model_backward").mkdir()
    shutil.copy(
        stages / "language_model_backward/config.toml",
        interrupted / "stages/language_model_backward/config.toml",
    )
    shutil.copy(run_dir / "config.toml", interrupted / "config.toml")
    finished = (interrupted / "stages/language_model/run.json").stat().st_mtime_ns
    result = invoke("run", "sentiment", "--resume", str(interrupted))
    assert result.exit_code == 0, result.output[-3000:]
    assert "stage language_model: finished before, kept" in result.output
    assert "stage language_model_backward: resuming the language_model run" in (
        result.output
    )
    assert (interrupted / "stages/language_model/run.json").stat().st_mtime_ns == (
        finished
    )
    assert (interrupted / "stages/language_model_backward/run.json").is_file()
    assert (interrupted / "run.json").is_file()

    # A stage is never continued with other settings than it started with.
    config = sentiment_config(reviews, **{"model.pretrain": str(lm_file)})
    recipe, stage_config = language_model_config(config)
    with pytest.raises(config_lib.ConfigError, match=r"other settings \(train.bptt\)"):
        run_stage(recipe, stage_config, run_dir, "language_model")


@pytest.mark.parametrize(
    ("name", "base", "lm_config"),
    [
        ("imdb_pretrained", "imdb", "imdb_reviews"),
        ("sst2_pretrained", "sst2", "sst2_phrases"),
    ],
)
def test_the_pretrained_config_is_the_benchmarks_discriminative_variant(
    monkeypatch, name, base, lm_config
):
    """configs/NAME_pretrained.toml is what benchmarks/sentiment_pretraining.py
    measured as `discriminative` (the README's figures): the base config, the language
    model of the benchmark's --lm-config, its layer-wise rates."""
    import importlib
    import sys

    from tests.sentiment_support import ROOT

    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    benchmark = importlib.import_module("sentiment_pretraining")
    monkeypatch.delitem(sys.modules, "sentiment_pretraining")
    configs = ROOT / "recipes" / "sentiment" / "configs"
    shipped = config_lib.load_toml(SentimentConfig, configs / f"{name}.toml")
    variant = dict(benchmark.VARIANTS["discriminative"])
    assert variant.pop("pretrained") is True
    lm_config = f"recipes/language_model/configs/{lm_config}.toml"
    assert (ROOT / lm_config).is_file()
    expected = config_lib.resolve(
        SentimentConfig,
        configs / f"{base}.toml",
        {**variant, "model.pretrain": lm_config},
    )
    assert shipped == expected
    # The language model has the classifier's shapes, so its layers can be copied.
    from rnnkit_recipes.language_model.config import LanguageModelConfig

    language_model = config_lib.load_toml(LanguageModelConfig, ROOT / lm_config)
    assert language_model.data.level == "word"
    assert language_model.data.path == shipped.data.path  # the training text only
    assert language_model.data.lowercase == shipped.data.lowercase
    for key in ("model.cell_type", "model.units", "model.embedding_dim"):
        assert language_model.get(key) == shipped.get(key), key


def test_the_wide_pretrained_config_is_the_measured_one(monkeypatch):
    """configs/imdb_pretrained_256.toml, the README's figure of the wide path:
    imdb_pretrained.toml at 256 units and word vectors, its language model as wide
    and trained with the classifier's seed (each seed measured had its own)."""
    from rnnkit_recipes.sentiment.pretrain import checked_language_model_config

    from tests.sentiment_support import ROOT

    monkeypatch.chdir(ROOT)  # model.pretrain is relative to the repository root
    configs = ROOT / "recipes" / "sentiment" / "configs"
    wide = config_lib.load_toml(SentimentConfig, configs / "imdb_pretrained_256.toml")
    narrow = config_lib.load_toml(SentimentConfig, configs / "imdb_pretrained.toml")
    narrow_values = narrow.flat()
    changed = {k for k, v in wide.flat().items() if narrow_values[k] != v}
    assert changed == {"model.units", "model.embedding_dim"}
    assert (wide.model.units, wide.model.embedding_dim) == (256, 256)
    for seed in (1337, 1, 2):
        _, language_model = checked_language_model_config(
            wide.with_values({"train.seed": seed})
        )
        model = language_model.model
        assert (model.units, model.embedding_dim, model.tie_weights) == (256, 256, True)
        assert language_model.train.seed == seed


def test_ulmfit_schedule_and_concat_pooling_from_the_config(reviews):
    """train.schedule=slanted_triangular gives the optimizer ULMFiT's schedule over
    every step of the run; model.pooling=concat gives the classifier concat pooling."""
    from rnnkit.optimizers import SlantedTriangular

    recipe = SentimentRecipe()
    config = sentiment_config(
        reviews,
        **{"train.schedule": "slanted_triangular", "model.pooling": "concat"},
    )
    data = recipe.load_data(config)
    model = recipe.build_model(config, data)
    import keras

    schedule = keras.optimizers.serialize(model.optimizer)["config"]["learning_rate"]
    assert schedule["class_name"] == SlantedTriangular.__name__
    steps = int(data.train.cardinality()) * config.train.epochs
    assert schedule["config"]["total_steps"] == steps
    assert schedule["config"]["peak"] == config.train.learning_rate
    pooled = model.get_layer("concat_pooling").output
    # Final states, maximum and mean of a bidirectional GRU of 16 units.
    assert pooled.shape[-1] == 3 * 2 * 16
