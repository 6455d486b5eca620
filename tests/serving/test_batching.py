"""Request batching (rnnkit.serving.batching): concurrent requests share calls,
each gets its own records, options never mix, a bad input fails only its request."""

from __future__ import annotations

import threading
import time

import pytest

from rnnkit.serving.batching import Batcher


class Model:
    """A predict that takes a while and records every call it gets."""

    def __init__(self):
        self.calls = []
        self.lock = threading.Lock()

    def __call__(self, inputs, config, keywords):
        with self.lock:
            self.calls.append((list(inputs), config))
        time.sleep(0.2)
        if "bad" in inputs:
            raise ValueError("a bad input")
        return [{"input": x, "config": config, **keywords} for x in inputs]


def concurrently(batcher, requests):
    """Each (inputs, config, options) at once from its own thread; the outcomes."""
    outcomes = [None] * len(requests)
    start = threading.Barrier(len(requests))

    def ask(index, inputs, config, options):
        start.wait()
        time.sleep(0.01 * index)  # the first leads, the others queue behind it
        try:
            outcomes[index] = batcher(inputs, config, {}, options)
        except ValueError as error:
            outcomes[index] = error

    threads = [
        threading.Thread(target=ask, args=(i, *request))
        for i, request in enumerate(requests)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    return outcomes


def test_waiting_requests_share_one_call_and_get_their_own_records():
    model = Model()
    requests = [([f"r{i}a", f"r{i}b"], "same", {"beam": 1}) for i in range(8)]
    outcomes = concurrently(Batcher(model, max_inputs=64), requests)
    for (inputs, _, _), records in zip(requests, outcomes, strict=True):
        assert [r["input"] for r in records] == inputs
    # The first request ran alone; the seven that queued behind it ran together.
    assert [len(inputs) for inputs, _ in model.calls] == [2, 14]


def test_a_call_holds_at_most_max_inputs_and_options_never_mix():
    model = Model()
    requests = [(["a"], "x", {"beam": 1})] + [
        ([f"b{i}", f"c{i}"], f"beam{i % 2}", {"beam": i % 2 + 2}) for i in range(6)
    ]
    outcomes = concurrently(Batcher(model, max_inputs=4), requests)
    for (inputs, config, _), records in zip(requests, outcomes, strict=True):
        assert [r["input"] for r in records] == inputs
        assert {r["config"] for r in records} == {config}
    assert all(len(inputs) <= 4 for inputs, _ in model.calls)
    assert len(model.calls) < len(requests)


def test_a_bad_input_fails_its_own_request_only():
    model = Model()
    requests = [(["first"], "c", {})] + [
        (["bad"] if i == 2 else [f"ok{i}"], "c", {}) for i in range(5)
    ]
    outcomes = concurrently(Batcher(model, max_inputs=64), requests)
    assert isinstance(outcomes[3], ValueError)
    for index, outcome in enumerate(outcomes):
        if index != 3:
            assert [r["input"] for r in outcome] == requests[index][0]


@pytest.mark.parametrize("batching", [True, False])
def test_the_api_batches_without_changing_an_answer(keras_models, batching):
    """Concurrent /predict requests through the app: each answer is the one the
    request gets alone, batched or not."""
    from fastapi.testclient import TestClient

    from rnnkit import serving

    limits = serving.Limits(batching=batching)
    client = TestClient(serving.create_app(keras_models, limits))
    texts = ["A wonderful film.", "Dull and far too long.", "I laughed.", "Awful."]
    alone = [
        client.post("/models/sentiment/predict", json={"inputs": [t]}).json()
        for t in texts
    ]
    answers = [None] * len(texts)

    def ask(index):
        body = {"inputs": [texts[index]]}
        answers[index] = client.post("/models/sentiment/predict", json=body).json()

    threads = [threading.Thread(target=ask, args=(i,)) for i in range(len(texts))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    for mine, single in zip(answers, alone, strict=True):
        (record,) = mine["predictions"]
        (expected,) = single["predictions"]
        assert record["label"] == expected["label"]
        for name, value in expected["probabilities"].items():
            assert record["probabilities"][name] == pytest.approx(value, abs=1e-5)


def test_a_model_without_signatures_answers_predict_and_says_so_on_v1():
    """A recipe that declares no export still answers /predict; TF Serving's route
    says why it cannot."""
    from pathlib import Path

    from fastapi.testclient import TestClient

    from rnnkit import serving
    from rnnkit.recipe import Recipe

    class Echo(Recipe):
        name, summary = "echo", "says back what it is given"

        def predict_records(self, model, inputs, config, calls=None):
            return [{"echo": value} for value in inputs]

    served = serving.ServedModel(
        "echo", Path("echo"), "keras", Echo(), None, None, {}, None, None
    )
    client = TestClient(serving.create_app([served]))
    answer = client.post("/predict", json={"inputs": ["a", "b"]})
    assert answer.json() == {
        "model": "echo",
        "predictions": [{"echo": "a"}, {"echo": "b"}],
    }
    refused = client.post("/v1/models/echo:predict", json={"instances": ["a"]})
    assert refused.status_code == 400
    assert "has no signatures" in refused.json()["error"]
    streamed = client.post("/models/echo/stream", json={"inputs": ["a"]})
    assert streamed.status_code == 400 and "does not stream" in streamed.json()["error"]
