"""rnnkit's layers convert to LiteRT with builtin ops only and to ONNX, and the
converted models give the Keras model's outputs (rnnkit/export/convert.py).

Each configuration is a tiny Keras model on a real slice of data: IMDB reviews as
token ids, padded on the right and on the left (masked batches), and MSFT's daily
price changes. Every model is converted to both formats once per test session (one
worker converts, the others read its files: tests/shared_once.py);
the files are then run in this process through `run_tflite`/`run_onnx`, and in one
fresh process per format that imports nothing but the runtime and numpy, and
compared with Keras' `predict` within 1e-5, for a second batch of another size and
length too (the batch and time dimensions stay dynamic).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("ai_edge_litert")
pytest.importorskip("onnxruntime")
pytest.importorskip("tf2onnx")

import keras  # noqa: E402

import rnnkit.layers as layers  # noqa: E402
from rnnkit.export import convert  # noqa: E402
from rnnkit.models.sequence_classifier import MaskedGlobalMaxPooling1D  # noqa: E402
from tests.sentiment_support import imdb_sample  # noqa: E402
from tests.shared_once import made_once  # noqa: E402
from tests.stock_support import msft_frame  # noqa: E402

TOLERANCE = 1e-5
VOCABULARY_SIZE = 40
EMBEDDING = 6
FORMATS = ("tflite", "onnx")


def review_tokens() -> tuple[np.ndarray, np.ndarray]:
    """Two masked batches of real IMDB reviews as token ids (0: padding): rows
    padded on the right, on the left, full; the second batch shorter and smaller,
    with a row that is all padding."""
    texts = imdb_sample("test", 2)["text"]
    words = [re.findall(r"[a-z']+", text.lower()) for text in texts]
    counts: dict[str, int] = {}
    for word in (w for review in words for w in review):
        counts[word] = counts.get(word, 0) + 1
    common = sorted(counts, key=lambda w: (-counts[w], w))[: VOCABULARY_SIZE - 2]
    index = {word: i + 2 for i, word in enumerate(common)}  # 1: out of vocabulary
    ids = [[index.get(word, 1) for word in review] for review in words]
    steps = 9
    batch = np.zeros((4, steps), "int32")
    batch[0, :7] = ids[0][:7]  # right-padded
    batch[1, :4] = ids[1][:4]
    batch[2] = ids[2][:steps]  # full
    batch[3, -2:] = ids[3][:2]  # left-padded
    second = np.zeros((3, 5), "int32")
    second[0] = ids[0][10:15]
    second[1, 2:] = ids[1][10:13]  # left-padded; row 2 all padding
    return batch, second


def price_windows() -> tuple[np.ndarray, np.ndarray]:
    """Windows of MSFT's daily log changes of open, high, low and close, scaled:
    (4, 10, 4) and (2, 7, 4)."""
    prices = msft_frame()[["Open", "High", "Low", "Close"]].to_numpy("float64")
    changes = np.diff(np.log(prices), axis=0)[:40]
    changes = (changes - changes.mean(0)) / changes.std(0)
    first = changes.reshape(4, 10, 4).astype("float32")
    return first, changes[:14].reshape(2, 7, 4).astype("float32")


def token_model(body, name):
    tokens = keras.Input((None,), dtype="int32", name="tokens")
    embedded = keras.layers.Embedding(VOCABULARY_SIZE, EMBEDDING, mask_zero=True)(
        tokens
    )
    return keras.Model(tokens, body(embedded), name=name)


def bahdanau_model():
    """A decoder's queries attending over a masked GRU encoding of reviews."""
    tokens = keras.Input((None,), dtype="int32", name="tokens")
    queries = keras.Input((None, 4), name="queries")
    embedded = keras.layers.Embedding(VOCABULARY_SIZE, EMBEDDING, mask_zero=True)(
        tokens
    )
    encoded = layers.GRU(5, return_sequences=True)(embedded)
    padding = keras.ops.not_equal(tokens, 0)
    context, weights = layers.BahdanauAttention(7)(
        queries, encoded, value_mask=padding, return_attention_scores=True
    )
    return keras.Model([tokens, queries], [context, weights], name="bahdanau")


