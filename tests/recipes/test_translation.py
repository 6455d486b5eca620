"""The translation recipe end to end through the `rnnkit` launcher, on real pairs."""

from __future__ import annotations

import csv
import json
import os
import re
import unicodedata
import zipfile

import keras_tuner
import pytest
from rnnkit_recipes.translation.recipe import TranslationConfig, TranslationRecipe

from rnnkit import config as config_lib
from rnnkit.data.parallel_text import (
    UNK_ID,
    SubwordVocabulary,
    TextOptions,
    read_parallel_files,
    tokenize,
)
from rnnkit.training import runner
from tests import preloaded, smoke_runs
from tests.cli_support import error_line, invoke
from tests.config_support import check_shipped_configs
from tests.decoding_support import assert_n_best_widens_the_beam
from tests.shared_data import require
from tests.stock_support import ROOT

TRANSLATION_DATA = ROOT.parent / "shared" / "data" / "translation"
MULTI30K = str(TRANSLATION_DATA / "multi30k_{split}.{lang}.gz")
SMOKE_CONFIG = ROOT / "recipes" / "translation" / "configs" / "smoke.toml"


@pytest.fixture(scope="module")
def smoke_run(tmp_path_factory):
    """500 real Multi30k de->en pairs per split, a small model, five epochs: the
    smoke command of the docs, run once in the session (tests/smoke_runs.py) and
    read-only here; with the rnnkit log messages of the run."""
    require(TRANSLATION_DATA / "multi30k_train.de.gz")
    shared = smoke_runs.smoke_run(tmp_path_factory, "translation")
    assert shared.exit_code == 0, shared.output[-3000:]
    return shared.run_dir, shared.messages


def test_run_writes_the_run_directory_and_the_loss_falls(smoke_run):
    run_dir, _ = smoke_run
    for name in (
        "config.toml", "model.keras", "metrics.json", "history.csv", "run.json",
        "plots/training_curves.png", "plots/attention_1.png",
    ):  # fmt: skip
        assert (run_dir / name).is_file(), name
    assert (run_dir / "plots/attention_1.png").read_bytes()[:4] == b"\x89PNG"
    with (run_dir / "history.csv").open() as handle:
        history = list(csv.DictReader(handle))
    losses = [float(row["loss"]) for row in history]
    assert len(losses) == 5 and losses[-1] < losses[0] - 1.0
    assert float(history[-1]["val_loss"]) < float(history[0]["val_loss"])


def test_metrics_put_the_model_beside_the_baselines(smoke_run):
    run_dir, _ = smoke_run
    table = json.loads((run_dir / "metrics.json").read_text())["test"]
    assert list(table) == ["model", "copy_source", "unigram"]
    assert set(table["model"]) == {
        "bleu", "chrf", "bleu_greedy", "chrf_greedy", "val_token_accuracy",
        "val_perplexity", "unknown_outputs",
    }  # fmt: skip
    # Subword pieces spell out every word of the training characters: no test
    # translation holds the unknown token.
    assert table["model"]["unknown_outputs"] == 0
    # The table's greedy BLEU is sacreBLEU's score of what the saved model says for
    # the test sources (decoded again here through `predict`) against the references.
    import sacrebleu

    config = config_lib.load_toml(TranslationConfig, run_dir / "config.toml")
    recipe = TranslationRecipe()
    data = recipe.load_data(config)
    sources = [source for source, _ in data.test_pairs]
    references = [
        " ".join(unicodedata.normalize("NFKC", target).split())
        for _, target in data.test_pairs
    ]
    hypotheses = recipe.predict(
        runner.load_model(run_dir / "model.keras"),
        sources,
        config.with_values({"evaluation.beam_width": 1}),
    )
    expected = sacrebleu.corpus_bleu(hypotheses, [references], lowercase=True)
    assert table["model"]["bleu_greedy"] == pytest.approx(expected.score, abs=1e-6)
    assert table["model"]["bleu"] > table["copy_source"]["bleu"]
    # Five epochs on 500 pairs translate badly, but the model already predicts the
    # next token better than the source-blind unigram model does.
    assert table["model"]["val_perplexity"] < table["unigram"]["val_perplexity"]
    assert table["model"]["val_token_accuracy"] > table["unigram"]["val_token_accuracy"]
    # German copied as "English" shares names, numbers and punctuation only.
    assert 0.0 < table["copy_source"]["bleu"] < 5.0


