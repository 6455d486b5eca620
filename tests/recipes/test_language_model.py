"""The language-model recipe: the truncated-BPTT pipeline and state resets on
hand-made token streams, then end to end on real text (The Time Machine, Penn
Treebank) through the runner and the `rnnkit` launcher."""

from __future__ import annotations

import csv
import json
import math
import os
import shutil

import keras
import numpy as np
import pytest
import tomllib
from rnnkit_recipes.language_model import baselines
from rnnkit_recipes.language_model import data as lm_data
from rnnkit_recipes.language_model.recipe import (
    LanguageModelConfig,
    LanguageModelRecipe,
    learning_rate_schedule,
    mean_cross_entropy,
)

from rnnkit import config as config_lib
from rnnkit.data.token_stream import stream_batches
from rnnkit.errors import RnnkitError
from rnnkit.training import runner
from tests import preloaded
from tests.cli_support import error_line, invoke
from tests.shared_data import require
from tests.stock_support import ROOT

LM_DATA = ROOT.parent / "shared" / "data" / "language_model"
CONFIGS = ROOT / "recipes" / "language_model" / "configs"
SMOKE_CONFIG = CONFIGS / "smoke.toml"


def numbered_text(path, lines=60, words=10):
    """Lines of distinct words w0 w1 ...: every token names its place in the text."""
    rows = [
        " ".join(f"w{line * words + i}" for i in range(words)) for line in range(lines)
    ]
    path.write_text("\n".join(rows) + "\n", "utf-8")
    return path


def word_config(path, **values):
    settings = {
        "data.path": str(path), "data.level": "word", "data.validation_fraction": 0.2,
        "data.test_fraction": 0.1, "train.batch_size": 3, "train.bptt": 4,
        "model.units": 8, "model.embedding_dim": 8, "train.epochs": 2,
        "train.patience": 0, "evaluation.batch_size": 2,
    }  # fmt: skip
    settings.update(values)
    return config_lib.resolve(LanguageModelConfig, None, settings)


def windows_as_tokens(dataset, tokens):
    return [
        (np.array(tokens)[x.numpy()], np.array(tokens)[y.numpy()]) for x, y in dataset
    ]


def test_truncated_bptt_pipeline_delivers_the_streams_in_order(tmp_path):
    config = word_config(
        numbered_text(tmp_path / "text.txt"), **{"train.shuffle": True}
    )
    loaded = LanguageModelRecipe().load_data(config)
    text = lm_data.tokenize((tmp_path / "text.txt").read_text(), "word", True)
    train_tokens = text[: len(loaded.train_ids)]
    assert list(np.array(loaded.tokens)[loaded.train_ids]) == train_tokens
    batches = windows_as_tokens(loaded.train, loaded.tokens)
    per_stream = (len(train_tokens) - 1) // 3
    assert len(batches) == per_stream // 4
    for window, (inputs, targets) in enumerate(batches):
        assert inputs.shape == (3, 4)
        for stream in range(3):
            start = stream * per_stream + window * 4
            assert list(inputs[stream]) == train_tokens[start : start + 4]
            assert list(targets[stream]) == train_tokens[start + 1 : start + 5]
    # Shuffling is never applied to truncated BPTT: a second pass is the same.
    again = windows_as_tokens(loaded.train, loaded.tokens)
    assert all((a[0] == b[0]).all() for a, b in zip(batches, again, strict=True))


def test_independent_windows_are_the_same_windows_shuffled(tmp_path):
    path = numbered_text(tmp_path / "text.txt")
    ordered = LanguageModelRecipe().load_data(word_config(path))
    shuffled = LanguageModelRecipe().load_data(
        word_config(path, **{"train.mode": "independent", "train.shuffle": True})
    )
    rows = [
        np.concatenate([x.numpy() for x, _ in d.train]) for d in (ordered, shuffled)
    ]
    assert sorted(map(tuple, rows[0])) == sorted(map(tuple, rows[1]))
    assert not (rows[0] == rows[1]).all()