def self_attention_model():
    """Causal self-attention over masked embedded reviews: `MultiHeadAttention` and
    `DotProductAttention` side by side, one output each (one model to convert)."""
    tokens = keras.Input((None,), dtype="int32", name="tokens")
    embedded = keras.layers.Embedding(VOCABULARY_SIZE, 8, mask_zero=True)(tokens)
    padding = keras.ops.not_equal(tokens, 0)
    outputs = [
        attention(embedded, embedded, value_mask=padding, use_causal_mask=True)
        for attention in (layers.MultiHeadAttention(2, 4), layers.DotProductAttention())
    ]
    return keras.Model(tokens, outputs, name="self_attention")


def normalized_lstm_model():
    """An LSTM over windows scaled by an adapted `Normalization`, whose statistics
    are non-trainable state (tensors captured by the traced function, not weights
    the converters fold by themselves)."""
    normalization = keras.layers.Normalization()
    normalization.adapt(price_windows()[0] * 40.0 + 3.0)  # its own mean and scale
    return keras.Sequential(
        [keras.Input((None, 4)), normalization, layers.LSTM(5), keras.layers.Dense(1)],
        name="normalized_lstm",
    )


def transformer_model():
    tokens = keras.Input((None,), dtype="int32", name="tokens")
    target = keras.Input((None,), dtype="int32", name="target")
    embed = keras.layers.Embedding(VOCABULARY_SIZE, 8, mask_zero=True)
    encoded = layers.TransformerEncoderBlock(2, 16)(embed(tokens))
    decoded = layers.TransformerDecoderBlock(2, 16)(embed(target), encoded)
    return keras.Model([tokens, target], decoded, name="transformer")


def concat_pooling(embedded):
    """The sentiment classifier's `pooling="concat"` over a bidirectional GRU."""
    outputs, forward, backward = keras.layers.Bidirectional(
        layers.GRU(3, return_sequences=True, return_state=True)
    )(embedded)
    return keras.layers.Concatenate()(
        [
            forward,
            backward,
            MaskedGlobalMaxPooling1D()(outputs),
            keras.layers.GlobalAveragePooling1D()(outputs),
        ]
    )


# name -> (model builder, input kind)
CONFIGS = {
    "simple_rnn_sequences": (
        lambda: token_model(
            lambda x: layers.SimpleRNN(4, return_sequences=True)(x), "simple_rnn"
        ),
        "tokens",
    ),
    # An LSTM over price windows (behind an adapted Normalization: the LSTM alone was
    # a configuration of its own, converted twice more for what this one checks).
    "normalized_lstm_prices": (normalized_lstm_model, "prices"),
    "lstm_masked_prices": (
        lambda: keras.Sequential(
            [
                keras.Input((None, 4)),
                keras.layers.Masking(0.0),
                layers.LSTM(5, return_sequences=True, zero_output_for_mask=True),
            ],
            name="lstm_masked",
        ),
        "padded_prices",
    ),
    "gru_backwards_with_state": (
        lambda: token_model(
            lambda x: layers.GRU(
                4, go_backwards=True, return_sequences=True, return_state=True
            )(x),
            "gru_backwards",
        ),
        "tokens",
    ),
    "bidirectional_stacked": (
        lambda: token_model(
            lambda x: keras.layers.Bidirectional(layers.GRU(3, reset_after=False))(
                keras.layers.Bidirectional(
                    layers.LSTM(
                        5, return_sequences=True, dropout=0.2, recurrent_dropout=0.1
                    )
                )(x)
            ),
            "bidirectional",
        ),
        "tokens",
    ),
    # The sentiment recipe's "concat" pooling over masked steps: each direction's
    # final state, the maximum (its -inf filler gave NaN in ONNX: tf2onnx writes
    # `where` as arithmetic, and 0 * -inf is NaN) and the mean.
    "concat_pooling_over_masked_gru": (
        lambda: token_model(concat_pooling, "concat_pooling"),
        "tokens",
    ),
    "bahdanau_attention": (bahdanau_model, "tokens_and_queries"),
    "self_attention": (self_attention_model, "tokens"),
    "transformer_blocks": (transformer_model, "tokens_and_target"),
}


def inputs_of(kind: str) -> list[tuple[list[np.ndarray]]]:
    """Two input batches (each a list, one array per model input) of `kind`."""
    tokens = review_tokens()
    prices = price_windows()
    if kind == "tokens":
        return [[batch] for batch in tokens]
    if kind == "prices":
        return [[batch] for batch in prices]
    if kind == "padded_prices":  # zeros after each row's length: masked steps
        padded = []
        for batch in prices:
            batch = batch.copy()
            for row in range(len(batch)):
                batch[row, batch.shape[1] - row :] = 0.0
            padded.append([batch])
        return padded
    if kind == "tokens_and_queries":  # queries (batch, Tq, 4) beside the tokens
        return [
            [tokens[0], np.tanh(prices[0][:, :5])],
            [tokens[1], np.tanh(prices[0][:3, :2])],
        ]
    if kind == "tokens_and_target":
        return [[tokens[0], tokens[0][:, ::-1].copy()], [tokens[1], tokens[1][:, :4]]]
    raise AssertionError(kind)


