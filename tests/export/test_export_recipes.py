"""Every recipe's export, reloaded in a fresh process by its own runtime
(TensorFlow's SavedModel loader, the LiteRT interpreter, onnxruntime) and compared
with the Keras model's outputs within 1e-5 (float32)."""

from __future__ import annotations

import gc
import gzip
import json

import numpy as np
import pytest
import tensorflow as tf

from rnnkit import registry
from rnnkit.export import ExportError, export
from rnnkit.export.clients import greedy_decode, sentiment_token_ids
from rnnkit.training import runner
from tests.export.support import assert_close, run_fresh
from tests.sentiment_support import imdb_sample
from tests.shared_data import SHARED_DATA

FORMATS = ("saved_model", "tflite", "onnx")

# A LiteRT conversion that fails (`exported`, below) leaves TensorFlow functions
# whose deletion raises "Tried to remove non-existent function" whenever the garbage
# collector reaches them, in whichever test that is.
pytestmark = pytest.mark.filterwarnings(
    "ignore::pytest.PytestUnraisableExceptionWarning"
)


def exported(run_dir, format, tmp_path):
    """The export, or an xfail for the LiteRT conversion of layers with dropout,
    which rnnkit.export.convert does not handle yet."""
    try:
        return export(run_dir, format=format, output=tmp_path / format)
    except ExportError as error:
        if format != "tflite" or "AssignVariableOp" not in str(error):
            raise
        message = str(error)
    # The failed conversion leaves TensorFlow functions whose deletion raises;
    # collect them here, inside the test that caused them.
    gc.collect()
    pytest.xfail(f"LiteRT conversion of recurrent dropout: {message}")


def artefact_path(result, name="model"):
    if result.format == "saved_model":
        return result.output
    return result.output / result.description["models"][name]["file"]


@pytest.mark.parametrize("format", FORMATS)
def test_stock_forecast(runs, format, tmp_path):
    recipe, config, model = runner.load_run(runs("stock"), registry.load)
    data = recipe.load_data(config)
    split = data.splits["test"]
    windows = split.inputs[:40].astype("float32")
    last_close = data.prices["close"].to_numpy()[split.anchors[:40]].astype("float32")
    returns = model.predict(windows, verbose=0)
    expected = {
        "log_return_pct": returns,
        "close": last_close[:, None] * np.exp(np.cumsum(returns, axis=1) / 100),
    }
    result = exported(runs("stock"), format, tmp_path)
    (actual,) = run_fresh(
        tmp_path,
        [
            (
                format,
                artefact_path(result),
                "forecast",
                {"window": windows, "last_close": last_close},
            )
        ],
    )
    assert_close(actual, expected)


def review_texts() -> list[str]:
    """Real reviews of very different lengths (padded batches), an empty text and
    one without words."""
    texts = list(imdb_sample("test", 12).text)
    return [*texts, "", "!!! ...", "Great.", texts[0][:200]]


@pytest.mark.parametrize("format", FORMATS)
def test_sentiment_probabilities(runs, format, tmp_path):
    from rnnkit.models.sequence_classifier import class_probabilities

    _, _, model = runner.load_run(runs("sentiment"), registry.load)
    texts = review_texts()
    expected = {"probabilities": class_probabilities(model, texts, verbose=0)}
    result = exported(runs("sentiment"), format, tmp_path)
    notes = result.description["notes"]
    vocabulary = (result.output / "vocabulary.txt").read_text("utf-8").split("\n")
    ids = sentiment_token_ids(
        texts,
        vocabulary[:-1],
        notes["sequence_length"],
        notes["keep"],
        notes["lowercase"],
    )
    jobs = [(format, artefact_path(result), "classify_token_ids", {"token_ids": ids})]
    if format == "saved_model":
        jobs.append((format, result.output, "classify", {"text": np.array(texts)}))
    outputs = run_fresh(tmp_path, jobs)
    for actual in outputs:
        assert_close(actual, expected)
    if format == "saved_model":
        labels = [label.decode() for label in outputs[1]["label"]]
        names = notes["class_names"]
        assert labels == [names[i] for i in expected["probabilities"].argmax(1)]


def test_sentiment_tokenizer_is_the_models_text_layers(runs):
    _, config, model = runner.load_run(runs("sentiment"), registry.load)
    texts = [*review_texts(), *imdb_sample("train", 100).text]
    vectorizer = model.get_layer("vectorizer")
    truncate = model.get_layer("truncate")
    reference = np.asarray(truncate(vectorizer(tf.constant(texts))))
    ids = sentiment_token_ids(
        texts,
        vectorizer.get_vocabulary(),
        truncate.max_length,
        truncate.keep,
        config.data.lowercase,
    )
    width = reference.shape[1]
    np.testing.assert_array_equal(ids[:, :width], reference)
    assert not ids[:, width:].any()