def test_states_are_reset_at_epoch_start_and_before_evaluation(tmp_path):
    """The recipe's callback, run by the runner: the first batch of every epoch and
    of every validation pass sees a zero state; the next batches a carried one."""
    config = word_config(numbered_text(tmp_path / "text.txt"))
    seen = []

    def state_norm(model):
        return sum(
            float(np.abs(keras.ops.convert_to_numpy(v)).sum())
            for layer in model.recurrent_layers
            for v in layer.states
        )

    class Spy(keras.callbacks.Callback):
        def on_train_batch_begin(self, batch, logs=None):
            seen.append(("train", batch, state_norm(self.model)))

        def on_test_batch_begin(self, batch, logs=None):
            seen.append(("test", batch, state_norm(self.model)))

    runner.run(
        LanguageModelRecipe(), config, tmp_path / "run", callbacks=[Spy()], verbose=0
    )
    train = [entry for entry in seen if entry[0] == "train"]
    test = [entry for entry in seen if entry[0] == "test"]
    assert [norm == 0 for _, batch, norm in train if batch == 0] == [True, True]
    assert all(norm > 0 for _, batch, norm in train if batch > 0)
    assert [norm == 0 for _, batch, norm in test if batch == 0] == [True, True]
    assert all(norm > 0 for _, batch, norm in test if batch > 0)


def test_perplexity_carries_the_state_through_the_split():
    """mean_cross_entropy against one stateless pass over each whole stream."""
    from rnnkit.models.language_model import LanguageModel

    keras.utils.set_random_seed(1)
    model = LanguageModel(list("abcdefg"), embedding_dim=4, units=5, num_layers=1)
    model.build()
    ids = np.random.default_rng(0).integers(0, 7, size=47)  # 3 streams of 15
    logits = keras.ops.convert_to_numpy(model(ids[:45].reshape(3, 15)))
    targets = ids[1:46].reshape(3, 15)
    log_probs = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    expected = -np.take_along_axis(log_probs, targets[..., None], -1).mean()
    carried = mean_cross_entropy(model, ids, streams=3, bptt=4)
    assert carried == pytest.approx(expected, rel=1e-5)
    # Reset at every window: the mean over windows read separately.
    reset = [
        -np.take_along_axis(
            keras.ops.convert_to_numpy(keras.ops.log_softmax(model(x), axis=-1)),
            y[..., None],
            -1,
        ).sum()
        for x, y in stream_batches(ids, 3, 4, keep_partial=True)
    ]
    assert mean_cross_entropy(
        model, ids, streams=3, bptt=4, carry_state=False
    ) == pytest.approx(sum(reset) / 45, rel=1e-5)


@pytest.mark.parametrize("unigram_bias", [True, False])
def test_a_fresh_model_starts_at_the_unigram_baseline(unigram_bias):
    """`model.unigram_bias`: before any training step the model's cross-entropy on
    real text (The Time Machine, words) is the unigram baseline's, not ln V."""
    config = config_lib.resolve(
        LanguageModelConfig, None,
        {"data.level": "word", "model.units": 16, "model.embedding_dim": 16,
         "train.batch_size": 8, "train.bptt": 10, "model.unigram_bias": unigram_bias},
    )  # fmt: skip
    recipe = LanguageModelRecipe()
    loaded = recipe.load_data(config)
    keras.utils.set_random_seed(0)
    model = recipe.build_model(config, loaded)
    size = len(loaded.tokens)
    fresh = mean_cross_entropy(model, loaded.validation_ids, streams=8, bptt=10)
    unigram = baselines.unigram_cross_entropy(
        loaded.train_ids, loaded.validation_ids, size
    )
    if unigram_bias:
        assert fresh == pytest.approx(unigram, abs=0.02)
    else:
        assert fresh == pytest.approx(math.log(size), abs=0.02)
        assert fresh > unigram + 1.0