def test_bleu_is_computed_by_sacrebleu_on_the_test_references(smoke_run):
    run_dir, messages = smoke_run
    signature = [m for m in messages if m.startswith("sacreBLEU signature:")]
    assert len(signature) == 1
    assert re.search(
        r"nrefs:1\|case:lc\|eff:no\|tok:13a\|smooth:exp\|version:2", signature[0]
    )
    # The copy baseline's BLEU, recomputed here from the raw test files.
    import sacrebleu

    pairs = read_parallel_files(
        MULTI30K.format(split="test_2016_flickr", lang="de"),
        MULTI30K.format(split="test_2016_flickr", lang="en"),
    )[:500]
    # As the recipe sees the text: NFKC-normalised, whitespace collapsed, cased.
    sources, references = (
        [" ".join(unicodedata.normalize("NFKC", text).split()) for text in side]
        for side in zip(*pairs, strict=True)
    )
    expected = sacrebleu.corpus_bleu(sources, [references], lowercase=True)
    table = json.loads((run_dir / "metrics.json").read_text())["test"]
    assert table["copy_source"]["bleu"] == pytest.approx(expected.score, abs=1e-6)


def test_reloaded_model_translates_with_greedy_and_beam_search(smoke_run):
    run_dir, _ = smoke_run
    recipe = TranslationRecipe()
    config = config_lib.load_toml(TranslationConfig, run_dir / "config.toml")
    model = runner.load_model(run_dir / "model.keras")  # safe mode
    sentences = ["Ein Mann fährt Fahrrad.", "Zwei Hunde spielen im Schnee."]
    for beam_width in (1, 3):
        beam_config = config.with_values({"evaluation.beam_width": beam_width})
        lines = recipe.predict(model, sentences, beam_config)
        assert len(lines) == 2
        vocabulary = SubwordVocabulary(model.target_tokens)
        for line in lines:
            assert line and "[START]" not in line and "[END]" not in line
            assert "\u2581" not in line  # pieces are joined into words
            words = re.findall(r"[^\s.,!?]+", line)
            # Every word is spelled with the target pieces saved in the model.
            assert words and all(
                UNK_ID not in vocabulary.encode([word]) for word in words
            )


def test_label_smoothing_reaches_the_training_loss(smoke_run):
    """train.label_smoothing=0 is Keras' sparse cross-entropy without the pads; > 0
    moves the loss on real Multi30k batches (the equations are in test_losses)."""
    import keras
    import numpy as np

    from rnnkit.data.parallel_text import PAD_ID

    run_dir, _ = smoke_run
    recipe = TranslationRecipe()
    config = config_lib.load_toml(TranslationConfig, run_dir / "config.toml")
    config = config.with_values({"data.limit": 64})
    data = recipe.load_data(config)
    trained = runner.load_model(run_dir / "model.keras")
    keras_loss = keras.losses.SparseCategoricalCrossentropy(
        from_logits=True, ignore_class=PAD_ID
    )
    losses = {}
    for epsilon in (0.0, 0.1):
        model = recipe.build_model(
            config.with_values({"train.label_smoothing": epsilon}), data
        )
        model.set_weights(trained.get_weights())
        losses[epsilon] = model.evaluate(data.validation, verbose=0)
        if epsilon == 0.0:
            model.compile(optimizer="adam", loss=keras_loss)
            want = model.evaluate(data.validation, verbose=0)
            np.testing.assert_allclose(losses[0.0], want, rtol=1e-5)
    assert abs(losses[0.1] - losses[0.0]) > 0.01


