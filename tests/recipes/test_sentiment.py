"""The sentiment recipe end to end through the `rnnkit` launcher, on real reviews."""

from __future__ import annotations

import dataclasses
import json
import logging
import shutil
import socket
import subprocess
import sys

import keras_tuner
import pytest
from click.testing import CliRunner
from rnnkit_recipes.sentiment.recipe import SentimentConfig, SentimentRecipe

from rnnkit import config as config_lib
from rnnkit.cli import main
from rnnkit.errors import ConfigError, DataError
from tests import preloaded
from tests.sentiment_support import (
    ROOT,
    SENTIMENT_DATA,
    SMOKE_CONFIG,
    imdb_sample,
    write_imdb_csv,
)


def invoke(*args: str):
    return CliRunner().invoke(main, list(args))


def _error_line(output: str) -> str:
    """The one "Error: ..." line of a failed command (progress lines may precede it)."""
    assert "Traceback" not in output
    errors = [line for line in output.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1, output
    return errors[0]


@pytest.fixture(scope="module")
def reviews(tmp_path_factory):
    """600 training reviews (300 per class) and 400 test reviews, real IMDB text."""
    folder = tmp_path_factory.mktemp("reviews")
    return (
        write_imdb_csv(folder / "train.csv.gz", "train", 300),
        write_imdb_csv(folder / "test.csv", "test", 200),
    )


@pytest.fixture(scope="module")
def smoke_run(reviews, tmp_path_factory):
    train, test = reviews
    run_dir = tmp_path_factory.mktemp("runs") / "sentiment"
    result = invoke(
        "run", "sentiment", "--config", str(SMOKE_CONFIG),
        "--set", f"data.path={train}", "--set", f"data.test_path={test}",
        "--set", "data.limit=0", "--run-dir", str(run_dir),
    )  # fmt: skip
    assert result.exit_code == 0, result.output[-3000:]
    return run_dir, result.output


def test_run_writes_the_run_directory_and_beats_the_majority(smoke_run):
    run_dir, output = smoke_run
    for name in (
        "config.toml", "model.keras", "metrics.json", "history.csv", "run.json",
        "plots/training_curves.png", "plots/confusion_matrix.png",
    ):  # fmt: skip
        assert (run_dir / name).is_file(), name
    assert (run_dir / "plots/confusion_matrix.png").read_bytes()[
        :8
    ] == b"\x89PNG\r\n\x1a\n"
    table = json.loads((run_dir / "metrics.json").read_text())["test"]
    assert list(table) == [
        "model", "majority", "bag_of_words", "tfidf_bigrams", "nbsvm_bigrams",
        "ensemble_nbsvm",
    ]  # fmt: skip
    assert set(table["model"]) == {"accuracy", "precision", "recall", "f1", "roc_auc"}
    assert table["ensemble_nbsvm"]["model_weight"] in (0.25, 0.5, 0.75)
    assert table["majority"]["accuracy"] == pytest.approx(0.5)
    assert table["majority"]["roc_auc"] == pytest.approx(0.5)
    # 540 training reviews and three epochs: far from the full-data figures, but
    # clearly better than always answering the majority class.
    assert table["model"]["accuracy"] > table["majority"]["accuracy"] + 0.05
    assert table["model"]["roc_auc"] > 0.65
    assert table["bag_of_words"]["accuracy"] > 0.65
    assert table["tfidf_bigrams"]["accuracy"] > 0.65
    assert table["nbsvm_bigrams"]["accuracy"] > 0.65
    assert "bag_of_words" in output and "nbsvm_bigrams" in output


def test_predict_after_reloading_prints_label_and_probability(smoke_run, tmp_path):
    run_dir, _ = smoke_run
    import keras

    from rnnkit.models.sequence_classifier import class_probabilities

    texts = ["an absolutely wonderful film", "dull, boring, a waste of time"]
    result = invoke("predict", str(run_dir), *texts)
    assert result.exit_code == 0, result.output
    # What predict prints is the saved model's own answer for each text.
    model = keras.saving.load_model(run_dir / "model.keras")
    expected = class_probabilities(model, texts, verbose=0)
    for line, text, row in zip(
        result.output.strip().splitlines(), texts, expected, strict=True
    ):
        label, probability, printed = line.split(maxsplit=2)
        assert label == ("negative", "positive")[int(row.argmax())]
        assert float(probability) == pytest.approx(row.max(), abs=5e-4)
        assert printed == text

    texts = tmp_path / "texts.txt"
    texts.write_text("A masterpiece.\n\nDull, boring, a waste of time.\n", "utf-8")
    result = invoke("predict", str(run_dir), str(texts), "one more")
    lines = result.output.strip().splitlines()
    assert result.exit_code == 0 and len(lines) == 3
    assert lines[1].endswith("Dull, boring, a waste of time.")


def test_predict_in_a_fresh_process(smoke_run):
    run_dir, _ = smoke_run
    result = preloaded.run(
        ["-c", "from rnnkit.cli import main; main()",
         "predict", str(run_dir), "<br />the worst film i have ever seen"],
        timeout=300,
        env={**__import__("os").environ, "TF_CPP_MIN_LOG_LEVEL": "3"},
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.split()[0] in ("negative", "positive")


def test_evaluate_reproduces_the_metrics(smoke_run):
    run_dir, _ = smoke_run
    result = invoke("evaluate", str(run_dir), "--output", str(run_dir / "again.json"))
    assert result.exit_code == 0, result.output[-2000:]
    again = json.loads((run_dir / "again.json").read_text())["test"]
    saved = json.loads((run_dir / "metrics.json").read_text())["test"]
    for system, values in saved.items():
        assert again[system] == pytest.approx(values), system


def test_baselines_can_be_left_out(smoke_run):
    run_dir, _ = smoke_run
    result = invoke(
        "evaluate", str(run_dir), "--set", "evaluation.baselines=false",
        "--output", str(run_dir / "model_only.json"),
    )  # fmt: skip
    assert result.exit_code == 0, result.output[-2000:]
    model_only = json.loads((run_dir / "model_only.json").read_text())["test"]
    saved = json.loads((run_dir / "metrics.json").read_text())["test"]
    assert set(saved) == {
        "model", "majority", "bag_of_words", "tfidf_bigrams", "nbsvm_bigrams",
        "ensemble_nbsvm",
    }  # fmt: skip
    assert set(model_only) == {"model"}
    assert model_only["model"] == pytest.approx(saved["model"])


def test_predict_without_text_is_a_one_line_error(smoke_run, tmp_path):
    run_dir, _ = smoke_run
    blank = tmp_path / "blank.txt"
    blank.write_text("\n \n", "utf-8")
    result = invoke("predict", str(run_dir), str(blank))
    assert result.exit_code == 1
    assert result.output.strip().splitlines() == [
        "Error: nothing to classify: give a text, or a file with one per line"
    ]


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"data.path": "no/such/reviews.csv"}, "no/such/reviews.csv: no such file"),
        ({"data.text_column": "review"}, "no text column 'review'"),
    ],
)
def test_bad_data_is_a_one_line_error(reviews, values, message):
    train, _ = reviews
    options = {"data.path": str(train), **values}
    args = [
        item for key, value in options.items() for item in ("--set", f"{key}={value}")
    ]
    result = invoke("run", "sentiment", "--config", str(SMOKE_CONFIG), *args)
    assert result.exit_code == 1
    assert _error_line(result.output).count(message) == 1