def as_list(outputs) -> list[np.ndarray]:
    if isinstance(outputs, (list, tuple)):
        return [np.asarray(output) for output in outputs]
    return [np.asarray(outputs)]


def _convert_every_configuration(folder: Path) -> None:
    """<name>.tflite, <name>.onnx, and per batch <name>.<n>.inputs.npz and the Keras
    outputs <name>.<n>.expected.npz, for every configuration."""
    for name, (build, kind) in CONFIGS.items():
        keras.utils.set_random_seed(0)
        model = build()
        names = [tensor.name for tensor in model.inputs]
        batches = [dict(zip(names, batch, strict=True)) for batch in inputs_of(kind)]
        (folder / f"{name}.tflite").write_bytes(convert.to_tflite(model))
        (folder / f"{name}.onnx").write_bytes(convert.to_onnx(model))
        for number, batch in enumerate(batches):
            expected = as_list(
                model.predict(
                    list(batch.values()) if len(batch) > 1 else batch[names[0]],
                    verbose=0,
                    batch_size=len(batch[names[0]]),
                )
            )
            np.savez(folder / f"{name}.{number}.inputs.npz", **batch)
            np.savez(folder / f"{name}.{number}.expected.npz", *expected)


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """Every configuration converted: the folder with the files of
    `_convert_every_configuration` (made once per session, whichever worker asks
    first) and {name: (input batches, Keras outputs per batch)} read from it."""
    folder = made_once(tmp_path_factory, "layers-export", _convert_every_configuration)
    cases = {}
    for name in CONFIGS:
        batches, expected = [], []
        for number in range(len(list(folder.glob(f"{name}.*.inputs.npz")))):
            with np.load(folder / f"{name}.{number}.inputs.npz") as saved:
                batches.append({key: saved[key] for key in saved.files})
            with np.load(folder / f"{name}.{number}.expected.npz") as saved:
                expected.append([saved[f"arr_{i}"] for i in range(len(saved.files))])
        cases[name] = (batches, expected)
    return folder, cases


def assert_outputs_match(actual, expected, what):
    assert len(actual) == len(expected), what
    for position, (got, want) in enumerate(zip(actual, expected, strict=True)):
        assert got.shape == want.shape, f"{what}, output {position}"
        np.testing.assert_allclose(
            got, want, rtol=0, atol=TOLERANCE, err_msg=f"{what}, output {position}"
        )


@pytest.mark.parametrize("name", CONFIGS)
@pytest.mark.parametrize("fmt", FORMATS)
def test_converted_layers_give_the_keras_outputs(exported, name, fmt):
    folder, cases = exported
    run = convert.run_tflite if fmt == "tflite" else convert.run_onnx
    batches, expected = cases[name]
    for number, (batch, want) in enumerate(zip(batches, expected, strict=True)):
        actual = run(folder / f"{name}.{fmt}", batch)
        assert_outputs_match(actual, want, f"{name}.{fmt}, batch {number}")


# Runs each file with its runtime alone (no TensorFlow, no rnnkit): the inputs by
# name, the outputs in the converters' order (LiteRT: output_0, output_1, ...).
FRESH_PROCESS = textwrap.dedent(
    """
    import json, re, sys
    from pathlib import Path
    import numpy as np

    folder, fmt, out = Path(sys.argv[1]), sys.argv[2], Path(sys.argv[3])
    done = []
    for model in sorted(folder.glob("*." + fmt)):
        for inputs_file in sorted(folder.glob(model.stem + ".*.inputs.npz")):
            with np.load(inputs_file) as saved:
                inputs = {name: saved[name] for name in saved.files}
            if fmt == "tflite":
                from ai_edge_litert.interpreter import Interpreter

                runner = Interpreter(model_path=str(model)).get_signature_runner()
                results = runner(**inputs)
                number = lambda n: int(re.fullmatch(r"output_(\\d+)", n).group(1))
                outputs = [results[n] for n in sorted(results, key=number)]
            else:
                import onnxruntime

                session = onnxruntime.InferenceSession(
                    str(model), providers=["CPUExecutionProvider"]
                )
                outputs = session.run(None, inputs)
            stem = inputs_file.name[: -len(".inputs.npz")]
            np.savez(out / f"{stem}.{fmt}.outputs.npz", *outputs)
            done.append(stem)
    heavy = ("tensorflow", "keras", "rnnkit")
    loaded = sorted(m for m in sys.modules if m.split(".")[0] in heavy)
    print(json.dumps({"done": done, "loaded": loaded}))
    """
)


