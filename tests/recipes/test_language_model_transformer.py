"""The language-model recipe with `model.architecture = "transformer"`: windows with
nothing carried between them, sampling through the key/value cache (against full
recomputation), and a run on The Time Machine through the `rnnkit` launcher."""

from __future__ import annotations

import csv
import json
import math

import numpy as np
import pytest
from rnnkit_recipes.language_model.decode import CachedContext
from rnnkit_recipes.language_model.recipe import (
    LanguageModelConfig,
    LanguageModelRecipe,
)

from rnnkit import config as config_lib
from rnnkit import decoding
from rnnkit.training import runner
from tests.cli_support import error_line, invoke
from tests.recipes.test_language_model import (
    SMOKE_CONFIG,
    numbered_text,
    windows_as_tokens,
    word_config,
)
from tests.transformer_support import (
    assert_search_space_sets_its_fields,
    tiny_language_model,
)

TRANSFORMER = {"model.architecture": "transformer", "model.model_dim": 8,
               "model.num_heads": 2, "model.feedforward_dim": 16}  # fmt: skip


class FullContext:
    """The context policy of `CachedContext`, recomputed in full at every token: the
    whole model runs on the tokens of the current context, without a cache."""

    def __init__(self, model):
        self.model, self.window = model, model.context_length
        self.history, self.start = [], None

    def __call__(self, ids):
        self.history.extend(int(i) for i in np.asarray(ids).reshape(-1))
        if self.start is None:
            self.start = max(len(self.history) - self.window, 0)
        elif len(self.history) - self.start > self.window:
            self.start = len(self.history) - max(self.window // 2, 1)
        context = np.asarray([self.history[self.start :]], "int32")
        return np.asarray(self.model(context))[:, -1]


class Recorder:
    def __init__(self, next_logits):
        self.next_logits, self.calls = next_logits, []

    def __call__(self, ids):
        logits = self.next_logits(ids)
        self.calls.append(logits)
        return logits


@pytest.mark.parametrize(
    "prompt, length, kwargs",
    [
        ([1, 2, 3], 4, {}),  # within the window: no restart
        ([4, 5, 6, 7, 8, 9, 10, 1, 2, 3], 14, {"norm_first": False}),  # restarts
        ([3, 3, 4], 12, {"positional_encoding": "learned", "tie_weights": False}),
    ],
)
def test_cached_sampling_equals_full_recomputation(prompt, length, kwargs):
    model = tiny_language_model(**kwargs)
    options = dict(temperature=1.0, seed=3)
    cached, full = Recorder(CachedContext(model)), Recorder(FullContext(model))
    tokens = decoding.sample_sequence(cached, prompt, length, **options)
    assert decoding.sample_sequence(full, prompt, length, **options) == tokens
    assert len(cached.calls) == len(full.calls) == length
    for cached_logits, full_logits in zip(cached.calls, full.calls, strict=True):
        np.testing.assert_allclose(cached_logits, full_logits, atol=2e-5)
    assert len(set(tokens)) > 1  # the logits depend on the context


def test_decode_with_the_cache_equals_the_causal_call():
    model = tiny_language_model(context_length=12)
    ids = np.array([[1, 5, 2, 7, 7, 3, 9, 4], [2, 2, 8, 1, 6, 10, 0, 5]])
    full = np.asarray(model(ids))
    caches = model.initial_cache(2)
    first, caches = model.decode(ids[:, :5], caches, 0)
    steps = [np.asarray(first)]
    for t in range(5, 8):
        logits, caches = model.decode(ids[:, t : t + 1], caches, t)
        steps.append(np.asarray(logits))
    np.testing.assert_allclose(np.concatenate(steps, axis=1), full, atol=2e-5)
    changed = ids.copy()
    changed[:, 4] = 0  # a later token never changes an earlier position's logits
    np.testing.assert_allclose(
        np.asarray(model(changed))[:, :4], full[:, :4], atol=1e-5
    )


def test_the_transformer_reads_independent_windows_even_in_truncated_mode(tmp_path):
    path = numbered_text(tmp_path / "text.txt")
    rnn = LanguageModelRecipe().load_data(word_config(path))
    transformer = LanguageModelRecipe().load_data(
        word_config(path, **TRANSFORMER, **{"train.shuffle": True})
    )
    assert transformer.config.train.mode == "truncated"
    rows = [windows_as_tokens(d.train, d.tokens) for d in (rnn, transformer)]
    flat = [sorted(tuple(w) for x, _ in batches for w in x) for batches in rows]
    assert flat[0] == flat[1]  # the same windows ...
    assert [b[0].tolist() for b in rows[0]] != [b[0].tolist() for b in rows[1]]
    assert LanguageModelRecipe().single_device(transformer.config) is None


@pytest.fixture(scope="module")
def transformer_run(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("runs") / "language_model_transformer"
    result = invoke(
        "run", "language_model", "--config", str(SMOKE_CONFIG), "--run-dir",
        str(run_dir), "--set", "model.architecture=transformer",
        "--set", "train.learning_rate=0.003", "--set", "train.shuffle=true",
    )  # fmt: skip
    assert result.exit_code == 0, result.output[-3000:]
    return run_dir


def test_the_transformer_beats_the_unigram_baseline(transformer_run):
    with (transformer_run / "history.csv").open() as handle:
        losses = [float(row["loss"]) for row in csv.DictReader(handle)]
    assert len(losses) == 2 and losses[1] < losses[0]
    table = json.loads((transformer_run / "metrics.json").read_text())["test"]
    model = table["model"]
    assert model["perplexity"] < 0.7 * table["unigram"]["perplexity"]
    assert model["bits_per_char"] == pytest.approx(model["cross_entropy"] / math.log(2))
    # Nothing is carried, so there is no separate figure with the state reset.
    assert "perplexity_state_reset" not in model


def test_evaluate_reads_windows_of_the_models_own_context(transformer_run, tmp_path):
    """A train.bptt above the saved model's context_length (32) changes nothing:
    the evaluation windows are the model's."""
    saved = json.loads((transformer_run / "metrics.json").read_text())["test"]
    output = tmp_path / "again.json"
    result = invoke(
        "evaluate", str(transformer_run), "--set", "train.bptt=256",
        "--output", str(output),
    )  # fmt: skip
    assert result.exit_code == 0, result.output[-2000:]
    again = json.loads(output.read_text())["test"]
    assert again["model"] == pytest.approx(saved["model"], rel=1e-4)


def test_the_saved_transformer_samples_reproducibly(transformer_run):
    recipe = LanguageModelRecipe()
    config = config_lib.load_toml(LanguageModelConfig, transformer_run / "config.toml")
    model = runner.load_model(transformer_run / "model.keras")
    assert type(model).__name__ == "TransformerLanguageModel"
    assert model.context_length == config.train.bptt

    def sample(seed):
        # Longer than the context window of 32 characters: the context restarts.
        settings = {"evaluation.length": 50, "evaluation.seed": seed}
        return recipe.predict(model, ["the time"], config.with_values(settings))[0]

    first = sample(5)
    assert first.startswith("the time") and len(first) == 8 + 50
    assert sample(5) == first and sample(6) != first


def test_search_space_of_the_transformer():
    base = LanguageModelConfig().with_values({"model.architecture": "transformer"})
    names = assert_search_space_sets_its_fields(LanguageModelRecipe(), base)
    assert {"model_dim", "num_heads", "feedforward_dim", "num_layers"} <= names
    assert "cell_type" not in names


@pytest.mark.parametrize(
    "assignments, message",
    [
        (["model.model_dim=30"], "model.num_heads=4 must divide model.model_dim=30"),
        (["train.spectral_norm_every=5"], "the Transformer has none"),
        (
            ["train.lr_schedule=noam", "train.lr_decay=0.5"],
            "train.lr_schedule=noam has its own decay; train.lr_decay=0.5",
        ),
    ],
)
def test_bad_transformer_settings_are_one_line_errors(tmp_path, assignments, message):
    sets = [arg for item in assignments for arg in ("--set", item)]
    result = invoke(
        "run", "language_model", "--config", str(SMOKE_CONFIG), "--run-dir",
        str(tmp_path / "run"), "--set", "model.architecture=transformer", *sets,
    )  # fmt: skip
    assert message in error_line(result)
