"""The ASGI application of `rnnkit serve` (FastAPI): the routes, the request limits
and the JSON errors. See `rnnkit.serving` for what each route takes and returns."""

# No `from __future__ import annotations`: FastAPI reads the routes' annotations
# (`request: Request`, imported inside `create_app`) as objects.
import dataclasses
import itertools
import json
import logging
from importlib import resources
from typing import Any

import numpy as np

from rnnkit.errors import RnnkitError
from rnnkit.serving.runtimes import ServedModel, Signature

log = logging.getLogger("rnnkit")


@dataclasses.dataclass(frozen=True)
class Limits:
    """What one request may ask: `max_body_bytes` of body, `max_instances` inputs,
    `max_beam` beams or n-best translations, `max_new_tokens` generated tokens; and
    whether concurrent `/predict` requests are batched (`rnnkit.serving.batching`,
    at most `max_instances` inputs a call)."""

    max_body_bytes: int = 1 << 20
    max_instances: int = 64
    max_beam: int = 16
    max_new_tokens: int = 512
    batching: bool = True  # /predict requests of one model share calls under load

    def option_caps(self) -> dict[str, int]:
        return {
            "evaluation.beam_width": self.max_beam,
            "evaluation.n_best": self.max_beam,
            "evaluation.length": self.max_new_tokens,
        }