def test_baselines_against_dense_counts():
    rng = np.random.default_rng(0)
    train, validation, test = (rng.integers(0, 6, n) for n in (400, 80, 90))
    counts = np.bincount(train, minlength=6)
    unigram = (counts + 1) / (counts.sum() + 6)
    assert baselines.unigram_cross_entropy(train, test, 6) == pytest.approx(
        -np.log(unigram[test[1:]]).mean()
    )
    pair_counts = np.zeros((6, 6))
    np.add.at(pair_counts, (train[:-1], train[1:]), 1)

    def dense(stream, k):
        p = (pair_counts + k) / (pair_counts.sum(1, keepdims=True) + 6 * k)
        return -np.log(p[stream[:-1], stream[1:]]).mean()

    best_k = min(baselines.BIGRAM_K, key=lambda k: dense(validation, k))
    value, k = baselines.bigram_cross_entropy(train, validation, test, 6)
    assert k == best_k and value == pytest.approx(dense(test, best_k))


def test_zaremba_schedule_is_constant_then_halves_every_epoch():
    config = config_lib.resolve(LanguageModelConfig, CONFIGS / "ptb_small.toml", {})
    schedule = learning_rate_schedule(config, steps_per_epoch=100)
    rates = [float(schedule(epoch * 100 + 50)) for epoch in range(13)]
    assert rates == [20.0] * 4 + [20.0 * 0.5**i for i in range(1, 10)]


def test_penn_treebank_conventions():
    path = require(LM_DATA / "ptb.valid.txt.gz")
    tokens = lm_data.tokenize(lm_data.read_text(path), "word", lowercase=False)
    # The published counts: 73,760 tokens with one <eos> per line (3,370 lines).
    assert len(tokens) == 73760 and tokens.count("<eos>") == 3370
    assert tokens[:4] == ["consumers", "may", "want", "to"]
    vocabulary = lm_data.build_vocabulary(tokens, 0, 1)
    assert vocabulary[0] == "<unk>" and len(set(vocabulary)) == len(vocabulary)


def test_standardize_reads_reviews_as_the_sentiment_classifier_does(tmp_path):
    """`data.standardize`: real IMDB reviews split into the words the classifier's
    `TextVectorization` sees, one review per `<eos>`; raw splitting keeps HTML and
    punctuation glued to words ("/><br", "film.")."""
    import tensorflow as tf

    from rnnkit.models.sequence_classifier import TextStandardizer
    from tests.sentiment_support import write_imdb_csv

    path = write_imdb_csv(tmp_path / "reviews.csv", "train", 20)
    text = lm_data.read_text(path)
    reviews = text.split("\n")
    assert len(reviews) == 40
    raw = lm_data.tokenize(text, "word", lowercase=True)
    assert any("<br" in token for token in raw)
    assert any(token.endswith((".", ",")) for token in raw)
    tokens = lm_data.tokenize(text, "word", lowercase=True, standardize=True)
    expected = []
    for review in TextStandardizer()(tf.constant(reviews)).numpy():
        expected += [*review.decode("utf-8").split(), "<eos>"]
    assert tokens == expected and tokens.count("<eos>") == 40
    words = [token for token in tokens if token != "<eos>"]
    assert not any(set(token) & set("<>/.,!?'\"()") for token in words)
    config = word_config(path, **{"data.standardize": True})
    loaded = LanguageModelRecipe().load_data(config)
    assert "br" not in loaded.tokens and "<eos>" in loaded.tokens
    # The training text opens with the review that the seeded shuffle puts first.
    first = lm_data.shuffled(reviews, config.data.split_seed)[0]
    opening = lm_data.tokenize(first, "word", lowercase=True, standardize=True)
    assert list(np.array(loaded.tokens)[loaded.train_ids[:5]]) == opening[:5]