def test_predict_command_prints_n_best_lists(smoke_run, tmp_path):
    """`rnnkit predict` in a fresh process, with the recipe's --beam and --n-best."""
    run_dir, _ = smoke_run
    sentences = tmp_path / "sentences.de"
    sentences.write_text("Ein Hund rennt.\nEine Frau liest ein Buch.\n", "utf-8")
    result = preloaded.run(
        ["-c", "from rnnkit.cli import main; main()", "predict",
         str(run_dir), "--beam", "4", "--n-best=3", str(sentences)],
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"},
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:]
    lines = result.stdout.splitlines()
    # The fresh process rebuilt the subword tokenizers from the run directory alone:
    # it translates exactly as the model and vocabularies of this process do.
    config = config_lib.load_toml(TranslationConfig, run_dir / "config.toml")
    config = config.with_values({"evaluation.beam_width": 4, "evaluation.n_best": 3})
    model = runner.load_model(run_dir / "model.keras")
    assert lines == TranslationRecipe().predict(
        model, ["Ein Hund rennt.", "Eine Frau liest ein Buch."], config
    )
    assert lines[0] == "Ein Hund rennt." and lines[4] == "Eine Frau liest ein Buch."
    ranked = [re.match(r"  (\d)\. \[(-\d+\.\d+)\] \S", line) for line in lines[1:4]]
    assert all(ranked), lines
    assert [int(match[1]) for match in ranked] == [1, 2, 3]
    scores = [float(match[2]) for match in ranked]
    assert scores == sorted(scores, reverse=True)
    unknown = invoke("predict", str(run_dir), "--beams", "4", "Hallo")
    assert "no such option: --beams" in error_line(unknown)
    assert "--beam, --n-best" in error_line(unknown)


def test_an_n_best_above_the_beam_widens_the_beam_for_that_call(smoke_run):
    """A beam of N keeps N hypotheses: --beam 1 --n-best 3 searches with a beam of 3
    (as the README says), not greedily with two empty slots."""
    run_dir, _ = smoke_run
    sentences = ["Ein Hund rennt.", "Eine Frau liest ein Buch."]
    assert_n_best_widens_the_beam(TranslationRecipe(), run_dir, sentences, n_best=3)


def test_subword_tokenizers_are_trained_on_training_text_and_saved_with_the_model(
    smoke_run,
):
    """The pieces in model.keras rebuild the tokenizers in a fresh process."""
    run_dir, _ = smoke_run
    recipe = TranslationRecipe()
    config = config_lib.load_toml(TranslationConfig, run_dir / "config.toml")
    assert config.data.tokenizer == "subword"
    # Loading the data again trains the tokenizers again, on the training split only
    # (one per language): the same pieces as those saved with the model.
    data = recipe.load_data(config)
    train = read_parallel_files(
        MULTI30K.format(split="train", lang="de"),
        MULTI30K.format(split="train", lang="en"),
    )[: config.data.limit]
    options = data.text_options
    for side, vocabulary in enumerate((data.source_vocabulary, data.target_vocabulary)):
        expected = SubwordVocabulary.build(
            [tokenize(pair[side], options) for pair in train],
            config.data.subword_vocabulary_size,
            config.data.min_frequency,
        )
        assert vocabulary.tokens == expected.tokens
    # Pieces inside words (no "▁" word-start mark) as well as whole words.
    assert any(not t.startswith("\u2581") for t in data.source_vocabulary.tokens[4:])
    model = runner.load_model(run_dir / "model.keras")
    assert model.source_tokens == data.source_vocabulary.tokens
    assert model.target_tokens == data.target_vocabulary.tokens

    words = tokenize("Ein Boston Terrier läuft über das Gras.", options)
    assert data.source_vocabulary.decode(data.source_vocabulary.encode(words)) == words


def write_anki_zip(path, lines):
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("spa-eng/spa.txt", "\n".join(lines) + "\n")
        archive.writestr("spa-eng/_about.txt", "Tatoeba terms of use.\n")
    return path