class RequestError(Exception):
    """A request rnnkit cannot answer: its HTTP status and one line saying why."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


def create_app(models: list[ServedModel], limits: Limits | None = None):
    """The FastAPI application serving `models` (names must be distinct)."""
    import rnnkit
    from rnnkit._optional import optional_import

    fastapi = optional_import("fastapi")
    FastAPI, Request = fastapi.FastAPI, fastapi.Request
    invalid = optional_import("fastapi.exceptions").RequestValidationError
    responses = optional_import("fastapi.responses")
    HTMLResponse, JSONResponse = responses.HTMLResponse, responses.JSONResponse
    StreamingResponse = responses.StreamingResponse
    HTTPException = optional_import("starlette.exceptions").HTTPException

    limits = limits or Limits()
    by_name = {m.name: m for m in models}
    if len(by_name) != len(models):
        raise RnnkitError("two served models have the same name; name them NAME=RUN")
    app = FastAPI(title="rnnkit serve", version=rnnkit.__version__, docs_url=None)
    app.state.models = by_name
    app.state.limits = limits
    batchers = {name: _batcher(model, limits) for name, model in by_name.items()}

    def error(status: int, message: str) -> JSONResponse:
        return JSONResponse({"error": message}, status_code=status)

    @app.exception_handler(RequestError)
    async def _request_error(request: Request, exc: RequestError):
        return error(exc.status, str(exc))

    @app.exception_handler(HTTPException)
    async def _http_error(request: Request, exc: HTTPException):
        message = exc.detail if exc.status_code != 404 else _not_found(request)
        return error(exc.status_code, str(message))

    @app.exception_handler(invalid)
    async def _validation_error(request: Request, exc: invalid):
        return error(400, f"bad request: {exc.errors()[0].get('msg', exc)}")

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception):
        log.exception("rnnkit serve: %s %s failed", request.method, request.url.path)
        return error(
            500, f"internal error ({type(exc).__name__}); the server log has the trace"
        )

    def served(name: str) -> ServedModel:
        if name not in by_name:
            raise RequestError(
                404, f"no model named {name!r}; this server has: {', '.join(by_name)}"
            )
        return by_name[name]

    async def body_of(request: Request) -> dict[str, Any]:
        declared = request.headers.get("content-length")
        if declared and declared.isdigit() and int(declared) > limits.max_body_bytes:
            raise _too_large(limits)
        if request.headers.get("content-type", "").startswith("multipart/form-data"):
            return await upload_of(request, declared)
        chunks, size = [], 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > limits.max_body_bytes:
                raise _too_large(limits)
            chunks.append(chunk)
        try:
            body = json.loads(b"".join(chunks) or b"null")
        except (ValueError, UnicodeDecodeError) as exc:
            raise RequestError(400, f"malformed JSON body: {exc}") from None
        if not isinstance(body, dict):
            raise RequestError(400, "the body must be a JSON object")
        return body

    async def upload_of(request: Request, declared: str | None) -> dict[str, Any]:
        """A multipart upload: its files are the inputs (bytes), its `options`
        field the options (JSON)."""
        if not declared:
            raise RequestError(411, "an upload needs a Content-Length header")
        try:
            form = await request.form(max_files=limits.max_instances, max_fields=4)
        except Exception as exc:
            raise RequestError(400, f"malformed upload: {exc}") from None
        try:
            files = [v for _, v in form.multi_items() if hasattr(v, "read")]
            inputs = [await f.read() for f in files]
            options = json.loads(form.get("options") or "{}")
        except (ValueError, TypeError) as exc:
            raise RequestError(400, f"the options field is not JSON: {exc}") from None
        finally:
            await form.close()
        return {"inputs": inputs, "options": options}

    @app.get("/", response_class=HTMLResponse)
    def page() -> str:
        return resources.files("rnnkit.serving").joinpath("page.html").read_text()

    @app.get("/health")
    def health() -> dict:
        return {"status": "ok", "models": list(by_name)}

    @app.get("/metadata")
    def metadata() -> dict:
        return {"models": {name: m.metadata() for name, m in by_name.items()}}

    @app.get("/v1/models/{name}")
    def model_status(name: str) -> dict:
        served(name)
        status = {"error_code": "OK", "error_message": ""}
        return {
            "model_version_status": [
                {"version": "1", "state": "AVAILABLE", "status": status}
            ]
        }

    @app.get("/v1/models/{name}/metadata")
    def model_metadata(name: str) -> dict:
        model = served(name)
        return {
            "model_spec": {"name": name, "signature_name": model.default_signature},
            "metadata": {"signature_def": model.metadata()["signatures"]},
        }

    @app.post("/v1/models/{name}:predict")
    async def tf_serving_predict(name: str, request: Request) -> dict:
        model = served(name)
        body = await body_of(request)
        return await _in_thread(_signature_predict, model, body, limits)

    @app.post("/predict")
    async def predict_only(request: Request) -> dict:
        if len(by_name) != 1:
            raise RequestError(
                400,
                "this server has several models: POST /models/NAME/predict, NAME "
                f"one of {', '.join(by_name)}",
            )
        body = await body_of(request)
        (name,) = by_name
        return await _in_thread(_records, by_name[name], body, limits, batchers[name])

    @app.post("/models/{name}/predict")
    async def predict(name: str, request: Request) -> dict:
        model = served(name)
        body = await body_of(request)
        return await _in_thread(_records, model, body, limits, batchers[name])

    @app.post("/models/{name}/stream")
    async def stream(name: str, request: Request):
        model = served(name)
        body = await body_of(request)
        lines = await _in_thread(_stream, model, body, limits)
        return StreamingResponse(lines, media_type="application/x-ndjson")

    def _not_found(request: Request) -> str:
        return (
            f"no route {request.method} {request.url.path}; see GET /metadata, POST "
            "/predict, POST /models/NAME/predict, POST /v1/models/NAME:predict"
        )

    return app


def _too_large(limits: Limits) -> RequestError:
    return RequestError(
        413,
        f"request body over {limits.max_body_bytes} bytes; send fewer or shorter "
        "inputs (rnnkit serve --max-body-bytes sets the limit)",
    )


async def _in_thread(function, *args):
    """Runs a computation off the event loop, so /health answers while it runs."""
    from rnnkit._optional import optional_import

    concurrency = optional_import("starlette.concurrency")
    return await concurrency.run_in_threadpool(function, *args)


def _batcher(model: ServedModel, limits: Limits):
    """What computes a model's records: one request at a time, or batched."""
    from rnnkit.serving.batching import Batcher

    def predict(inputs: list, config, keywords: dict) -> list:
        with model.lock:
            return model.recipe.predict_records(
                model.model, inputs, config, model.calls, **keywords
            )

    if limits.batching:
        return Batcher(predict, limits.max_instances)
    return lambda inputs, config, keywords, options: predict(inputs, config, keywords)