def test_reverse_reads_each_split_backwards(tmp_path):
    """`data.reverse` (a backward language model): the same splits, the same
    vocabulary, each split's running text from its last token to its first; such a
    model does not continue prompts (a one-line error, not a text made backwards)."""
    from tests.sentiment_support import write_imdb_csv

    path = write_imdb_csv(tmp_path / "reviews.csv", "train", 20)
    recipe = LanguageModelRecipe()
    settings = {"data.standardize": True, "train.batch_size": 2, "train.bptt": 8}
    forward = recipe.load_data(word_config(path, **settings))
    backward = recipe.load_data(word_config(path, **settings, **{"data.reverse": True}))
    # The same vocabulary (tokens of equal counts may be numbered otherwise: ties go
    # to the token seen first).
    assert sorted(backward.tokens) == sorted(forward.tokens)
    for name in ("train_ids", "validation_ids", "test_ids"):
        ours = np.array(backward.tokens)[getattr(backward, name)]
        theirs = np.array(forward.tokens)[getattr(forward, name)]
        assert len(ours) > 100
        np.testing.assert_array_equal(ours, theirs[::-1])
    config = word_config(path, **{"data.reverse": True})
    for call in (recipe.predict, recipe.predict_records):
        with pytest.raises(RnnkitError, match="reads text backwards"):
            call(None, ["the film"], config)


@pytest.fixture(scope="module")
def smoke_run(tmp_path_factory):
    """The packaged Time Machine, characters, a small LSTM, two epochs."""
    run_dir = tmp_path_factory.mktemp("runs") / "language_model"
    result = invoke(
        "run", "language_model", "--config", str(SMOKE_CONFIG), "--run-dir",
        str(run_dir), "--set", "train.spectral_norm_every=20",
    )  # fmt: skip
    assert result.exit_code == 0, result.output[-3000:]
    # Read now: `rnnkit diagnose` may rewrite diagnostics/ later.
    spectral = (run_dir / "diagnostics" / "spectral_norms.csv").read_text()
    return run_dir, spectral


def test_smoke_run_beats_the_unigram_baseline(smoke_run):
    smoke_run, _ = smoke_run
    for name in ("config.toml", "model.keras", "metrics.json", "history.csv"):
        assert (smoke_run / name).is_file(), name
    with (smoke_run / "history.csv").open() as handle:
        losses = [float(row["loss"]) for row in csv.DictReader(handle)]
    assert len(losses) == 2 and losses[1] < losses[0]
    table = json.loads((smoke_run / "metrics.json").read_text())["test"]
    assert list(table) == ["model", "unigram", "bigram_add_k"]
    model = table["model"]
    assert model["perplexity"] < 0.7 * table["unigram"]["perplexity"]
    assert model["bits_per_char"] == pytest.approx(model["cross_entropy"] / math.log(2))
    assert model["perplexity"] == pytest.approx(math.exp(model["cross_entropy"]))
    assert model["perplexity"] <= model["perplexity_state_reset"]


