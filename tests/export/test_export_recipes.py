"""Every recipe's export, reloaded in a fresh process by its own runtime
(TensorFlow's SavedModel loader, the LiteRT interpreter, onnxruntime) and compared
with the Keras model's outputs within 1e-5 (float32)."""

from __future__ import annotations

import gzip
import json

import numpy as np
import pytest
import tensorflow as tf

from rnnkit import registry
from rnnkit.export import export
from rnnkit.export.clients import (
    greedy_decode,
    sentiment_token_ids,
    vocabulary_index,
)
from rnnkit.training import runner
from tests.export.support import assert_close, exported_token_ids, run_fresh
from tests.sentiment_support import imdb_sample
from tests.shared_data import SHARED_DATA

FORMATS = ("saved_model", "tflite", "onnx")


def exported(run_dir, format, tmp_path):
    """The run exported to `format` in tmp_path. Every recipe's model exports to
    every format, dropout included (the sentiment run has embedding, output and
    recurrent dropout: tests/export/conftest.py)."""
    return export(run_dir, format=format, output=tmp_path / format)


def artefact_path(result, name="model"):
    if result.format == "saved_model":
        return result.output
    return result.output / result.description["models"][name]["file"]


def encoder_and_step(result, format):
    """The exported encoder and decoder step as a client calls them (LiteRT's
    interpreter or onnxruntime, in this process): two functions of named arrays."""
    if format == "onnx":
        import onnxruntime

        from rnnkit.export.clients import run_onnx as call

        def load(path):
            return onnxruntime.InferenceSession(str(path))
    else:
        from ai_edge_litert.interpreter import Interpreter

        from rnnkit.export.clients import run_litert as call

        def load(path):
            return Interpreter(model_path=str(path))

    encoder = load(artefact_path(result, "encoder"))
    decoder = load(artefact_path(result, "decoder_step"))
    return (
        lambda inputs: call(encoder, inputs),
        lambda inputs: call(decoder, inputs),
    )


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


