"""`rnnkit serve`'s API through an HTTP client: the answers against the recipe's own
predictions, TensorFlow Serving's JSON, the ONNX runtime against Keras, and bad
requests answered with one-line 4xx errors while the server goes on serving."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tests.sentiment_support import imdb_sample

REVIEWS = [*imdb_sample("test", 3).text.str[:600], "Great.", ""]
SENTENCES = [
    "Ein Mann fährt Fahrrad.",
    "Zwei Hunde spielen im Schnee.",
    "Eine Frau sitzt auf einer Bank.",
]


def answer(response, status=200):
    assert response.status_code == status, response.text
    return response.json()


def test_health_and_metadata_name_each_model_with_its_versions(keras_client):
    import keras

    import rnnkit

    assert answer(keras_client.get("/health")) == {
        "status": "ok",
        "models": ["sentiment", "translation"],
    }
    models = answer(keras_client.get("/metadata"))["models"]
    sentiment = models["sentiment"]
    assert sentiment["recipe"] == "sentiment" and sentiment["runtime"] == "keras"
    assert sentiment["versions"] == {
        "rnnkit": rnnkit.__version__,
        "keras": keras.__version__,
    }
    assert sentiment["config"]["model"]["cell_type"] == "gru"
    text = sentiment["signatures"]["classify"]["inputs"]
    assert text == [
        {"name": "text", "dtype": "string", "shape": [None], "doc": "raw texts"}
    ]
    assert models["translation"]["predict_options"] == {
        "beam": "evaluation.beam_width",
        "n-best": "evaluation.n_best",
    }
    status = answer(keras_client.get("/v1/models/translation"))
    assert status["model_version_status"][0]["state"] == "AVAILABLE"


def test_sentiment_records_are_the_recipes_predictions(keras_client, keras_models):
    from rnnkit.models.sequence_classifier import class_names_of, class_probabilities

    model = keras_models[0].model
    expected = class_probabilities(model, REVIEWS, verbose=0)
    names = class_names_of(model)
    records = answer(
        keras_client.post("/models/sentiment/predict", json={"inputs": REVIEWS})
    )["predictions"]
    assert [r["label"] for r in records] == [names[i] for i in expected.argmax(1)]
    got = np.array([[r["probabilities"][n] for n in names] for r in records])
    np.testing.assert_allclose(got, expected, atol=1e-6)
    # The CLI prints the same labels.
    recipe, config = keras_models[0].recipe, keras_models[0].config
    lines = recipe.predict(model, REVIEWS[:3], config)
    assert [line.split()[0] for line in lines] == [r["label"] for r in records[:3]]


def test_a_words_weight_is_the_probability_lost_without_it(keras_client, keras_models):
    from rnnkit.models.sequence_classifier import class_probabilities

    text = "a dull plot but the acting is wonderful and the ending moving"
    record = answer(
        keras_client.post(
            "/models/sentiment/predict",
            json={"inputs": [text], "options": {"explain": True}},
        )
    )["predictions"][0]
    words = text.split()
    assert record["words"] == words and len(record["weights"]) == len(words)
    model = keras_models[0].model
    best = list(record["probabilities"]).index(record["label"])
    for i in (1, 7):  # "dull", "wonderful", recomputed one at a time
        without = " ".join(words[:i] + words[i + 1 :])
        lost = record["probability"] - class_probabilities(model, [without])[0, best]
        assert record["weights"][i] == pytest.approx(lost, abs=1e-5)


def test_tf_serving_rows_and_columns(keras_client, keras_models):
    from rnnkit.models.sequence_classifier import class_probabilities

    expected = class_probabilities(keras_models[0].model, REVIEWS[:2], verbose=0)
    rows = answer(
        keras_client.post(
            "/v1/models/sentiment:predict", json={"instances": REVIEWS[:2]}
        )
    )["predictions"]
    np.testing.assert_allclose([r["probabilities"] for r in rows], expected, atol=1e-6)
    assert all(isinstance(r["label"], str) for r in rows)
    columns = answer(
        keras_client.post(
            "/v1/models/sentiment:predict",
            json={"signature_name": "classify", "inputs": {"text": REVIEWS[:2]}},
        )
    )["outputs"]
    np.testing.assert_allclose(columns["probabilities"], expected, atol=1e-6)


def test_translation_records_carry_the_search_and_its_attention(
    keras_client, keras_models
):
    served = keras_models[1]
    config = served.config.with_values({"evaluation.beam_width": 1})
    expected = served.recipe.predict(served.model, SENTENCES, config)
    records = answer(
        keras_client.post(
            "/models/translation/predict",
            json={"inputs": SENTENCES, "options": {"beam": 1}},
        )
    )["predictions"]
    assert [r["translation"] for r in records] == expected
    for record in records:
        weights = np.array(record["attention"])
        assert weights.shape == (
            len(record["target_tokens"]),
            len(record["source_tokens"]),
        )
        np.testing.assert_allclose(weights.sum(axis=1), 1.0, atol=2e-3)
    ranked = answer(
        keras_client.post(
            "/models/translation/predict",
            json={"inputs": SENTENCES[:1], "options": {"beam": 3, "n-best": 2}},
        )
    )["predictions"][0]["n_best"]
    assert len(ranked) == 2 and ranked[0]["score"] >= ranked[1]["score"]


def test_the_onnx_runtime_answers_as_keras_does(onnx_client, keras_client, onnx_models):
    assert {m.runtime for m in onnx_models} == {"onnx"}
    ask = {"inputs": REVIEWS}
    onnx = answer(onnx_client.post("/models/sentiment/predict", json=ask))
    keras = answer(keras_client.post("/models/sentiment/predict", json=ask))
    for mine, theirs in zip(onnx["predictions"], keras["predictions"], strict=True):
        assert mine["label"] == theirs["label"]
        for name, value in theirs["probabilities"].items():
            assert mine["probabilities"][name] == pytest.approx(value, abs=1e-5)
    greedy = {"inputs": SENTENCES, "options": {"beam": 1}}
    onnx = answer(onnx_client.post("/models/translation/predict", json=greedy))
    keras = answer(keras_client.post("/models/translation/predict", json=greedy))
    assert [r["translation"] for r in onnx["predictions"]] == [
        r["translation"] for r in keras["predictions"]
    ]
    # TF Serving's API on the ONNX classifier's token ids.
    signature = answer(onnx_client.get("/metadata"))["models"]["sentiment"]
    length = signature["signatures"]["model"]["inputs"][0]["shape"][1]
    ids = np.zeros((1, length), int)
    ids[0, :3] = [5, 6, 7]
    rows = answer(
        onnx_client.post(
            "/v1/models/sentiment:predict", json={"instances": ids.tolist()}
        )
    )["predictions"]
    assert len(rows) == 1 and sum(rows[0]) == pytest.approx(1.0, abs=1e-5)


BAD = [
    ("post", "/models/sentiment/predict", b"{not json", 400, "malformed JSON"),
    ("post", "/models/sentiment/predict", b"[1, 2]", 400, "JSON object"),
    ("post", "/models/sentiment/predict", b'{"inputs": [3]}', 400, "not a text"),
    ("post", "/models/sentiment/predict", b'{"texts": ["a"]}', 400, "unknown field"),
    ("post", "/models/sentiment/predict", b'{"inputs": []}', 400, "1 to 64"),
    (
        "post",
        "/models/sentiment/predict",
        b'{"inputs": ["a"], "options": {"beam": 2}}',
        400,
        "unknown option 'beam'",
    ),
    (
        "post",
        "/models/translation/predict",
        b'{"inputs": ["a"], "options": {"beam": 1000}}',
        400,
        "cap 16",
    ),
    ("post", "/models/nope/predict", b'{"inputs": ["a"]}', 404, "no model named"),
    ("post", "/v1/models/nope:predict", b'{"instances": ["a"]}', 404, "no model"),
    ("post", "/predict", b'{"inputs": ["a"]}', 400, "several models"),
    ("get", "/nowhere", None, 404, "no route GET /nowhere"),
    (
        "post",
        "/v1/models/sentiment:predict",
        b'{"instances": [[1, 2]]}',
        400,
        "input 'text' cannot be read as string",
    ),
    (
        "post",
        "/v1/models/sentiment:predict",
        b'{"signature_name": "classify_token_ids", "instances": [[1, 2]]}',
        400,
        "input 'token_ids' has shape (1, 2); the signature takes (any, 100)",
    ),
    (
        "post",
        "/v1/models/sentiment:predict",
        b'{"signature_name": "nope", "instances": ["a"]}',
        400,
        "no signature 'nope'",
    ),
    ("post", "/v1/models/sentiment:predict", b"{}", 400, 'either "instances"'),
]


@pytest.mark.parametrize("method, path, body, status, says", BAD)
def test_a_bad_request_gets_a_one_line_json_error(
    keras_client, method, path, body, status, says
):
    response = getattr(keras_client, method)(
        path, **({"content": body} if body else {})
    )
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert says in error and "\n" not in error and "Traceback" not in error
    assert answer(keras_client.get("/health"))["status"] == "ok"


def test_an_oversized_body_is_refused_before_it_is_read(keras_models):
    from fastapi.testclient import TestClient

    from rnnkit import serving

    app = serving.create_app(keras_models, serving.Limits(max_body_bytes=1000))
    client = TestClient(app, raise_server_exceptions=False)
    body = json.dumps({"inputs": ["word " * 400]})
    response = client.post("/models/sentiment/predict", content=body)
    assert response.status_code == 413
    assert "over 1000 bytes" in response.json()["error"]
    small = client.post("/models/sentiment/predict", json={"inputs": ["fine"]})
    assert small.status_code == 200


def long_csv(values, times) -> str:
    rows = [
        f"england_wales,{t:%Y-%m-%d %H:%M:%S},{v:.6g}"
        for t, v in zip(times, values, strict=True)
    ]
    return "id,time,target\n" + "\n".join(rows) + "\n"


def test_forecasts_and_generated_text_are_the_commands(tmp_path_factory, tmp_path):
    """A forecasting run answers a CSV text with the quantiles `rnnkit predict`
    prints for the same file, and the history the model read; a language model
    with the text `rnnkit predict` samples, whole or streamed piece by piece."""
    from fastapi.testclient import TestClient
    from rnnkit_recipes.forecasting.panel import default_panel

    from rnnkit import serving
    from tests.serving.conftest import run_dir

    runs = [
        f"{n}={run_dir(tmp_path_factory, n)}" for n in ("forecasting", "language_model")
    ]
    models = serving.load_all(runs, "keras")
    client = TestClient(serving.create_app(models), raise_server_exceptions=False)
    panel = default_panel()
    text = long_csv(panel.values[0][-300:], panel.times[0][-300:])
    record = answer(client.post("/models/forecasting/predict", json={"inputs": [text]}))
    (series,) = record["predictions"][0]["series"]
    forecasting = models[0]
    (tmp_path / "series.csv").write_text(text)
    lines = forecasting.recipe.predict(
        forecasting.model, [str(tmp_path / "series.csv")], forecasting.config
    )
    header, *rows = [line.split(",") for line in lines]
    levels = [h.removeprefix("q") for h in header[3:]]
    for i, level in enumerate(levels):
        printed = [float(row[3 + i]) for row in rows]
        np.testing.assert_allclose(
            series["forecast"]["quantiles"][level], printed, rtol=1e-5
        )
    assert series["forecast"]["time"][0].startswith(rows[0][2][:16])
    length = forecasting.config.data.input_length
    np.testing.assert_allclose(series["history"], panel.values[0][-length:], rtol=1e-5)
    # The same series as JSON columns.
    rows = [line.split(",") for line in text.splitlines()[1:]]
    columns = {
        "id": [r[0] for r in rows],
        "time": [r[1] for r in rows],
        "target": [float(r[2]) for r in rows],
    }
    again = answer(client.post("/models/forecasting/predict", json={"inputs": columns}))
    assert again["predictions"] == record["predictions"]
    ragged = {"inputs": [{"time": ["2020-01-01"], "target": [1.0, 2.0]}]}
    refused = client.post("/models/forecasting/predict", json=ragged)
    assert refused.status_code == 400 and "equal length" in refused.json()["error"]
    # The language model: its text as `rnnkit predict` samples it, and streamed.
    language_model = models[1]
    options = {"length": 40, "seed": 3}
    config = language_model.config.with_values(
        {"evaluation.length": 40, "evaluation.seed": 3}
    )
    (expected,) = language_model.recipe.predict(
        language_model.model, ["the time "], config
    )
    ask = {"inputs": ["the time "], "options": options}
    records = answer(client.post("/models/language_model/predict", json=ask))
    assert records["predictions"] == [{"text": expected}]
    streamed = client.post("/models/language_model/stream", json=ask)
    assert streamed.headers["content-type"] == "application/x-ndjson"
    *pieces, done = [json.loads(line) for line in streamed.text.splitlines()]
    assert len(pieces) > 10 and "".join(p["piece"] for p in pieces) == expected
    assert done == {"done": True, "text": expected}
    too_long = {"inputs": ["the"], "options": {"length": 10_000}}
    capped = client.post("/models/language_model/stream", json=too_long)
    assert capped.status_code == 400 and "cap 512" in capped.json()["error"]
    refused = client.post("/models/forecasting/stream", json={"inputs": [text]})
    assert refused.status_code == 400
    assert "does not stream" in refused.json()["error"]


def test_an_uploaded_image_is_captioned_as_the_command_captions_it(
    tmp_path_factory, tmp_path
):
    import base64
    import zipfile

    from fastapi.testclient import TestClient

    from rnnkit import serving
    from tests.recipes.test_captioning import IMAGE_ZIP, real_images, require_data
    from tests.serving.conftest import run_dir

    require_data()
    (captioning,) = serving.load_all(
        [str(run_dir(tmp_path_factory, "captioning"))], "keras"
    )
    client = TestClient(serving.create_app([captioning]), raise_server_exceptions=False)
    (name,) = real_images(1, "Flickr_8k.testImages.txt")
    with zipfile.ZipFile(IMAGE_ZIP) as archive:
        image = archive.read(f"flickr8k_images_256/{name}")
    (tmp_path / name).write_bytes(image)
    (line,) = captioning.recipe.predict(
        captioning.model, [str(tmp_path / name)], captioning.config
    )
    files = {"image": (name, image, "image/jpeg")}
    (record,) = answer(client.post("/predict", files=files))["predictions"]
    assert f"{tmp_path / name}: {record['caption']}" == line
    rows, columns = record["grid"]
    assert len(record["attention"]) == len(record["words"])
    assert all(len(w) == rows * columns for w in record["attention"])
    np.testing.assert_allclose(np.sum(record["attention"], axis=1), 1.0, atol=2e-3)
    b64 = {"inputs": [{"b64": base64.b64encode(image).decode()}]}
    assert answer(client.post("/predict", json=b64))["predictions"] == [record]
    text = {"image": ("notes.txt", b"not an image at all", "text/plain")}
    refused = client.post("/predict", files=text)
    assert refused.status_code == 400
    assert "is not an image that can be read" in refused.json()["error"]
    assert client.get("/health").status_code == 200


@pytest.mark.parametrize("runtime", ["saved_model", "litert"])
def test_the_saved_model_and_litert_runtimes_answer_as_keras_does(
    runtime, smoke_runs, keras_client, tmp_path
):
    """The sentiment run from its SavedModel (raw texts in its `classify`
    signature) and its LiteRT file (token ids), exported into a copy of the run."""
    import shutil

    from fastapi.testclient import TestClient

    from rnnkit import serving

    copy = tmp_path / "sentiment"
    shutil.copytree(smoke_runs["sentiment"], copy)
    (served,) = serving.load_all([str(copy)], runtime)
    assert (copy / "export" / ("tflite" if runtime == "litert" else runtime)).is_dir()
    client = TestClient(serving.create_app([served]), raise_server_exceptions=False)
    ask = {"inputs": REVIEWS}
    mine = answer(client.post("/predict", json=ask))["predictions"]
    theirs = answer(keras_client.post("/models/sentiment/predict", json=ask))
    for record, expected in zip(mine, theirs["predictions"], strict=True):
        assert record["label"] == expected["label"]
        for name, value in expected["probabilities"].items():
            assert record["probabilities"][name] == pytest.approx(value, abs=1e-5)
    signature = answer(client.get("/metadata"))["models"]["sentiment"]
    if runtime == "saved_model":
        assert signature["serving_default"] == "classify"
        rows = answer(
            client.post("/v1/models/sentiment:predict", json={"instances": REVIEWS[:2]})
        )["predictions"]
        assert [r["label"] for r in rows] == [r["label"] for r in mine[:2]]
    else:
        assert list(signature["signatures"]) == ["model"]