def test_default_source_downloads_the_anki_zip(tmp_path, monkeypatch):
    """data.path unset: the zip is fetched from data.url (here a local file)."""
    lines = [f"I see {i} cats.\tVeo {i} gatos." for i in range(200)]
    archive = write_anki_zip(tmp_path / "spa-eng.zip", lines)
    monkeypatch.setenv("RNNKIT_DATA_DIR", str(tmp_path / "cache"))
    config = config_lib.resolve(
        TranslationConfig,
        SMOKE_CONFIG,
        {
            "data.format": "anki",
            "data.path": None,
            "data.url": archive.as_uri(),
            "data.source_lang": "es",
            "data.target_lang": "en",
            "data.columns": ("en", "es"),
        },
    )
    data = TranslationRecipe().load_data(config)
    assert (tmp_path / "cache" / "spa-eng.zip").is_file()
    assert len(data.test_pairs) == 4  # 2% of 200
    source, target = data.test_pairs[0]
    assert source.startswith("Veo ") and target.startswith("I see ")
    assert data.source_vocabulary.pieces(["gatos"]) == ["\u2581gatos"]
    assert data.target_vocabulary.pieces(["cats"]) == ["\u2581cats"]


def test_offline_default_source_says_how_to_use_local_files(tmp_path, monkeypatch):
    monkeypatch.setenv("RNNKIT_DATA_DIR", str(tmp_path / "cache"))
    missing = (tmp_path / "nowhere" / "spa-eng.zip").as_uri()
    result = invoke(
        "run", "translation", "--config", str(SMOKE_CONFIG), "--run-dir",
        str(tmp_path / "run"), "--set", "data.format=anki", "--set", "data.path=none",
        "--set", f"data.url={missing}", "--set", "data.source_lang=en",
        "--set", "data.target_lang=es",
    )  # fmt: skip
    line = error_line(result)
    assert "could not download" in line and "--set data.path=" in line


def test_data_errors_are_one_line(tmp_path):
    (tmp_path / "c_train.de").write_text("Ein Hund.\nZwei Katzen.\n", "utf-8")
    (tmp_path / "c_train.en").write_text("A dog.\n", "utf-8")
    common = ["run", "translation", "--config", str(SMOKE_CONFIG)]
    misaligned = invoke(
        *common, "--run-dir", str(tmp_path / "r1"),
        "--set", f"data.path={tmp_path}/c_{{split}}.{{lang}}",
        "--set", "data.validation_split=", "--set", "data.test_split=",
    )  # fmt: skip
    assert "misaligned parallel files" in error_line(misaligned)
    no_pattern = invoke(
        *common, "--run-dir", str(tmp_path / "r2"), "--set", "data.path=corpus.gz"
    )
    assert "{split} and {lang}" in error_line(no_pattern)
    same_language = invoke(
        *common, "--run-dir", str(tmp_path / "r3"), "--set", "data.target_lang=de"
    )
    assert "both 'de'" in error_line(same_language)


def test_braces_in_a_folder_name_are_not_placeholders(tmp_path):
    folder = tmp_path / "corpus {v1}"
    folder.mkdir()
    (folder / "c_train.de").write_text("Ein Hund.\nZwei Katzen.\n", "utf-8")
    (folder / "c_train.en").write_text("A dog.\n", "utf-8")
    result = invoke(
        "run", "translation", "--config", str(SMOKE_CONFIG),
        "--run-dir", str(tmp_path / "run"),
        "--set", f"data.path={folder}/c_{{split}}.{{lang}}",
        "--set", "data.validation_split=", "--set", "data.test_split=",
    )  # fmt: skip
    # The files were found and read: the error is about their content.
    assert "misaligned parallel files" in error_line(result)


def test_search_space_gives_a_valid_config():
    hp = keras_tuner.HyperParameters()
    config = TranslationRecipe().search_space(hp, TranslationConfig())
    assert config.model.attention in ("bahdanau", "dot", "multihead")
    assert config.model.units in (128, 256, 512)
    assert {"cell_type", "units", "attention", "dropout", "learning_rate"} <= set(
        hp.values
    )


def test_configs_load():
    """Every shipped config loads to the values its file sets and passes the checks."""
    names = check_shipped_configs(TranslationRecipe())
    assert {"default.toml", "smoke.toml"} <= set(names)