@pytest.mark.parametrize("encoding", ["utf9", "rot13"])
def test_an_unknown_encoding_is_refused_by_the_dry_run(encoding):
    """rot13 is a codec Python knows, but not one that reads text."""
    result = invoke(
        "run", "sentiment", "--config", str(SMOKE_CONFIG),
        "--set", f"data.encoding={encoding}", "--dry-run",
    )  # fmt: skip
    assert result.exit_code == 1
    assert _error_line(result.output) == (
        f"Error: data.encoding={encoding!r} is not a text encoding Python knows; "
        "use e.g. utf-8 or latin-1"
    )


def test_default_source_offline_says_how_to_use_local_files(monkeypatch, tmp_path):
    """Offline, IMDB not downloaded yet: one-line error, not seconds of retries."""

    def offline(host, port, *args, **kwargs):
        raise OSError(f"[Errno -2] Name or service not known: {host}")

    monkeypatch.setenv("RNNKIT_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setattr(socket, "getaddrinfo", offline)
    result = invoke("run", "sentiment", "--run-dir", str(tmp_path / "run"))
    assert result.exit_code == 1
    error = _error_line(result.output)
    assert error.startswith("Error: cannot reach ai.stanford.edu")
    assert "data.path=../shared/data/sentiment/imdb_train.csv.gz" in error
    assert not (tmp_path / "run").exists()  # nothing that looks like a run


def test_string_labels_are_mapped_and_reported(tmp_path):
    path = tmp_path / "reviews.csv"
    rows = [
        f'"review {index} text",{("negative", "positive")[index % 2]}'
        for index in range(40)
    ]
    path.write_text("text,sentiment\n" + "\n".join(rows) + "\n", "utf-8")
    config = config_lib.resolve(
        SentimentConfig,
        SMOKE_CONFIG,
        {
            "data.path": str(path),
            "data.test_path": None,
            "data.label_column": "sentiment",
        },
    )
    data = SentimentRecipe().load_data(config)
    assert data.text.class_names == ("negative", "positive")
    assert any("'positive' -> 1" in note for note in data.text.notes)
    texts, labels = next(iter(data.validation))
    assert labels.shape[1:] == (1,)


def test_sst2_tsv_through_the_config(tmp_path):
    config = config_lib.load_toml(
        SentimentConfig, ROOT / "recipes/sentiment/configs/sst2.toml"
    ).with_values(
        {"data.path": str(SENTIMENT_DATA / "sst2_dev.tsv.gz"), "data.test_path": None}
    )
    data = SentimentRecipe().load_data(config)
    assert len(data.text.train) + len(data.text.validation) + len(data.text.test) == 872
    assert data.text.class_names == ("negative", "positive")


def test_config_files_hold_the_defaults_and_imdb_the_same_model():
    defaults = SentimentConfig()
    default_file = config_lib.load_toml(
        SentimentConfig, ROOT / "recipes/sentiment/configs/default.toml"
    )
    assert default_file == defaults
    imdb = config_lib.load_toml(
        SentimentConfig, ROOT / "recipes/sentiment/configs/imdb.toml"
    )
    assert imdb.model == defaults.model and imdb.train == defaults.train
    for key in ("vocabulary_size", "sequence_length", "keep"):
        assert getattr(imdb.data, key) == getattr(defaults.data, key), key


def test_evaluate_refuses_another_cut_of_the_run_reviews():
    """The recipe contract's split keys: another test cut of the run's own file would
    hold reviews the model trained on; the run's own value and other data pass."""
    recipe, config = SentimentRecipe(), SentimentConfig()
    assert "data.split_seed" in recipe.split_keys
    with pytest.raises(ConfigError, match=r"--set data.split_seed=3: .*split another"):
        recipe.check_same_split(config, {"data.split_seed": 3})
    with pytest.raises(ConfigError, match="drop --set data.test_fraction"):
        recipe.check_same_split(config, {"data.test_fraction": 0.3})
    recipe.check_same_split(config, {"data.split_seed": 0, "train.seed": 5})
    recipe.check_same_split(config, {"data.path": "other.csv", "data.split_seed": 3})


def test_evaluate_warns_on_a_run_older_than_its_split_seed(smoke_run, tmp_path, caplog):
    """A run whose config.toml has no data.split_seed split its data otherwise (with
    train.seed): evaluate says today's split may not be the run's, and takes the
    run's own seed without refusing it."""
    run_dir, _ = smoke_run
    old_run = tmp_path / "old_run"
    shutil.copytree(run_dir, old_run)
    config_file = old_run / "config.toml"
    lines = config_file.read_text().splitlines(keepends=True)
    config_file.write_text("".join(ln for ln in lines if "split_seed" not in ln))
    with caplog.at_level(logging.WARNING, logger="rnnkit"):
        result = invoke("evaluate", str(old_run))
    assert result.exit_code == 0, result.output[-2000:]
    warned = [r.getMessage() for r in caplog.records if "predates" in r.getMessage()]
    assert len(warned) == 1 and "data.split_seed" in warned[0], warned
    assert "--set data.split_seed=VALUE" in warned[0]
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="rnnkit"):
        result = invoke("evaluate", str(old_run), "--set", "data.split_seed=1337")
    assert result.exit_code == 0, result.output[-2000:]
    assert not [r for r in caplog.records if "predates" in r.getMessage()]
    # The run's own config.toml records the key: no warning, and another is refused.
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="rnnkit"):
        result = invoke("evaluate", str(run_dir))
    assert result.exit_code == 0
    assert not [r for r in caplog.records if "predates" in r.getMessage()]