@pytest.fixture(scope="module")
def fresh_process_outputs(exported, tmp_path_factory):
    """({fmt: what the fresh process reports}, the folder of their outputs), one
    process per format."""
    folder, _ = exported
    out = tmp_path_factory.mktemp("fresh_outputs")
    reports = {}
    for fmt in FORMATS:
        completed = subprocess.run(
            [sys.executable, "-c", FRESH_PROCESS, str(folder), fmt, str(out)],
            capture_output=True,
            text=True,
            env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"},
            timeout=300,
        )
        assert completed.returncode == 0, completed.stderr[-3000:]
        reports[fmt] = json.loads(completed.stdout.strip().splitlines()[-1])
    return reports, out


@pytest.mark.parametrize("fmt", FORMATS)
def test_converted_files_run_alone_in_a_fresh_process(
    exported, fresh_process_outputs, fmt
):
    _, cases = exported
    reports, out = fresh_process_outputs
    report = reports[fmt]
    assert report["loaded"] == [], "the runtime alone must run the file"
    assert len(report["done"]) == sum(len(b) for b, _ in cases.values())
    for name, (_, expected) in cases.items():
        for number, want in enumerate(expected):
            with np.load(out / f"{name}.{number}.{fmt}.outputs.npz") as saved:
                actual = [saved[f"arr_{i}"] for i in range(len(saved.files))]
            assert_outputs_match(actual, want, f"{name}.{fmt}, batch {number}")


def test_keras_lstm_needs_select_ops_where_rnnkit_lstm_converts():
    """The docs' example: Keras' own LSTM does not convert with builtin ops, the
    same weights in rnnkit's LSTM do, and give Keras' outputs."""
    windows, _ = price_windows()
    keras.utils.set_random_seed(0)
    builtin = keras.Sequential([keras.Input((None, 4)), keras.layers.LSTM(5)])
    ours = keras.Sequential([keras.Input((None, 4)), layers.LSTM(5)])
    ours.set_weights(builtin.get_weights())
    try:
        convert.to_tflite(builtin)
    except convert.ExportError as error:
        message = str(error)
    else:
        pytest.skip("this Keras converts its own LSTM with builtin ops now")
    assert "\n" not in message
    assert "tf.TensorListReserve" in message
    assert "keras.layers.LSTM" in message and "rnnkit.layers" in message
    actual = convert.run_tflite(convert.to_tflite(ours), windows)  # one input
    assert_outputs_match(actual, [builtin.predict(windows, verbose=0)], "LSTM")


@pytest.mark.parametrize("quantize", ["dynamic", "float16"])
def test_quantized_models_are_smaller_and_close(quantize):
    windows, _ = price_windows()
    keras.utils.set_random_seed(0)
    # Wide enough that the converter quantizes its weights (it leaves small ones).
    model = keras.Sequential(
        [keras.Input((None, 4)), layers.LSTM(64), keras.layers.Dense(1)]
    )
    expected = model.predict(windows, verbose=0)
    full = convert.to_tflite(model)
    smaller = convert.to_tflite(model, quantize=quantize)
    assert len(smaller) < 0.7 * len(full)
    (actual,) = convert.run_tflite(smaller, windows)
    scale = np.abs(expected).max()
    tolerance = 0.05 if quantize == "dynamic" else 5e-3
    np.testing.assert_allclose(actual, expected, atol=tolerance * scale)
    # Not equal to the float model: the weights really changed.
    assert np.abs(actual - expected).max() > 0


