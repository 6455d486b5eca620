"""A run's model in the runtime it is served from: Keras in this process, its
SavedModel, or its ONNX or LiteRT files.

Whatever the runtime, a `ServedModel` offers the same two things:

- `signatures`: {name: `Signature`}, what TensorFlow Serving's API calls: the
  SavedModel's signatures (in process for "keras": the very functions the export
  traces), or the ONNX / LiteRT models, each with the named tensors export.json
  lists for it;
- `calls`: what the recipe's `predict_records` computes with: None for "keras" (the
  recipe runs its own Keras code: beam search, attention weights), else {artefact
  name: call} on the exported encoder, decoder step or classifier in that runtime.

A run not yet exported in the runtime's format is exported first, where `rnnkit
export` writes it (`RUN_DIR/export/FORMAT`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from rnnkit.errors import RnnkitError

RUNTIMES = ("keras", "saved_model", "onnx", "litert")
_FORMAT = {"saved_model": "saved_model", "onnx": "onnx", "litert": "tflite"}


@dataclasses.dataclass
class Signature:
    """One callable of the served model: named numpy inputs to named numpy outputs,
    with the tensors it takes and returns as export.json describes them
    (`{"name", "dtype", "shape", "doc"}`, None for a dimension of any size)."""

    name: str
    inputs: list[dict[str, Any]]
    outputs: list[dict[str, Any]]
    call: Callable[[dict], dict]
    doc: str = ""

    def describe(self) -> dict[str, Any]:
        return {"inputs": self.inputs, "outputs": self.outputs, "doc": self.doc}


@dataclasses.dataclass
class ServedModel:
    """A completed run, loaded for serving under `name` (see the module docstring).

    `lock` serialises the computations of one model: TensorFlow and onnxruntime use
    every core for one call already, and a LiteRT interpreter is not thread-safe.
    """

    name: str
    run_dir: Path
    runtime: str
    recipe: Any
    config: Any
    model: Any
    signatures: dict[str, Signature]
    default_signature: str | None
    calls: dict[str, Callable[[dict], dict]] | None
    lock: threading.Lock = dataclasses.field(default_factory=threading.Lock)

    def metadata(self) -> dict[str, Any]:
        """The recipe, config, runtime, signatures and versions (`GET /metadata`)."""
        import keras

        import rnnkit

        return {
            "name": self.name,
            "recipe": self.recipe.name,
            "summary": self.recipe.summary,
            "runtime": self.runtime,
            "run_dir": self.run_dir.name,
            "config": self.config.to_dict(),
            "predict_options": dict(self.recipe.predict_options),
            "signatures": {k: s.describe() for k, s in self.signatures.items()},
            "serving_default": self.default_signature,
            "versions": {"rnnkit": rnnkit.__version__, "keras": keras.__version__},
        }


def load(run_dir: Path, runtime: str, name: str | None = None) -> ServedModel:
    """Loads the completed run in `run_dir` for serving from `runtime`.

    Raises:
        RnnkitError: an unknown runtime, a folder without a completed run, or a
            recipe that declares no export in the runtime's format.
    """
    from rnnkit import registry
    from rnnkit.training import runner

    if runtime not in RUNTIMES:
        raise RnnkitError(
            f"unknown runtime {runtime!r}; choose one of {', '.join(RUNTIMES)}"
        )
    recipe, config, model = runner.load_run(run_dir, registry.load)
    name = name or recipe.name
    if runtime == "keras":
        signatures, default = _keras_signatures(recipe, model, config)
        calls = None
    else:
        folder = _exported(run_dir, _FORMAT[runtime])
        description = json.loads((folder / "export.json").read_text("utf-8"))
        if runtime == "saved_model":
            signatures, default = _saved_model_signatures(folder, description)
            calls = _saved_model_calls(recipe, model, config, signatures)
        else:
            signatures = _portable_signatures(folder, description, runtime)
            default = next(iter(signatures))
            calls = {k: s.call for k, s in signatures.items()}
    return ServedModel(
        name, run_dir, runtime, recipe, config, model, signatures, default, calls
    )


def _keras_signatures(recipe, model, config) -> tuple[dict[str, Signature], str]:
    """The SavedModel's signatures, traced here on the loaded Keras model; none for
    a recipe that declares no export (its /predict still answers)."""
    import tensorflow as tf

    plan = recipe.export_plan(model, config, "saved_model")
    if plan is None:
        return {}, None
    if "saved_model" in plan.refused:
        raise RnnkitError(plan.refused["saved_model"])
    signatures = {}
    for endpoint in plan.endpoints:
        traced = tf.function(
            endpoint.function,
            input_signature=[{t.name: t.spec() for t in endpoint.inputs}],
        )

        def call(inputs, traced=traced, tensors=endpoint.inputs):
            feeds = {t.name: tf.constant(inputs[t.name]) for t in tensors}
            return {k: v.numpy() for k, v in traced(feeds).items()}

        signatures[endpoint.name] = Signature(
            endpoint.name,
            [t.describe() for t in endpoint.inputs],
            [t.describe() for t in endpoint.outputs],
            call,
            endpoint.doc,
        )
    return signatures, plan.endpoints[0].name


def _exported(run_dir: Path, format: str) -> Path:
    """`RUN_DIR/export/FORMAT`, exported now if it is not there yet."""
    from rnnkit.export import EXPORT_FILE, ExportError, export

    folder = run_dir / "export" / format
    if (folder / EXPORT_FILE).is_file():
        return folder
    try:
        return export(run_dir, format=format).output
    except ExportError as error:
        raise RnnkitError(str(error)) from None


def _saved_model_signatures(
    folder: Path, description: dict
) -> tuple[dict[str, Signature], str]:
    import tensorflow as tf

    from rnnkit._optional import optional_import

    # The translation signatures' text ops (export extra); others load without them.
    with contextlib.suppress(ImportError):
        optional_import("tensorflow_text")
    loaded = tf.saved_model.load(str(folder))
    described = description["models"]["saved_model"]
    signatures = {}
    for name, spec in described["signatures"].items():
        function = loaded.signatures[name]

        def call(inputs, function=function, tensors=spec["inputs"], keep=loaded):
            feeds = {t["name"]: tf.constant(inputs[t["name"]]) for t in tensors}
            return {k: v.numpy() for k, v in function(**feeds).items()}

        signatures[name] = Signature(
            name, spec["inputs"], spec["outputs"], call, spec.get("doc", "")
        )
    return signatures, described["serving_default"]


def _saved_model_calls(recipe, model, config, signatures) -> dict[str, Callable]:
    """The SavedModel signature that takes each portable artefact's inputs (by
    name and dtype), under the artefact's name, for `predict_records`."""
    plan = recipe.export_plan(model, config, "onnx")
    calls = {}
    for artefact in plan.artefacts if plan is not None else []:
        wanted = {(t.name, t.dtype) for t in artefact.inputs}
        for signature in signatures.values():
            if {(t["name"], t["dtype"]) for t in signature.inputs} == wanted:
                calls[artefact.name] = signature.call
                break
    return calls


