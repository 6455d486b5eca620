"""`rnnkit serve`: trained runs behind an HTTP API, and a page to try them.

    rnnkit serve runs/sentiment/demo runs/translation/demo --runtime onnx

Each run is served under a name (its recipe's name, or NAME in `NAME=RUN_DIR`), from
one runtime: "keras" (the run's `model.keras` in this process), "saved_model",
"onnx" or "litert" (its export, written to `RUN_DIR/export/FORMAT` first if
`rnnkit export` has not written it yet). The routes:

- `GET /`: a page to try each model (no build step, no asset from the internet).
- `GET /health`: `{"status": "ok", "models": [...]}`.
- `GET /metadata`: each model's recipe, config, runtime, signatures (inputs and
  outputs with dtypes and shapes) and the rnnkit and Keras versions.
- `POST /v1/models/NAME:predict`: TensorFlow Serving's REST predict on the model's
  inputs: `{"instances": [...]}` (rows) -> `{"predictions": [...]}`, or
  `{"inputs": ...}` (columns) -> `{"outputs": ...}`, optional `"signature_name"`;
  `GET /v1/models/NAME` and `/v1/models/NAME/metadata` as TF Serving answers them.
  The signatures are those of the run's SavedModel export (for "keras" and
  "saved_model") or its ONNX / LiteRT models (named by export.json).
- `POST /models/NAME/predict` (or `POST /predict` with one model):
  `{"inputs": [...], "options": {...}}` on what a person gives (texts, sentences),
  answered by the recipe's `predict_records`: `{"model": NAME, "predictions":
  [record, ...]}`, each record what `rnnkit predict` prints and what the page
  draws (probabilities, attention weights). `options` are the recipe's
  `predict_options` (e.g. translation's `beam`, `n-best`) and `record_options`
  (sentiment's `explain`).

Every error is JSON `{"error": "one line"}` with a 4xx status (400 bad input, 404
unknown model or route, 413 too large); the server keeps serving. It listens on
127.0.0.1 unless told otherwise, reads no path that a request names, and caps the
body size, the inputs per request, the beam width and the generated length
(`Limits`).
"""

from __future__ import annotations

from pathlib import Path

from rnnkit.serving.app import Limits, RequestError, create_app
from rnnkit.serving.runtimes import RUNTIMES, ServedModel, Signature, load

__all__ = [
    "RUNTIMES",
    "Limits",
    "RequestError",
    "ServedModel",
    "Signature",
    "create_app",
    "load",
    "load_all",
]


def load_all(specs: list[str], runtime: str) -> list[ServedModel]:
    """Loads `RUN_DIR` or `NAME=RUN_DIR` specs; a name defaults to the recipe's, or
    to the run folder's when two runs share a recipe."""
    from rnnkit.errors import RnnkitError

    named = []
    for spec in specs:
        name, sep, folder = spec.partition("=")
        if not sep:
            name, folder = "", spec
        if not Path(folder).is_dir():
            raise RnnkitError(
                f"no run directory at {folder}; give the folder of a completed run"
            )
        named.append((name, Path(folder)))
    models = [load(folder, runtime, name or None) for name, folder in named]
    counts: dict[str, int] = {}
    for model in models:
        counts[model.name] = counts.get(model.name, 0) + 1
    for (given, folder), model in zip(named, models, strict=True):
        if not given and counts[model.name] > 1:
            model.name = folder.name
    names = [m.name for m in models]
    if len(set(names)) != len(names):
        raise RnnkitError(
            f"two runs would be served as the same name ({', '.join(names)}); "
            "name them NAME=RUN_DIR"
        )
    return models