def _records(model: ServedModel, body: dict, limits: Limits, batcher) -> dict:
    """`/predict`: the recipe's `predict_records` on the body's `inputs`."""
    inputs, options = _inputs_of(body, limits)
    config, keywords = _options(model, options, limits)
    try:
        predictions = batcher(inputs, config, keywords, options)
    except (RnnkitError, ValueError, TypeError) as exc:
        raise RequestError(400, str(exc).splitlines()[0]) from None
    return {"model": model.name, "predictions": predictions}


def _stream(model: ServedModel, body: dict, limits: Limits):
    """`/stream`: newline-delimited JSON, `{"piece": ...}` as each piece of the
    text is made, then `{"done": true, "text": ...}` (or `{"error": ...}`). The
    model is held for the whole stream (a language model's state is its own)."""
    inputs, options = _inputs_of(body, limits)
    config, keywords = _options(model, options, limits)
    model.lock.acquire()
    try:
        pieces = model.recipe.predict_stream(
            model.model, inputs, config, model.calls, **keywords
        )
        first = list(itertools.islice(pieces, 1))  # bad input fails here, as a 400
    except (RnnkitError, ValueError, TypeError) as exc:
        model.lock.release()
        raise RequestError(400, str(exc).splitlines()[0]) from None
    except BaseException:
        model.lock.release()
        raise

    def lines():
        text = []
        try:
            for piece in itertools.chain(first, pieces):
                text.append(piece)
                yield json.dumps({"piece": piece}) + "\n"
            yield json.dumps({"done": True, "text": "".join(text)}) + "\n"
        except Exception as exc:  # the status line is sent: say it in the stream
            log.exception("rnnkit serve: a stream of %s failed", model.name)
            yield json.dumps({"error": f"internal error ({type(exc).__name__})"}) + "\n"
        finally:
            model.lock.release()

    return lines()


def _inputs_of(body: dict, limits: Limits) -> tuple[list, dict]:
    unknown = set(body) - {"inputs", "options"}
    if unknown:
        raise RequestError(
            400, f"unknown field(s) {sorted(unknown)}; give inputs and options"
        )
    if "inputs" not in body:
        raise RequestError(400, 'no "inputs": give a list of inputs (or one)')
    inputs = body["inputs"]
    inputs = inputs if isinstance(inputs, list) else [inputs]
    if not 1 <= len(inputs) <= limits.max_instances:
        raise RequestError(
            400 if not inputs else 413,
            f"{len(inputs)} inputs; give 1 to {limits.max_instances} per request",
        )
    return inputs, body.get("options") or {}


def _options(model: ServedModel, options: Any, limits: Limits):
    recipe = model.recipe
    if not isinstance(options, dict):
        raise RequestError(400, '"options" must be a JSON object')
    config_values, keywords = {}, {}
    allowed = sorted({*recipe.predict_options, *recipe.record_options})
    caps = limits.option_caps()
    for name, value in options.items():
        key = recipe.predict_options.get(name) or recipe.predict_options.get(
            name.replace("_", "-")
        )
        if key is not None:
            if isinstance(value, int) and key in caps and value > caps[key]:
                raise RequestError(
                    400, f"option {name}={value} is over this server's cap {caps[key]}"
                )
            config_values[key] = value
        elif name in recipe.record_options:
            keywords[name] = value
        else:
            raise RequestError(
                400,
                f"unknown option {name!r} for recipe {recipe.name!r}; options: "
                f"{', '.join(allowed) or 'none'}",
            )
    if not config_values:
        return model.config, keywords
    try:
        return model.config.with_values(config_values), keywords
    except RnnkitError as exc:
        raise RequestError(400, f"bad option: {exc}") from None