def test_search_space_sets_the_documented_keys():
    hp = keras_tuner.HyperParameters()
    config = SentimentRecipe().search_space(hp, SentimentConfig())
    assert set(hp.values) == {
        "cell_type", "units", "num_layers", "bidirectional", "embedding_dim",
        "dropout", "learning_rate", "sequence_length",
    }  # fmt: skip
    assert config.model.cell_type == hp.values["cell_type"]
    assert config.data.sequence_length == hp.values["sequence_length"]


def test_list_shows_the_recipe_without_importing_tensorflow():
    script = (
        "import sys\nfrom rnnkit.cli import main\n"
        "try:\n    main(['list'])\nexcept SystemExit:\n    pass\n"
        "print('tensorflow' in sys.modules)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    )
    assert "sentiment" in result.stdout
    assert result.stdout.strip().splitlines()[-1] == "False"


def test_multi_class_labels_train_evaluate_and_predict(tmp_path):
    # Star ratings as three classes: a softmax head, macro-averaged figures.
    sample = imdb_sample("train", 60)
    bands = {1: "low", 2: "low", 3: "low", 4: "mid", 7: "mid", 8: "high", 9: "high"}
    sample = sample.assign(band=sample["rating"].map(bands).fillna("high"))
    path = tmp_path / "ratings.csv"
    sample.to_csv(path, index=False)
    config = config_lib.resolve(
        SentimentConfig,
        SMOKE_CONFIG,
        {
            "data.path": str(path),
            "data.test_path": None,
            "data.label_column": "band",
            "data.class_names": ("low", "mid", "high"),
            "data.test_fraction": 0.25,
            "data.limit": 0,
        },
    )
    recipe = SentimentRecipe()
    data = recipe.load_data(config)
    model = recipe.build_model(config, data)
    model.fit(data.train, epochs=1, shuffle=False, verbose=0)
    table = recipe.evaluate(model, data, config)
    assert set(table) == {
        "model", "majority", "bag_of_words", "tfidf_bigrams", "nbsvm_bigrams",
        "ensemble_nbsvm",
    }  # fmt: skip
    # The table's figures are those of the model's own test predictions, and the
    # majority row answers the most frequent training class for every text.
    import numpy as np

    from rnnkit.models.sequence_classifier import class_probabilities

    test = data.text.test
    probabilities = class_probabilities(model, test.texts, verbose=0)
    assert probabilities.shape == (len(test), 3)
    predicted = probabilities.argmax(axis=1)
    assert table["model"]["accuracy"] == pytest.approx(
        np.mean(predicted == test.labels)
    )
    majority = np.bincount(data.text.train.labels, minlength=3).argmax()
    assert table["majority"]["accuracy"] == pytest.approx(
        np.mean(test.labels == majority)
    )
    names = list(data.text.class_names)
    lines = recipe.predict(model, list(test.texts[:3]), config)
    for line, row in zip(lines, probabilities[:3], strict=True):
        label, probability, _ = line.split(maxsplit=2)
        assert label == names[int(row.argmax())]
        assert float(probability) == pytest.approx(row.max(), abs=5e-4)


def test_evaluate_numbers_the_classes_as_the_run_did(tmp_path):
    """Data settings that order the classes otherwise (data.class_names) or leave
    one out: the labels are matched to the model's classes by name, and the figures
    are the model's own; a class the run never saw is refused."""
    sample = imdb_sample("train", 40)
    bands = {1: "low", 2: "low", 3: "low", 4: "mid", 7: "mid", 8: "high", 9: "high"}
    sample = sample.assign(band=sample["rating"].map(bands).fillna("high"))
    train, test = tmp_path / "train.csv", tmp_path / "test.csv"
    sample.iloc[::2].to_csv(train, index=False)
    sample.iloc[1::2].to_csv(test, index=False)
    settings = {
        "data.path": str(train),
        "data.test_path": str(test),
        "data.label_column": "band",
        "data.class_names": ("low", "mid", "high"),
        "data.limit": 0,
        "evaluation.baselines": False,
    }
    config = config_lib.resolve(SentimentConfig, SMOKE_CONFIG, settings)
    recipe = SentimentRecipe()
    data = recipe.load_data(config)
    model = recipe.build_model(config, data)
    model.fit(data.train, epochs=1, shuffle=False, verbose=0)
    own = recipe.evaluate(model, data, config)["model"]

    reordered = config.with_values({"data.class_names": ("high", "mid", "low")})
    other_data = SentimentRecipe().load_data(reordered)
    assert other_data.text.class_names == ("high", "mid", "low")
    again = SentimentRecipe().evaluate(model, other_data, reordered)["model"]
    assert again == pytest.approx(own)

    from rnnkit_recipes.sentiment.data import in_class_order

    with pytest.raises(DataError, match=r"\['top'\] are not among the run's"):
        in_class_order(
            dataclasses.replace(
                data,
                text=dataclasses.replace(data.text, class_names=("low", "mid", "top")),
            ),
            ("low", "mid", "high"),
        )


@pytest.mark.parametrize("num_classes", [2, 3])
def test_nbsvm_scales_binarized_ngrams_by_naive_bayes_log_count_ratios(num_classes):
    """NBSVM against the definitions written out densely in numpy: binarized
    uni+bigrams, r = log(p / |p|_1) - log(q / |q|_1) with p, q = 1 + the counts in
    the class's texts and in the others', a logistic regression on x * r per class
    (against the rest), C chosen on validation accuracy; real reviews."""
    import numpy as np
    from rnnkit_recipes.sentiment import baselines
    from sklearn.feature_extraction.text import CountVectorizer
    from sklearn.linear_model import LogisticRegression

    from rnnkit.data.text import TextSplit
    from tests.sentiment_support import imdb_sample

    sample = imdb_sample("train", 60)
    texts = sample["text"].to_numpy(dtype=object)
    labels = sample["label"].to_numpy()
    if num_classes == 3:  # a third class: the reviews rated 1 or 10
        labels = np.where(sample["rating"].isin([1, 10]), 2, labels)
    rng = np.random.default_rng(0)
    order = rng.permutation(len(texts))
    parts = np.split(order, [70, 95])
    train, validation, test = (TextSplit(texts[i], labels[i]) for i in parts)
    config = SentimentConfig()
    got_validation, got_test = baselines._nbsvm_probabilities(
        train, validation, test, num_classes, config
    )

    vectorizer = CountVectorizer(ngram_range=(1, 2), min_df=2, binary=True)
    x = vectorizer.fit_transform(train.texts).toarray()
    x_validation = vectorizer.transform(validation.texts).toarray()
    x_test = vectorizer.transform(test.texts).toarray()
    positives = [1] if num_classes == 2 else range(num_classes)
    best = None
    for strength in baselines.NBSVM_C_GRID:
        columns = []
        for k in positives:
            p = 1 + x[train.labels == k].sum(axis=0)
            q = 1 + x[train.labels != k].sum(axis=0)
            r = np.log(p / p.sum()) - np.log(q / q.sum())
            model = LogisticRegression(C=strength, solver="liblinear")
            model.fit(x * r, train.labels == k)
            columns.append(
                [model.predict_proba(z * r)[:, 1] for z in (x_validation, x_test)]
            )
        if num_classes == 2:
            found = [np.stack([1 - c, c], axis=1) for c in columns[0]]
        else:
            found = [np.stack([c[i] for c in columns], axis=1) for i in range(2)]
            found = [f / f.sum(axis=1, keepdims=True) for f in found]
        accuracy = np.mean(found[0].argmax(axis=1) == validation.labels)
        if best is None or accuracy > best[0]:
            best = (accuracy, found)
    np.testing.assert_allclose(got_validation, best[1][0], rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(got_test, best[1][1], rtol=1e-4, atol=1e-6)
    assert got_test.shape == (len(test), num_classes)
    np.testing.assert_allclose(got_test.sum(axis=1), 1.0, atol=1e-6)


def test_nbsvm_never_answers_a_class_no_training_text_has():
    """`data.class_names` may name a class the training split lacks: NBSVM gives it
    probability 0 instead of failing to fit a model with one label."""
    import numpy as np
    from rnnkit_recipes.sentiment import baselines

    from rnnkit.data.text import TextSplit
    from tests.sentiment_support import imdb_sample

    sample = imdb_sample("train", 30)
    texts = sample["text"].to_numpy(dtype=object)
    labels = sample["label"].to_numpy()  # 0 and 1; class 2 has no text
    split = TextSplit(texts, labels)
    validation, test = baselines._nbsvm_probabilities(
        split, split, split, 3, SentimentConfig()
    )
    assert np.all(test[:, 2] == 0) and np.all(validation[:, 2] == 0)
    np.testing.assert_allclose(test.sum(axis=1), 1.0, atol=1e-6)
    assert np.mean(test.argmax(axis=1) == labels) > 0.9  # its own training texts


def test_the_ensembles_weight_is_chosen_on_validation_ties_to_the_mean():
    import numpy as np
    from rnnkit_recipes.sentiment.baselines import _ensemble_weight

    labels = np.array([1, 1, 0])
    model = np.array([[0.2, 0.8], [0.3, 0.7], [0.6, 0.4]])
    linear = np.array([[0.4, 0.6], [0.8, 0.2], [0.3, 0.7]])
    # The mean misses the last two reviews, 0.75 of the model's gets all three.
    assert _ensemble_weight(labels, model, linear) == 0.75
    assert _ensemble_weight(labels, linear, model) == 0.25
    assert _ensemble_weight(labels, model, model) == 0.5  # every weight ties