@pytest.mark.parametrize("format", FORMATS)
def test_forecasting_quantiles(tmp_path_factory, format, tmp_path):
    """The README's main job (the shared smoke run, tests/smoke_runs.py): its test
    windows, and one of a series the model never saw (the lookup's row 0 in every
    format: series.txt's ids are 1 + their line)."""
    from tests.smoke_runs import smoke_run

    run = smoke_run(tmp_path_factory, "forecasting")
    assert run.exit_code == 0, run.output[-3000:]
    recipe, config, model = runner.load_run(run.run_dir, registry.load)
    data = recipe.load_data(config)
    inputs, _, _ = data.windows.arrays(data.test_rows)
    inputs["series"][-1] = "a series never seen"
    expected = {"quantiles": model.predict(inputs, verbose=0)}
    result = exported(run.run_dir, format, tmp_path)
    notes = result.description["notes"]
    assert notes["quantiles"] == sorted(config.model.quantiles)
    assert (notes["input_length"], notes["horizon"]) == (
        config.data.input_length,
        config.data.horizon,
    )
    assert len(notes["periods"]) * 2 == inputs["past_time"].shape[-1]
    given = {name: np.asarray(value) for name, value in inputs.items()}
    given["series"] = np.array([str(s) for s in inputs["series"]])
    if format != "saved_model":
        ids = (result.output / notes["series_file"]).read_text().splitlines()
        assert sorted(ids) == sorted(data.grid.ids)
        row = {series: line + 1 for line, series in enumerate(ids)}
        series = given.pop("series")
        given["series_index"] = np.array([row.get(s, 0) for s in series], "int32")
        assert given["series_index"][-1] == 0 and given["series_index"][:-1].all()
    (actual,) = run_fresh(
        tmp_path, [(format, artefact_path(result), "forecast", given)]
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
    ids = exported_token_ids(result, texts)
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
    index = vocabulary_index(vectorizer.get_vocabulary())  # indexed once: the same
    again = sentiment_token_ids(
        texts, index, truncate.max_length, truncate.keep, config.data.lowercase
    )
    np.testing.assert_array_equal(again, ids)


def language_model_step(model):
    """The exported step of a language model of either architecture."""
    from rnnkit.export.steps import (
        language_model_step,
        transformer_language_model_step,
    )

    if getattr(model, "architecture", "rnn") == "transformer":
        return transformer_language_model_step(model)
    return language_model_step(model)


def zero_state(inputs, batch: int) -> dict:
    """The step's state inputs at the start of a text: zeros."""
    return {
        t.name: np.zeros((batch, *t.shape[1:]), t.dtype)
        for t in inputs
        if t.name != "token"
    }


def stepped(step, ids, state) -> tuple[np.ndarray, dict]:
    """The logits (batch, time, vocabulary) of `ids` fed one token at a time from
    `state`, and the state after them."""
    logits = []
    for t in range(ids.shape[1]):
        outputs = step({"token": ids[:, t].astype("int32"), **state})
        logits.append(np.asarray(outputs["logits"]))
        state = {name: np.asarray(outputs["next_" + name]) for name in state}
    return np.stack(logits, 1), state


LANGUAGE_MODELS = [
    "language_model",
    "language_model_transformer",
    "language_model_hawk",
]


@pytest.mark.parametrize("run", LANGUAGE_MODELS)
def test_language_model_step_is_the_model_one_token_at_a_time(runs, run):
    _, _, model = runner.load_run(runs(run), registry.load)
    step, inputs, _ = language_model_step(model)
    ids = np.random.default_rng(0).integers(0, model.vocabulary_size, (3, 15))
    if run != "language_model_transformer":
        model = model.with_batch_size(None, stateful=False)
    expected = np.asarray(model(ids))
    logits, _ = stepped(step, ids, zero_state(inputs, 3))
    np.testing.assert_allclose(logits, expected, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("run", LANGUAGE_MODELS)
@pytest.mark.parametrize("format", FORMATS)
def test_language_model_step(runs, run, format, tmp_path):
    _, _, model = runner.load_run(runs(run), registry.load)
    step, inputs, _ = language_model_step(model)
    rng = np.random.default_rng(1)
    feeds = {"token": rng.integers(0, model.vocabulary_size, (4,)).astype("int32")}
    if run != "language_model_transformer":  # states anywhere in their range
        for tensor in inputs[1:]:
            shape = (4, *tensor.shape[1:])
            feeds[tensor.name] = rng.uniform(-1, 1, shape).astype("float32")
    else:  # the cache in the middle of a text: five tokens read
        prefix = rng.integers(0, model.vocabulary_size, (4, 5))
        feeds.update(stepped(step, prefix, zero_state(inputs, 4))[1])
    expected = {k: np.asarray(v) for k, v in step(feeds).items()}
    result = exported(runs(run), format, tmp_path)
    (actual,) = run_fresh(
        tmp_path, [(format, artefact_path(result, "step"), "step", feeds)]
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


def source_id_rows(model, config, sentences, length=None) -> np.ndarray:
    """The sentences' source ids, right-padded with 0 to `length` (default: the
    longest)."""
    from rnnkit_recipes.translation.data import text_options
    from rnnkit_recipes.translation.decode import source_tokens

    from rnnkit.data.parallel_text import SubwordVocabulary

    vocabulary = SubwordVocabulary(model.source_tokens)
    rows = [
        vocabulary.encode(source_tokens(s, text_options(config))) for s in sentences
    ]
    length = length or max(len(ids) for ids in rows)
    source_ids = np.zeros((len(rows), length), "int32")  # padded: masked positions
    for row, ids in enumerate(rows):
        source_ids[row, : len(ids)] = ids[:length]
    return source_ids


def decoder_feeds(model, config, source_ids, fixed_length: bool):
    """The Keras encoder's outputs for `source_ids`, and the decoder step's inputs
    three greedy steps later (state and cache part-filled), with the step's
    outputs there."""
    from rnnkit_recipes.translation.decode import search_options
    from rnnkit_recipes.translation.export import decode_length

    from rnnkit.export import Tensor
    from rnnkit.export.steps import decoder_signatures

    length = source_ids.shape[1] if fixed_length else None
    encode, _, _, step, step_inputs, _ = decoder_signatures(
        model,
        Tensor("source_ids", "int32", (None, length)),
        np.ones((1, source_ids.shape[1]), "int32"),
        decode_length(search_options(config)),
    )
    memory = {k: np.asarray(v) for k, v in encode({"source_ids": source_ids}).items()}
    feeds = {**memory, "token": np.full((len(source_ids),), 2, "int32")}
    for _ in range(3):
        outputs = {k: np.asarray(v) for k, v in step(feeds).items()}
        feeds["token"] = outputs["logits"].argmax(-1).astype("int32")
        feeds.update({k[5:]: v for k, v in outputs.items() if k.startswith("next_")})
    feeds = {t.name: feeds[t.name] for t in step_inputs}
    return memory, feeds, {k: np.asarray(v) for k, v in step(feeds).items()}


def test_translation_transformer_saved_model(runs, tmp_path):
    """Greedy translations as the recipe's own, and the encoder and a decoder step
    (any source length) within 1e-5 of Keras."""
    run_dir = runs("translation_transformer")
    recipe, config, model = runner.load_run(run_dir, registry.load)
    sentences = [*multi30k("test_2016_flickr", "de", 6), "Ein Hund!"]
    greedy = config.with_values({"evaluation.beam_width": 1})
    expected = recipe.predict(model, sentences, greedy)
    source_ids = source_id_rows(model, config, sentences[:4])
    memory, feeds, step_out = decoder_feeds(model, config, source_ids, False)
    result = export(run_dir, format="saved_model", output=tmp_path / "sm")
    actual, actual_memory, actual_step = run_fresh(
        tmp_path,
        [
            ("saved_model", result.output, "translate", {"text": np.array(sentences)}),
            ("saved_model", result.output, "encode", {"source_ids": source_ids}),
            ("saved_model", result.output, "decoder_step", feeds),
        ],
    )
    assert [t.decode() for t in actual["translation"]] == expected
    assert_close(actual_memory, memory)
    assert_close(actual_step, step_out)


@pytest.mark.parametrize("run", ["translation", "translation_transformer"])
@pytest.mark.parametrize("format", ["tflite", "onnx"])
def test_translation_encoder_and_decoder_step(runs, run, format, tmp_path):
    from rnnkit import decoding

    recipe, config, model = runner.load_run(runs(run), registry.load)
    result = exported(runs(run), format, tmp_path)
    notes = result.description["notes"]
    length = notes["source_length"]
    sentences = multi30k("test_2016_flickr", "de", 6)
    source_ids = source_id_rows(model, config, sentences, length)
    expected_memory, step_feeds, expected_step = decoder_feeds(
        model, config, source_ids, True
    )
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
    run_encoder, run_step = encoder_and_step(result, format)
    assert notes.get("max_steps", 20) >= 20  # a Transformer's cache positions
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


# -- captioning -----------------------------------------------------------------------

FLICKR8K = SHARED_DATA / "captioning"


def flickr8k_test_images(count: int) -> list[bytes]:
    """The first `count` Flickr8k test images, as their JPEG files' bytes."""
    import zipfile

    from tests.shared_data import require

    names = (require(FLICKR8K) / "Flickr_8k.testImages.txt").read_text().split()
    with zipfile.ZipFile(require(FLICKR8K / "flickr8k_images_256px.zip")) as images:
        return [images.read(f"flickr8k_images_256/{n}") for n in names[:count]]


def re_encoded(content: bytes, mode: str, format: str) -> bytes:
    import io

    from PIL import Image

    with Image.open(io.BytesIO(content)) as image:
        buffer = io.BytesIO()
        image.convert(mode).save(buffer, format)
    return buffer.getvalue()


def test_captioning_graph_decodes_images_to_the_recipes_pixels():
    """The SavedModel's image handling gives the very pixels the recipe trains and
    predicts on (Pillow's), for real JPEGs shrunk and enlarged, grey JPEGs and PNGs
    with and without alpha or a palette."""
    from rnnkit_recipes.captioning.images import decode

    from rnnkit.export.images import squashed_pixels

    jpegs = flickr8k_test_images(20)
    contents = [
        *jpegs,
        re_encoded(jpegs[0], "L", "JPEG"),
        *(re_encoded(jpegs[1], mode, "PNG") for mode in ("RGB", "RGBA", "L", "P")),
    ]
    for size in (64, 299):  # the images are at most 256 pixels wide
        expected = np.stack([decode(content, size) for content in contents])
        actual = np.asarray(squashed_pixels(tf.constant(contents), size))
        np.testing.assert_array_equal(actual, expected, err_msg=f"size {size}")


def captioning_case(runs, tmp_path, count: int = 8):
    """The run, its model, real test images (files and bytes) and the recipe's own
    greedy captions of them (`rnnkit predict ... --beam 1`)."""
    recipe, config, model = runner.load_run(runs("captioning"), registry.load)
    contents = flickr8k_test_images(count)
    paths = []
    for index, content in enumerate(contents):
        paths.append(tmp_path / f"image_{index}.jpg")
        paths[-1].write_bytes(content)
    greedy = config.with_values({"evaluation.beam_width": 1, "evaluation.n_best": 1})
    lines = recipe.predict(model, [str(path) for path in paths], greedy)
    captions = [line.split(": ", 1)[1] for line in lines]
    return config, model, contents, paths, captions


def captioning_step_expectations(model, pixels):
    """Keras' encoder outputs for `pixels`, and the feeds and outputs of one decoder
    step from them (random previous tokens)."""
    from rnnkit.export import Tensor
    from rnnkit.export.steps import decoder_signatures

    size = model.image_size
    encode, _, _, step, step_inputs, _ = decoder_signatures(
        model,
        Tensor("image", "float32", (None, size, size, 3)),
        np.zeros((1, size, size, 3), "float32"),
    )
    memory = {k: np.asarray(v) for k, v in encode({"image": pixels}).items()}
    tokens = np.random.default_rng(0).integers(0, model.vocabulary_size, len(pixels))
    feeds = {**memory, "token": tokens.astype("int32")}
    feeds = {t.name: feeds[t.name] for t in step_inputs}
    return memory, feeds, {k: np.asarray(v) for k, v in step(feeds).items()}


def test_captioning_saved_model_captions_as_greedy_search(runs, tmp_path):
    from rnnkit.export.clients import image_pixels

    _, model, contents, paths, captions = captioning_case(runs, tmp_path)
    pixels = image_pixels([str(path) for path in paths], model.image_size)
    memory, feeds, expected_step = captioning_step_expectations(model, pixels)
    result = export(runs("captioning"), format="saved_model", output=tmp_path / "sm")
    assert result.description["models"]["saved_model"]["serving_default"] == "caption"
    actual, actual_memory, actual_step = run_fresh(
        tmp_path,
        [
            ("saved_model", result.output, "caption", {"image": np.array(contents)}),
            ("saved_model", result.output, "encode", {"image": pixels}),
            ("saved_model", result.output, "decoder_step", feeds),
        ],
    )
    assert [caption.decode() for caption in actual["caption"]] == captions
    assert len({len(caption.split()) for caption in captions}) > 1  # some end early
    assert_close(actual_memory, memory)
    assert_close(actual_step, expected_step)


@pytest.mark.parametrize("format", ["tflite", "onnx"])
def test_captioning_encoder_and_decoder_step(runs, format, tmp_path):
    from rnnkit.export.clients import image_pixels

    _, model, _, paths, captions = captioning_case(runs, tmp_path)
    result = exported(runs("captioning"), format, tmp_path)
    notes = result.description["notes"]
    # The documented client: pixels from the image files.
    pixels = image_pixels([str(path) for path in paths], notes["image_size"])
    memory, feeds, expected_step = captioning_step_expectations(model, pixels)
    actual_memory, actual_step = run_fresh(
        tmp_path,
        [
            (format, artefact_path(result, "encoder"), "", {"image": pixels}),
            (format, artefact_path(result, "decoder_step"), "", feeds),
        ],
    )
    assert_close(actual_memory, memory)
    assert_close(actual_step, expected_step)

    # Greedy search with the two files, as a client runs it, captions as `predict`.
    run_encoder, run_step = encoder_and_step(result, format)
    tokens = greedy_decode(
        run_encoder,
        run_step,
        {"image": pixels},
        start_id=notes["start_id"],
        end_id=notes["end_id"],
        max_steps=notes["max_steps"],
        suppress_ids=notes["suppress_ids"],
    )
    vocabulary = (result.output / "vocabulary.txt").read_text("utf-8").split("\n")
    texts = []
    for row in tokens.tolist():
        row = row[: row.index(notes["end_id"])] if notes["end_id"] in row else row
        texts.append(" ".join(vocabulary[i] for i in row if i != notes["pad_id"]))
    assert texts == captions


def test_captioning_mobilenet_encoder_converts_to_litert_builtins(tmp_path):
    """A MobileNet encoder (depthwise convolutions, ReLU6), frozen as for a run on
    cached features: the exported encoder still takes images and converts with
    builtin ops only (`rnnkit.export.convert.to_tflite` allows no others)."""
    from types import SimpleNamespace

    from rnnkit_recipes.captioning.export import export_plan

    from rnnkit.export import portable
    from rnnkit.export.runtimes import run_tflite

    recipe = registry.load("captioning")
    config = recipe.Config().with_values(
        {
            "model.encoder": "mobilenet",
            "model.encoder_alpha": 0.25,
            "model.encoder_weights": "none",
            "model.encoder_trainable": False,
            "model.image_size": 64,
            "model.units": 8,
            "model.embedding_dim": 8,
            "model.attention_units": 8,
        }
    )
    tokens = ["", "<unk>", "<start>", "<end>", "a", "dog", "runs"]
    model = recipe.build_model(
        config, SimpleNamespace(vocabulary=tokens, encoder_weights=None)
    )
    plan = export_plan(model, config, "tflite")
    assert [a.inputs[0].name for a in plan.artefacts] == ["image", "token"]
    rng = np.random.default_rng(0)
    pixels = rng.uniform(0, 255, (2, 64, 64, 3)).astype("float32")
    encoder, decoder = plan.artefacts
    memory = {k: np.asarray(v) for k, v in encoder.model({"image": pixels}).items()}
    feeds = {**memory, "token": np.array([2, 5], "int32")}
    feeds = {t.name: feeds[t.name] for t in decoder.inputs}
    for artefact, inputs in ((encoder, {"image": pixels}), (decoder, feeds)):
        expected = artefact.model(inputs)
        outputs = run_tflite(portable.convert(artefact, "tflite"), inputs)
        actual = dict(zip(sorted(expected), outputs, strict=True))
        assert_close(actual, {k: np.asarray(v) for k, v in expected.items()})