def test_a_function_converts_with_its_signature():
    """A tf.function (a decoder's one step) converts as it is traced for export."""
    import tensorflow as tf

    windows, _ = price_windows()
    keras.utils.set_random_seed(0)
    cell = layers.GRUCell(6)
    cell.build((None, 4))

    @tf.function(
        input_signature=[
            tf.TensorSpec((None, 4), tf.float32, name="x"),
            tf.TensorSpec((None, 6), tf.float32, name="state"),
        ]
    )
    def step(x, state):
        output, new_state = cell(x, [state])
        return {"output": output, "next_state": new_state[0]}

    state = np.tanh(windows[:, 0, :1] * np.ones((1, 6), "float32"))
    expected = step(windows[:, 0], state)
    for fmt in FORMATS:
        data = getattr(convert, f"to_{fmt}")(step)
        inputs = {"x": windows[:, 0], "state": state}
        actual = getattr(convert, f"run_{fmt}")(data, inputs)
        assert_outputs_match(
            actual, [expected["next_state"].numpy(), expected["output"].numpy()], fmt
        )

    @tf.function(input_signature=step.input_signature)
    def same_names(x, state):
        return {"output": x, "state": state + 1.0}

    with pytest.raises(convert.ExportError, match="output named like an input"):
        convert.to_onnx(same_names)


def test_bad_arguments_are_one_line_errors():
    model = keras.Sequential([keras.Input((None, 4)), layers.SimpleRNN(2)])
    with pytest.raises(convert.ExportError, match="quantize='int4'"):
        convert.to_tflite(model, quantize="int4")

    class Subclassed(keras.Model):
        def call(self, inputs):
            return inputs * 2.0

    with pytest.raises(convert.ExportError, match="input_signature"):
        convert.to_onnx(Subclassed())
    data = convert.to_onnx(model)
    with pytest.raises(convert.ExportError, match="takes 1 input"):
        convert.run_onnx(data, [np.zeros((1, 3, 4)), np.zeros((1, 3, 4))])
    with pytest.raises(convert.ExportError, match="inputs are"):
        convert.run_onnx(data, {"wrong": np.zeros((1, 3, 4))})
    first = keras.Input((None, 4), name="first")
    second = keras.Input((None, 4), name="second")
    two = keras.Model([first, second], layers.GRU(2)(first + second))
    with pytest.raises(convert.ExportError, match=r"2 inputs \(first, second\)"):
        convert.run_tflite(convert.to_tflite(two), [np.zeros((1, 3, 4))] * 2)


def test_export_mode_leaves_the_layers_as_they_were():
    """Outside `export_mode` the layers trace their usual paths."""
    # (The plain loop: XLA's depends on whether the batch size is known when traced.)
    model = keras.Sequential(
        [keras.Input((None, 4)), layers.LSTM(3, jit_compile=False)]
    )
    windows, _ = price_windows()
    model.predict(windows, verbose=0)
    usual = model.layers[0].execution_path
    convert.to_tflite(model)
    assert model.layers[0].execution_path == "generic loop, for export (builtin ops)"
    model.predict(windows[:3], verbose=0)  # a new batch size: traced again
    assert model.layers[0].execution_path == usual
    assert "export" not in usual


def test_files_are_written_by_the_caller(tmp_path):
    """The converters return bytes; the runtimes read them from memory or a path."""
    model = keras.Sequential([keras.Input((None, 4)), layers.GRU(2)])
    windows, _ = price_windows()
    path = Path(tmp_path / "gru.tflite")
    path.write_bytes(convert.to_tflite(model))
    from_path = convert.run_tflite(path, windows)
    from_memory = convert.run_tflite(path.read_bytes(), windows)
    np.testing.assert_array_equal(from_path[0], from_memory[0])


@pytest.mark.parametrize("fmt", FORMATS)
def test_models_a_file_cannot_reproduce_are_refused(fmt):
    to_format = getattr(convert, f"to_{fmt}")
    stateful = keras.Sequential(
        [keras.Input((5, 4), batch_size=2), layers.GRU(3, stateful=True)]
    )
    with pytest.raises(convert.ExportError, match="is stateful.*return_state=True"):
        to_format(stateful)
    mixed = keras.Sequential(
        [keras.Input((None, 4)), layers.LSTM(3, dtype="mixed_bfloat16")]
    )
    with pytest.raises(convert.ExportError, match="computes in bfloat16"):
        to_format(mixed)


def test_a_keras_rnn_of_a_cell_is_pointed_to_rnnkit_layers():
    inputs = keras.Input((None, 4))
    model = keras.Model(inputs, keras.layers.RNN(layers.LSTMCell(3))(inputs))
    with pytest.raises(convert.ExportError) as error:
        convert.to_tflite(model)
    assert "rnnkit.layers.SimpleRNN, LSTM or GRU for keras.layers.RNN" in str(
        error.value
    )
