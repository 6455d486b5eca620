"""Request batching for `/predict`: the requests that arrive while a model is busy
run as one call of the recipe's `predict_records` when it is free.

No thread of its own and no waiting window: a request that finds the model free
runs at once with whatever is queued with the same options (its own inputs first, up
to `max_inputs`); the others wait for the call that takes them, or for the model to
be free to lead the next one. At one request at a time nothing changes; under load
one model call serves many requests, which pays where a call's fixed cost (Keras'
`predict`, a search's set-up) is large beside its per-input cost (figures in
docs/performance.md, "Serving"). A batch that fails is run again request by request,
so that a bad input fails its own request only.
"""

import dataclasses
import json
import threading
from collections.abc import Callable
from typing import Any


@dataclasses.dataclass(eq=False)
class _Request:
    inputs: list
    key: str
    config: Any
    keywords: dict
    done: bool = False
    records: list | None = None
    error: BaseException | None = None


class Batcher:
    """Runs `predict(inputs, config, keywords) -> records` (one record per input)
    for concurrent requests, several at a time (see the module docstring)."""

    def __init__(self, predict: Callable[[list, Any, dict], list], max_inputs: int):
        self.predict = predict
        self.max_inputs = max_inputs
        self._queue: list[_Request] = []
        self._busy = False
        self._changed = threading.Condition()

    def __call__(self, inputs: list, config: Any, keywords: dict, options: dict):
        key = json.dumps(options, sort_keys=True, default=str)
        request = _Request(list(inputs), key, config, keywords)
        with self._changed:
            self._queue.append(request)
            while self._busy and not request.done:
                self._changed.wait()
            if request.done:
                return _outcome(request)
            self._busy = True
            batch = self._take(request)
        try:
            self._run(batch)
        finally:
            with self._changed:
                self._busy = False
                self._changed.notify_all()
        return _outcome(request)

    def _take(self, leader: _Request) -> list[_Request]:
        """The leader and the queued requests with its options, within the cap."""
        batch, size = [], 0
        for request in [leader, *(r for r in self._queue if r is not leader)]:
            if request.key != leader.key:
                continue
            if batch and size + len(request.inputs) > self.max_inputs:
                break
            batch.append(request)
            size += len(request.inputs)
        for request in batch:
            self._queue.remove(request)
        return batch

    def _run(self, batch: list[_Request]) -> None:
        first = batch[0]
        try:
            if len(batch) == 1:
                first.records = self.predict(first.inputs, first.config, first.keywords)
            else:
                inputs = [x for request in batch for x in request.inputs]
                records = self.predict(inputs, first.config, first.keywords)
                start = 0
                for request in batch:
                    request.records = records[start : start + len(request.inputs)]
                    start += len(request.inputs)
        except Exception as error:
            if len(batch) == 1:
                first.error = error
            else:  # find whose input it was: each request alone
                for request in batch:
                    self._run([request])
        finally:
            for request in batch:
                request.done = True


def _outcome(request: _Request) -> list:
    if request.error is not None:
        raise request.error
    return request.records