def test_pair_dataset_batches_every_pair_once_with_shifted_targets():
    from rnnkit_recipes.translation.data import pair_dataset

    sources = [[4 + i] * (1 + i % 23) for i in range(100)]
    targets = [[2, *([5 + i] * (1 + i % 7)), 3] for i in range(100)]
    for shuffle in (True, False):
        seen, batches = [], 0
        dataset = pair_dataset(sources, targets, 8, shuffle=shuffle, seed=1)
        for inputs, target_out in dataset:
            batches += 1
            source, target_in = inputs["source"].numpy(), inputs["target_in"].numpy()
            for row in range(len(source)):
                index = int(source[row, 0]) - 4
                assert list(source[row][source[row] != 0]) == sources[index]
                framed = targets[index]
                assert list(target_in[row, : len(framed) - 1]) == framed[:-1]
                assert list(target_out.numpy()[row, : len(framed) - 1]) == framed[1:]
                seen.append(index)
        assert sorted(seen) == list(range(100))
        assert batches == int(dataset.cardinality())  # the epoch length Keras is told


def test_runs_from_before_subword_vocabularies_still_predict_and_evaluate_says_why():
    """A config.toml without data.tokenizer reads as "subword"; the saved words win."""
    from rnnkit_recipes.translation.data import TranslationData

    from rnnkit.data.parallel_text import Vocabulary
    from rnnkit.errors import DataError
    from rnnkit.models.encoder_decoder import EncoderDecoder

    pairs = read_parallel_files(
        MULTI30K.format(split="val", lang="de"), MULTI30K.format(split="val", lang="en")
    )[:50]
    config = TranslationConfig().with_values({"evaluation.beam_width": 2})
    assert config.data.tokenizer == "subword"
    options = TextOptions()
    source, target = (
        Vocabulary.build([tokenize(pair[side], options) for pair in pairs])
        for side in (0, 1)
    )
    model = EncoderDecoder(source.tokens, target.tokens, embedding_dim=4, units=4)
    model.build()
    recipe = TranslationRecipe()
    [line] = recipe.predict(model, [pairs[0][0]], config)
    # Decoded with the word vocabulary: every output token is one of its words.
    assert set(line.replace(".", " ").split()) <= set(target.tokens)
    subword = SubwordVocabulary.build([tokenize(t, options) for _, t in pairs], 200)
    data = TranslationData(
        train=None, validation=None, test=None, source_vocabulary=subword,
        target_vocabulary=subword, text_options=options, test_pairs=pairs,
        source="",
    )  # fmt: skip
    with pytest.raises(DataError, match='set data.tokenizer = "word" in its config'):
        recipe.evaluate(model, data, config)


def test_evaluate_refuses_another_cut_only_where_the_pairs_are_cut():
    """A split key changes a run's test split only where the recipe cuts one file
    (tab-separated pairs, or parallel files without a test split); with one pair of
    files per split, as Multi30k, `--set data.split_seed=3` changes nothing and
    passes."""
    from rnnkit.errors import ConfigError

    recipe = TranslationRecipe()
    anki = TranslationConfig()
    with pytest.raises(ConfigError, match=r"--set data.split_seed=3: .*split another"):
        recipe.check_same_split(anki, {"data.split_seed": 3})
    multi30k = config_lib.resolve(
        TranslationConfig, str(ROOT / "recipes/translation/configs/multi30k_de_en.toml")
    )
    assert recipe.split_keys_of(multi30k) == ()
    recipe.check_same_split(multi30k, {"data.split_seed": 3, "data.test_fraction": 0.3})
    cut = multi30k.with_values({"data.test_split": ""})  # the test pairs cut from train
    with pytest.raises(ConfigError, match="drop --set data.test_fraction"):
        recipe.check_same_split(cut, {"data.test_fraction": 0.3})
    # Cutting the test split out of the files the run trained on, however asked.
    for overrides in ({"data.test_split": ""}, {"data.format": "anki"}):
        with pytest.raises(ConfigError, match="would cut the test split out of them"):
            recipe.check_same_split(multi30k, overrides)
    recipe.check_same_split(multi30k, {"data.test_split": "test_2017_flickr"})
    with pytest.raises(ConfigError, match="data.test_split='train' is the training"):
        recipe.check_config(multi30k.with_values({"data.test_split": "train"}))