def _portable_signatures(
    folder: Path, description: dict, runtime: str
) -> dict[str, Signature]:
    signatures = {}
    for name, spec in description["models"].items():
        path = folder / spec["file"]
        call = _onnx_call(path) if runtime == "onnx" else _litert_call(path)
        signatures[name] = Signature(
            name, spec["inputs"], spec["outputs"], call, spec.get("doc", "")
        )
    return signatures


def _onnx_call(path: Path) -> Callable[[dict], dict]:
    from rnnkit._optional import optional_import

    onnxruntime = optional_import("onnxruntime")
    options = onnxruntime.SessionOptions()
    options.log_severity_level = 3
    session = onnxruntime.InferenceSession(
        str(path), options, providers=["CPUExecutionProvider"]
    )
    names = [output.name for output in session.get_outputs()]

    def call(inputs: dict) -> dict:
        return dict(zip(names, session.run(names, dict(inputs)), strict=True))

    return call


def _litert_call(path: Path) -> Callable[[dict], dict]:
    from rnnkit._optional import optional_import

    Interpreter = optional_import("ai_edge_litert.interpreter").Interpreter
    runner = Interpreter(model_path=str(path)).get_signature_runner()
    lock = threading.Lock()  # an interpreter runs one call at a time

    def call(inputs: dict) -> dict:
        with lock:
            return {k: np.asarray(v) for k, v in runner(**inputs).items()}

    return call