def test_predict_samples_reproducibly(smoke_run):
    smoke_run, _ = smoke_run
    recipe = LanguageModelRecipe()
    config = config_lib.load_toml(LanguageModelConfig, smoke_run / "config.toml")
    model = runner.load_model(smoke_run / "model.keras")  # safe mode

    def sample(**values):
        settings = {"evaluation.length": 40, **values}
        return recipe.predict(
            model, ["the time traveller"], config.with_values(settings)
        )[0]

    options = {"evaluation.temperature": 0.8, "evaluation.top_k": 10}
    first = sample(**options, **{"evaluation.seed": 5})
    assert first.startswith("the time traveller") and len(first) == 18 + 40
    assert sample(**options, **{"evaluation.seed": 5}) == first
    assert sample(**options, **{"evaluation.seed": 6}) != first
    greedy = sample(**{"evaluation.temperature": 0.0})
    assert sample(**{"evaluation.top_k": 1, "evaluation.seed": 9}) == greedy
    # The command, in a fresh process, with the recipe's sampling options.
    result = preloaded.run(
        ["-c", "from rnnkit.cli import main; main()", "predict",
         str(smoke_run), "the time traveller", "--length", "40", "--temperature",
         "0.8", "--top-k", "10", "--seed", "5"],
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"},
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.rstrip("\n") == first


def test_hawk_blocks_train_evaluate_and_generate(tmp_path):
    """model.block=hawk: the packaged Time Machine, the smoke settings; the run
    learns (below the unigram's perplexity), and generation carries each block's
    convolution inputs and state from token to token."""
    run_dir = tmp_path / "hawk"
    result = invoke(
        "run", "language_model", "--config", str(SMOKE_CONFIG), "--run-dir",
        str(run_dir), "--set", "model.block=hawk", "--set", "model.cell_type=rglru",
        "--set", "model.embedding_dim=32", "--set", "model.units=32",
        "--set", "model.num_layers=2",
    )  # fmt: skip
    assert result.exit_code == 0, result.output[-3000:]
    table = json.loads((run_dir / "metrics.json").read_text())["test"]
    assert table["model"]["perplexity"] < 0.8 * table["unigram"]["perplexity"]
    model = runner.load_model(run_dir / "model.keras")
    assert [type(layer).__name__ for layer in model.recurrent_layers] == [
        "HawkBlock"
    ] * 2
    config = config_lib.load_toml(LanguageModelConfig, run_dir / "config.toml")
    settings = {"evaluation.length": 30, "evaluation.temperature": 0.0}
    text = LanguageModelRecipe().predict(
        model, ["the time traveller"], config.with_values(settings)
    )[0]
    assert text.startswith("the time traveller") and len(text) == 18 + 30
    result = invoke("diagnose", str(run_dir))
    assert "reads the gradients and recurrent kernels of stacked" in error_line(result)


def test_diagnose_writes_into_the_run_directory(smoke_run):
    smoke_run, _ = smoke_run
    result = invoke("diagnose", str(smoke_run), "--steps", "2", "--window", "10")
    assert result.exit_code == 0, result.output[-2000:]
    table = (smoke_run / "diagnostics" / "gradient_norms.csv").read_text()
    assert {line.split(",")[1] for line in table.splitlines()[1:]} == {
        "fresh",
        "trained",
    }
    assert (smoke_run / "diagnostics" / "gradient_norms.png").is_file()
    mixed = invoke("diagnose", str(smoke_run), "--cell", "lstm")
    assert "leave out RUN_DIR" in error_line(mixed)


def test_evaluate_reads_the_text_with_the_run_vocabulary(smoke_run, tmp_path):
    """Data settings that learn another vocabulary from today's text: the model is
    still scored with its own, on the same test split its own figures."""
    run_dir, _ = smoke_run
    saved = json.loads((run_dir / "metrics.json").read_text())["test"]
    output = tmp_path / "again.json"
    result = invoke(
        "evaluate", str(run_dir), "--set", "data.vocabulary_size=20",
        "--output", str(output),
    )  # fmt: skip
    assert result.exit_code == 0, result.output[-2000:]
    again = json.loads(output.read_text())["test"]
    for system, values in saved.items():
        assert again[system] == pytest.approx(values, rel=1e-4), system
    # A shorter text (each split cut to 3,000 characters): other figures, still
    # the model's, far below the unigram baseline's as on the whole test split.
    result = invoke(
        "evaluate", str(run_dir), "--set", "data.limit=3000", "--output", str(output)
    )
    assert result.exit_code == 0, result.output[-2000:]
    table = json.loads(output.read_text())["test"]
    assert table["model"]["perplexity"] < 0.7 * table["unigram"]["perplexity"]


def test_evaluate_refuses_text_the_run_vocabulary_does_not_fit(smoke_run):
    run_dir, _ = smoke_run
    result = invoke("evaluate", str(run_dir), "--set", "data.level=word")
    message = error_line(result)
    assert "unknown to the run's vocabulary" in message
    assert "needs another vocabulary" in message and "data.level" in message


def test_evaluate_refuses_to_cut_the_run_text_another_way(smoke_run, tmp_path):
    """Another cut of the run's own text would test on text the model trained on;
    the run's own setting is no such thing."""
    run_dir, _ = smoke_run
    result = invoke("evaluate", str(run_dir), "--set", "data.test_fraction=0.2")
    message = error_line(result)
    assert "--set data.test_fraction=0.2" in message
    assert "split another way" in message and "drop --set data.test_fraction" in message
    recorded = tomllib.loads((run_dir / "config.toml").read_text())["data"]
    result = invoke(
        "evaluate", str(run_dir), "--set",
        f"data.validation_fraction={recorded['validation_fraction']}",
    )  # fmt: skip
    assert result.exit_code == 0, result.output[-2000:]


def test_diagnose_takes_settings_and_uses_the_run_vocabulary(smoke_run, tmp_path):
    """`--set` reaches the run's config; a vocabulary learned again from the text
    (data.vocabulary_size) gives way to the one saved in the model, and a run
    recorded for a GPU is diagnosed on this machine's device."""
    run_dir, _ = smoke_run
    copy = tmp_path / "gpu_run"
    shutil.copytree(run_dir, copy)
    rewrite_train_settings(copy, {"train.device": "gpu"})
    result = invoke(
        "diagnose", str(copy), "--steps", "1", "--window", "10",
        "--set", "data.vocabulary_size=20", "--output", str(tmp_path / "out"),
    )  # fmt: skip
    assert result.exit_code == 0, result.output[-2000:]
    assert (tmp_path / "out" / "gradient_norms.csv").is_file()
    result = invoke("diagnose", str(run_dir), "--set", "data.level=word")
    assert "needs another vocabulary" in error_line(result)


def rewrite_train_settings(run_dir, values):
    """Rewrites the config.toml of a run directory with `values` set."""
    config = config_lib.load_toml(LanguageModelConfig, run_dir / "config.toml")
    text = config_lib.to_toml(
        config.with_values(values), runner.config_header("language_model")
    )
    (run_dir / "config.toml").write_text(text, "utf-8")


def test_spectral_norms_are_tracked_during_the_run(smoke_run):
    """train.spectral_norm_every=20: sigma_max of W_hh every 20 of the 2 x 39 steps,
    the last row equal to the saved model's."""
    run_dir, spectral = smoke_run
    rows = [line.split(",") for line in spectral.splitlines()]
    assert rows[0] == ["model", "step", "layer", "gate", "sigma_max"]
    whole = [row for row in rows[1:] if row[3] == "all"]
    assert [int(row[1]) for row in whole] == [0, 20, 39, 40, 60, 78]
    kernel = runner.load_model(run_dir / "model.keras").recurrent_layers[0]
    kernel = kernel.cell.recurrent_kernel.numpy()
    assert float(whole[-1][4]) == pytest.approx(np.linalg.norm(kernel, 2), rel=1e-5)
    assert (run_dir / "diagnostics" / "spectral_norms.png").is_file()


@pytest.mark.parametrize(
    "assignments, message",
    [
        (["model.tie_weights=true", "model.units=32"], "model.tie_weights needs"),
        (["data.path=nowhere/ptb.{split}.txt"], "no such file"),
        (["data.limit=100", "train.batch_size=16"], "too few for one batch"),
        (["model.block=hawk", "model.init_scale=0.1"], "model.init_scale applies"),
        (
            ["model.cell_type=mingru", "model.weight_dropout=0.2"],
            "model.weight_dropout: MinGRUCell has no recurrent weights",
        ),
        (
            ["model.block=hawk", "model.cell_type=gru", "model.weight_dropout=0.2"],
            "not Hawk's blocks",
        ),
        (
            ["model.architecture=transformer", "model.embedding_dropout=0.1"],
            "model.embedding_dropout is a setting of the recurrent model",
        ),
    ],
)
def test_bad_settings_are_one_line_errors(tmp_path, assignments, message):
    sets = [arg for item in assignments for arg in ("--set", item)]
    result = invoke(
        "run", "language_model", "--config", str(SMOKE_CONFIG), "--run-dir",
        str(tmp_path / "run"), *sets,
    )  # fmt: skip
    assert message in error_line(result)


def test_a_split_shorter_than_the_streams_is_read_by_fewer():
    from rnnkit.models.language_model import LanguageModel

    keras.utils.set_random_seed(2)
    model = LanguageModel(list("abc"), embedding_dim=2, units=3, num_layers=1)
    model.build()
    ids = np.array([0, 1, 2, 1])  # 3 streams of one token each, from a zero state
    logits = keras.ops.convert_to_numpy(model(ids[:-1, None]))[:, 0]
    log_probs = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    expected = -log_probs[np.arange(3), ids[1:]].mean()
    value = mean_cross_entropy(model, ids, streams=10, bptt=2)
    assert value == pytest.approx(float(expected), rel=1e-5)


@pytest.mark.parametrize("name", sorted(path.stem for path in CONFIGS.glob("*.toml")))
def test_config_files_resolve(name):
    config = config_lib.resolve(LanguageModelConfig, CONFIGS / f"{name}.toml", {})
    if name == "default":
        assert config == LanguageModelConfig()
    if name.startswith("ptb") and config.train.optimizer == "sgd":
        # Zaremba et al.'s rate 1 and clip 5 on the per-window sum of losses.
        assert config.train.learning_rate == config.train.bptt
        assert config.train.clipnorm == pytest.approx(5 / config.train.bptt, rel=1e-5)


def test_shipped_configs_hold_what_their_files_set():
    from tests.config_support import check_shipped_configs

    names = check_shipped_configs(LanguageModelRecipe())
    assert {"imdb_reviews.toml", "sst2_phrases.toml", "ptb_small.toml"} <= set(names)


def test_a_table_of_documents_is_shuffled_before_the_contiguous_cut(tmp_path):
    """The IMDB training table holds its positive reviews, then its negative ones:
    cut in the table's order, the held-out tail would be negative reviews only. On a
    real slice in that order, the documents are shuffled (with `data.split_seed`)
    first: both labels in the validation and the test text; the same seed, the same
    split, whatever `train.seed` (a run of another seed, or `rnnkit evaluate --set
    train.seed=N`, tests on the same documents)."""
    from tests.sentiment_support import imdb_sample, write_imdb_csv

    path = write_imdb_csv(tmp_path / "reviews.csv.gz", "train", 50)
    sample = imdb_sample("train", 50)
    assert list(sample["label"]) == [1] * 50 + [0] * 50  # sorted by label
    label_of = dict(zip(sample["text"], sample["label"], strict=True))

    def split(seed, train_seed=1337):
        config = word_config(
            path, **{"data.split_seed": seed, "train.seed": train_seed}
        )
        return lm_data.read_splits(config)[0]

    texts = split(1337)
    labels = [
        [label_of[line] for line in text.split("\n") if line in label_of]
        for text in texts
    ]
    assert sum(map(len, labels)) >= 95  # only the documents cut at a split's edge lack
    for name, held_out in zip(("validation", "test"), labels[1:], strict=True):
        assert len(held_out) >= 5, name
        assert set(held_out) == {0, 1}, f"{name}: labels {held_out}"
    assert split(1337) == texts
    assert split(1337, train_seed=7) == texts
    assert split(7) != texts
