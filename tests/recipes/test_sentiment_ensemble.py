"""`rnnkit ensemble` of sentiment runs: the mean of the members' probabilities, as one
classifier that evaluates (test and validation), predicts and exports; and the runs it
refuses to combine, each in one line."""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner
from rnnkit_recipes.sentiment.ensemble import ensemble_model
from rnnkit_recipes.sentiment.recipe import SentimentConfig

from rnnkit import config as config_lib
from rnnkit import registry
from rnnkit.cli import main
from rnnkit.errors import ConfigError
from rnnkit.metrics import classification_metrics
from rnnkit.models.sequence_classifier import class_names_of, class_probabilities
from rnnkit.training import runner
from tests.sentiment_support import SMOKE_CONFIG, write_imdb_csv


def invoke(*args: str):
    return CliRunner().invoke(main, list(args))


@pytest.fixture(scope="module")
def members(tmp_path_factory):
    """Two runs of one seed on the same real reviews that differ in their model (a
    GRU with mean pooling, an LSTM with max pooling), one epoch each."""
    folder = tmp_path_factory.mktemp("reviews")
    train = write_imdb_csv(folder / "train.csv.gz", "train", 150)
    test = write_imdb_csv(folder / "test.csv", "test", 60)
    runs = []
    for name, cell, pooling in (("gru", "gru", "mean"), ("lstm", "lstm", "max")):
        run_dir = folder / name
        result = invoke(
            "run", "sentiment", "--config", str(SMOKE_CONFIG),
            "--set", f"data.path={train}", "--set", f"data.test_path={test}",
            "--set", "data.limit=0", "--set", "train.epochs=1",
            "--set", f"model.cell_type={cell}", "--set", f"model.pooling={pooling}",
            "--run-dir", str(run_dir),
        )  # fmt: skip
        assert result.exit_code == 0, result.output[-3000:]
        runs.append(run_dir)
    return runs


@pytest.fixture(scope="module")
def ensemble_run(members, tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("ensemble") / "both"
    result = invoke("ensemble", *map(str, members), "--run-dir", str(run_dir))
    assert result.exit_code == 0, result.output[-3000:]
    return run_dir


def _mean_probabilities(members, texts):
    """The members' probabilities of `texts`, averaged outside the ensemble."""
    rows = []
    for run_dir in members:
        _, _, model = runner.load_run(run_dir, registry.load)
        rows.append(class_probabilities(model, texts, verbose=0))
    return np.mean(rows, axis=0)


def test_the_ensemble_scores_the_mean_of_its_members(members, ensemble_run):
    recipe, config, model = runner.load_run(ensemble_run, registry.load)
    assert class_names_of(model) == ["negative", "positive"]
    data = recipe.load_data(config)
    expected = _mean_probabilities(members, data.text.test.texts)
    np.testing.assert_allclose(
        class_probabilities(model, data.text.test.texts, verbose=0),
        expected,
        atol=1e-6,
    )
    metrics = json.loads((ensemble_run / "metrics.json").read_text())["test"]
    assert metrics["model"] == pytest.approx(
        classification_metrics(data.text.test.labels, expected), abs=1e-6
    )
    # The linear lines beside it, as in every sentiment run.
    assert {"tfidf_bigrams", "nbsvm_bigrams", "ensemble_nbsvm"} <= set(metrics)
    run = json.loads((ensemble_run / "run.json").read_text())
    assert run["ensemble_of"] == [str(m) for m in members]
    assert run["seeds"] == [1337, 1337]


def test_the_ensemble_is_scored_on_validation_without_the_test(
    members, ensemble_run, tmp_path
):
    output = tmp_path / "validation.json"
    result = invoke(
        "evaluate", str(ensemble_run), "--split", "validation", "--output", str(output)
    )
    assert result.exit_code == 0, result.output[-3000:]
    recipe, config, _ = runner.load_run(ensemble_run, registry.load)
    validation = recipe.load_data(config).text.validation
    expected = _mean_probabilities(members, validation.texts)
    scored = json.loads(output.read_text())["validation"]["model"]
    assert scored["accuracy"] == pytest.approx(
        np.mean(expected.argmax(axis=1) == validation.labels)
    )


def test_the_ensemble_predicts_and_exports_as_one_classifier(
    members, ensemble_run, tmp_path
):
    texts = ["A wonderful, moving film.", "Dull and far too long; I left early."]
    result = invoke("predict", str(ensemble_run), *texts)
    assert result.exit_code == 0, result.output[-3000:]
    expected = _mean_probabilities(members, texts)
    lines = [
        line
        for line in result.output.splitlines()
        if line.endswith(("film.", "early."))
    ]
    for line, row in zip(lines, expected, strict=True):
        label, probability, _ = line.split(maxsplit=2)
        assert label == ["negative", "positive"][int(row.argmax())]
        assert float(probability) == pytest.approx(row.max(), abs=5e-4)

    import onnxruntime

    from rnnkit.export import export
    from rnnkit.export.clients import run_onnx
    from tests.export.support import exported_token_ids

    exported = export(ensemble_run, format="onnx", output=tmp_path / "onnx")
    ids = exported_token_ids(exported, texts)
    model_file = exported.output / exported.description["models"]["model"]["file"]
    session = onnxruntime.InferenceSession(str(model_file))
    np.testing.assert_allclose(
        run_onnx(session, {"token_ids": ids})["probabilities"], expected, atol=1e-5
    )


def _configs(*overrides):
    return [
        config_lib.resolve(SentimentConfig, SMOKE_CONFIG, values)
        for values in overrides
    ]


@pytest.mark.parametrize(
    ("second", "named"),
    [
        ({"train.seed": 7}, "train.seed"),
        ({"data.split_seed": 3}, "data.split_seed"),
        ({"data.vocabulary_size": 4000}, "data.vocabulary_size"),
        ({"data.keep": "first"}, "data.keep"),
    ],
)
def test_runs_of_another_split_or_another_reading_are_refused(second, named):
    with pytest.raises(ConfigError, match=f"the runs differ in {named}"):
        ensemble_model([None, None], _configs({}, second))


def test_only_the_mean_combines_sentiment_runs(members, tmp_path):
    result = invoke(
        "ensemble", *map(str, members), "--combine", "median",
        "--run-dir", str(tmp_path / "median"),
    )  # fmt: skip
    assert result.exit_code != 0
    errors = [line for line in result.output.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1 and "mean" in errors[0], result.output
    assert "Traceback" not in result.output
    assert not (tmp_path / "median").exists()