def _signature_predict(model: ServedModel, body: dict, limits: Limits) -> dict:
    """TensorFlow Serving's predict: row ("instances") or columnar ("inputs")."""
    if not model.signatures:
        raise RequestError(
            400,
            f"model {model.name!r} has no signatures (its recipe declares no export); "
            f"POST /models/{model.name}/predict",
        )
    name = body.get("signature_name") or model.default_signature
    signature = model.signatures.get(name)
    if signature is None:
        raise RequestError(
            400,
            f"no signature {name!r}; this model has: {', '.join(model.signatures)}",
        )
    if ("instances" in body) == ("inputs" in body):
        raise RequestError(400, 'give either "instances" (rows) or "inputs" (columns)')
    names = [t["name"] for t in signature.inputs]
    if "instances" in body:
        rows = body["instances"]
        if not isinstance(rows, list) or not rows:
            raise RequestError(400, '"instances" must be a non-empty list')
        columns = {n: [_field(row, n, names) for row in rows] for n in names}
    else:
        values = body["inputs"]
        if isinstance(values, dict):
            missing = [n for n in names if n not in values]
            if missing:
                raise RequestError(400, f"missing input(s) {missing}; give {names}")
            columns = {n: values[n] for n in names}
        elif len(names) == 1:
            columns = {names[0]: values}
        else:
            raise RequestError(400, f'"inputs" must be an object with keys {names}')
    arrays = {t["name"]: _array(t, columns[t["name"]]) for t in signature.inputs}
    sizes = {len(a) for a in arrays.values() if a.ndim}
    if max(sizes, default=1) > limits.max_instances:
        raise RequestError(
            413, f"{max(sizes)} instances; give at most {limits.max_instances}"
        )
    try:
        with model.lock:
            outputs = signature.call(arrays)
    except (RnnkitError, ValueError) as exc:
        raise RequestError(400, str(exc).splitlines()[0]) from None
    order = [t["name"] for t in signature.outputs if t["name"] in outputs]
    order += [k for k in outputs if k not in order]
    values = {k: _plain(outputs[k]) for k in order}
    if "inputs" in body:
        return {"outputs": values[order[0]] if len(order) == 1 else values}
    if len(order) == 1:
        return {"predictions": values[order[0]]}
    count = len(next(iter(values.values())))
    return {"predictions": [{k: v[i] for k, v in values.items()} for i in range(count)]}


def _field(row: Any, name: str, names: list[str]) -> Any:
    if isinstance(row, dict):
        if name not in row:
            raise RequestError(400, f"an instance lacks input {name!r}; give {names}")
        return row[name]
    if len(names) > 1:
        raise RequestError(400, f"each instance must be an object with keys {names}")
    return row


def _array(tensor: dict, value: Any) -> np.ndarray:
    """A request's value as the signature's input: its dtype, a shape it takes."""
    name, dtype, shape = tensor["name"], tensor["dtype"], tensor["shape"]
    try:
        if dtype == "string":
            array = np.asarray(value, dtype=object)
            if not all(isinstance(v, str) for v in array.reshape(-1)):
                raise ValueError("not all strings")
            array = array.astype(str).astype(object)
        else:
            array = np.asarray(value)
            if array.dtype == object or array.dtype.kind in "SUb" and dtype != "bool":
                raise ValueError(f"values of type {array.dtype}")
            if np.dtype(dtype).kind in "iu" and array.dtype.kind == "f":
                raise ValueError("fractional values")
            array = array.astype(dtype)
    except (ValueError, TypeError) as exc:
        raise RequestError(
            400, f"input {name!r} cannot be read as {dtype} ({exc})"
        ) from None
    if array.ndim != len(shape) or any(
        want is not None and got != want
        for got, want in zip(array.shape, shape, strict=False)
    ):
        wanted = "(" + ", ".join("any" if d is None else str(d) for d in shape) + ")"
        raise RequestError(
            400,
            f"input {name!r} has shape {tuple(array.shape)}; the signature takes "
            f"{wanted}",
        )
    return array


def _plain(value: Any) -> Any:
    """numpy to JSON-ready lists; bytes (string outputs) to text."""
    array = np.asarray(value)
    if array.dtype.kind in "SO":
        return np.vectorize(_text, otypes=[object])(array).tolist()
    return array.tolist()


def _text(value: Any) -> Any:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


__all__ = ["Limits", "RequestError", "Signature", "create_app"]