def test_language_model_step_is_the_model_one_token_at_a_time(runs):
    from rnnkit.export.steps import language_model_step

    _, _, model = runner.load_run(runs("language_model"), registry.load)
    step, inputs, _ = language_model_step(model)
    ids = np.random.default_rng(0).integers(0, model.vocabulary_size, (3, 15))
    expected = np.asarray(model.with_batch_size(None, stateful=False)(ids))
    state = {t.name: np.zeros((3, t.shape[1]), "float32") for t in inputs[1:]}
    logits = []
    for t in range(ids.shape[1]):
        outputs = step({"token": ids[:, t].astype("int32"), **state})
        logits.append(np.asarray(outputs["logits"]))
        state = {name: np.asarray(outputs["next_" + name]) for name in state}
    np.testing.assert_allclose(np.stack(logits, 1), expected, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("format", ["saved_model", "tflite", "onnx"])
def test_language_model_step(runs, format, tmp_path):
    from rnnkit.export.steps import language_model_step

    _, _, model = runner.load_run(runs("language_model"), registry.load)
    step, inputs, _ = language_model_step(model)
    rng = np.random.default_rng(1)
    feeds = {"token": rng.integers(0, model.vocabulary_size, (4,)).astype("int32")}
    for tensor in inputs[1:]:
        feeds[tensor.name] = rng.uniform(-1, 1, (4, tensor.shape[1])).astype("float32")
    expected = {k: np.asarray(v) for k, v in step(feeds).items()}
    result = exported(runs("language_model"), format, tmp_path)
    signature = "step"
    (actual,) = run_fresh(
        tmp_path, [(format, artefact_path(result, "step"), signature, feeds)]
    )
    assert_close(actual, expected)
    tokens = json.loads((result.output / "vocabulary.json").read_text("utf-8"))
    assert tokens == list(model.tokens)


def multi30k(split: str, language: str, count: int) -> list[str]:
    path = SHARED_DATA / "translation" / f"multi30k_{split}.{language}.gz"
    with gzip.open(path, "rt", encoding="utf-8") as handle:
        return handle.read().splitlines()[:count]


@pytest.mark.slow  # about 25 s: the text graph ops are checked in test_text.py
def test_translation_saved_model_translates_as_greedy_search(runs, tmp_path):
    recipe, config, model = runner.load_run(runs("translation"), registry.load)
    sentences = [*multi30k("test_2016_flickr", "de", 12), "Ein Hund!", ""]
    greedy = config.with_values({"evaluation.beam_width": 1})
    # `predict` skips empty inputs; the signature translates one unknown token.
    expected = recipe.predict(model, sentences[:-1], greedy)
    result = export(runs("translation"), format="saved_model", output=tmp_path / "sm")
    (actual,) = run_fresh(
        tmp_path,
        [("saved_model", result.output, "translate", {"text": np.array(sentences)})],
    )
    translations = [t.decode() for t in actual["translation"]]
    assert translations[:-1] == expected
    assert actual["token_ids"][-1].any()


@pytest.mark.parametrize("format", ["tflite", "onnx"])
def test_translation_encoder_and_decoder_step(runs, format, tmp_path):
    from rnnkit_recipes.translation.data import text_options
    from rnnkit_recipes.translation.decode import source_tokens

    from rnnkit import decoding
    from rnnkit.data.parallel_text import SubwordVocabulary
    from rnnkit.export import Tensor
    from rnnkit.export.steps import decoder_signatures

    recipe, config, model = runner.load_run(runs("translation"), registry.load)
    result = exported(runs("translation"), format, tmp_path)
    notes = result.description["notes"]
    length = notes["source_length"]
    vocabulary = SubwordVocabulary(model.source_tokens)
    sentences = multi30k("test_2016_flickr", "de", 6)
    rows = [
        vocabulary.encode(source_tokens(s, text_options(config))) for s in sentences
    ]
    source_ids = np.zeros((len(rows), length), "int32")  # padded: masked positions
    for row, ids in enumerate(rows):
        source_ids[row, : len(ids)] = ids[:length]
    encode, _, _, step, step_inputs, _ = decoder_signatures(
        model,
        Tensor("source_ids", "int32", (None, length)),
        np.ones((1, length), "int32"),
    )
    expected_memory = {
        k: np.asarray(v) for k, v in encode({"source_ids": source_ids}).items()
    }
    step_feeds = {**expected_memory, "token": np.full((len(rows),), 2, "int32")}
    step_feeds = {t.name: step_feeds[t.name] for t in step_inputs}
    expected_step = {k: np.asarray(v) for k, v in step(step_feeds).items()}
    memory, step_out = run_fresh(
        tmp_path,
        [
            (format, artefact_path(result, "encoder"), "", {"source_ids": source_ids}),
            (format, artefact_path(result, "decoder_step"), "", step_feeds),
        ],
    )
    assert_close(memory, expected_memory)
    assert_close(step_out, expected_step)

    # The documented client: greedy search with the two files, against Keras'.
    if format == "onnx":
        import onnxruntime

        from rnnkit.export.clients import run_onnx as call

        encoder = onnxruntime.InferenceSession(str(artefact_path(result, "encoder")))
        decoder = onnxruntime.InferenceSession(
            str(artefact_path(result, "decoder_step"))
        )
        run_encoder = lambda inputs: call(encoder, inputs)  # noqa: E731
        run_step = lambda inputs: call(decoder, inputs)  # noqa: E731
    else:
        from ai_edge_litert.interpreter import Interpreter

        from rnnkit.export.clients import run_litert as call

        encoder = Interpreter(model_path=str(artefact_path(result, "encoder")))
        decoder = Interpreter(model_path=str(artefact_path(result, "decoder_step")))
        run_encoder = lambda inputs: call(encoder, inputs)  # noqa: E731
        run_step = lambda inputs: call(decoder, inputs)  # noqa: E731
    tokens = greedy_decode(
        run_encoder,
        run_step,
        {"source_ids": source_ids},
        start_id=notes["start_id"],
        end_id=notes["end_id"],
        max_steps=20,
        suppress_ids=notes["suppress_ids"],
    )
    reference = decoding.greedy_search(
        model,
        source_ids,
        start_id=notes["start_id"],
        end_id=notes["end_id"],
        suppress_ids=notes["suppress_ids"],
        max_length=20,
    ).tokens[:, 0]
    np.testing.assert_array_equal(tokens, reference[:, : tokens.shape[1]])
    assert not reference[:, tokens.shape[1] :].any()
