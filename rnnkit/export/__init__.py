"""SavedModel, LiteRT and ONNX export of rnnkit runs and Keras models.

    from rnnkit.export import export
    export("runs/stock/smoke", format="tflite")  # writes runs/stock/smoke/export/tflite
    export(model, format="onnx", output="exported/model")  # a model of your own

A run directory is exported as its recipe declares (`Recipe.export_plan`): what the
exported model takes and returns per format, and the vocabulary files written beside
it (the sentiment classifier reads raw strings in its SavedModel and token ids in its
LiteRT / ONNX files, the translation model is an end-to-end `translate` signature in
its SavedModel and an encoder plus a one-step decoder in LiteRT / ONNX, the
captioning model the same with image bytes in, ...). A Keras model of your own is
exported with its inputs as they are. Every export is a folder
holding the artefacts and `export.json`, which names each file, signature, input and
output with its dtype and shape, and the versions that wrote it; it is written whole
or not at all (see `rnnkit.export.writer`).

The conversions themselves are `rnnkit.export.convert`: `to_tflite` (LiteRT with
builtin ops only) and `to_onnx` (tf2onnx), with `run_tflite` and `run_onnx` to run
the results in their own runtimes. The signatures of each recipe and example
clients: docs/guides/export.md.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
from pathlib import Path
from typing import Any

from rnnkit.export.errors import ExportError
from rnnkit.export.plan import (
    FORMATS,
    QUANTIZE,
    Artefact,
    Endpoint,
    ExportPlan,
    Tensor,
)

__all__ = [
    "FORMATS",
    "QUANTIZE",
    "Artefact",
    "Endpoint",
    "ExportError",
    "ExportPlan",
    "ExportResult",
    "Tensor",
    "export",
]

EXPORT_FILE = "export.json"


@dataclasses.dataclass(frozen=True)
class ExportResult:
    """Where an export went: its folder, its format and the files written there."""

    output: Path
    format: str
    files: list[str]
    description: dict[str, Any]


def export(
    model_or_run_dir: Any,
    format: str = "saved_model",
    output: str | Path | None = None,
    quantize: str = "none",
    force: bool = False,
) -> ExportResult:
    """Exports a completed run directory, or a Keras model, in `format`.

    Args:
        model_or_run_dir: a run directory (`rnnkit run ... --run-dir DIR`) or a
            `keras.Model` whose inputs have known dtypes (a functional model).
        format: "saved_model", "tflite" (LiteRT, builtin ops only) or "onnx".
        output: the folder to write; defaults to `RUN_DIR/export/FORMAT` for a run
            directory and is required for a model.
        quantize: "none", "dynamic" (int8 weights) or "float16" weights; LiteRT
            only.
        force: replace an existing output folder.

    Returns:
        An `ExportResult`.

    Raises:
        ExportError: an unknown format or quantization, a missing run directory, an
            existing output without `force`, a format that cannot carry the model
            (the message names one that can), or a write that failed (nothing is
            left under the output's name).
    """
    if format not in FORMATS:
        raise ExportError(
            f"unknown export format {format!r}; choose one of {', '.join(FORMATS)}"
        )
    if quantize not in QUANTIZE:
        raise ExportError(
            f"unknown quantization {quantize!r}; choose one of {', '.join(QUANTIZE)}"
        )
    if quantize != "none" and format != "tflite":
        raise ExportError(
            f"--quantize {quantize} applies to LiteRT files only; use --format tflite "
            "(or --quantize none)"
        )
    source: dict[str, Any]
    if isinstance(model_or_run_dir, (str, Path)):
        run_dir = Path(model_or_run_dir)
        output = Path(output) if output is not None else run_dir / "export" / format
        _check_early(output, force)
        recipe, config, model = _load_run(run_dir)
        plan = recipe.export_plan(model, config, format)
        if plan is None:
            raise ExportError(
                f"recipe {recipe.name!r} declares no export (it has no export_plan)"
            )
        source = {"run_dir": str(run_dir), "recipe": recipe.name}
    else:
        if output is None:
            raise ExportError("give the output folder of the export (output=...)")
        output = Path(output)
        _check_early(output, force)
        from rnnkit.export.generic import model_plan

        plan = model_plan(model_or_run_dir, format)
        source = {"model": getattr(model_or_run_dir, "name", "model")}
    if format in plan.refused:
        raise ExportError(plan.refused[format])
    return _write(plan, format, output, quantize, force, source)


def _check_early(output: Path, force: bool) -> None:
    from rnnkit.export.writer import check_output

    check_output(output, force)


def _load_run(run_dir: Path):
    from rnnkit import registry
    from rnnkit.errors import RnnkitError
    from rnnkit.training import runner

    if not run_dir.is_dir():
        raise ExportError(
            f"no run directory at {run_dir}; give the folder of a completed run "
            "(rnnkit run NAME --run-dir DIR)"
        )
    try:
        return runner.load_run(run_dir, registry.load)
    except RnnkitError as error:
        raise ExportError(str(error)) from None


def _write(
    plan: ExportPlan,
    format: str,
    output: Path,
    quantize: str,
    force: bool,
    source: dict[str, Any],
) -> ExportResult:
    from rnnkit.export import portable, saved_model, writer

    with writer.export_folder(output, force) as folder:
        if format == "saved_model":
            if not plan.endpoints:
                raise ExportError(f"recipe {plan.recipe!r} declares no SavedModel")
            saved_model.write(plan, folder)
            written = ["saved_model.pb", "variables/"]
        else:
            if not plan.artefacts:
                raise ExportError(
                    f"recipe {plan.recipe!r} declares no {format} artefact; export "
                    "it as --format saved_model"
                )
            written = portable.write(plan, folder, format, quantize)
        for name, content in plan.files.items():
            writer.write_file(folder, name, content)
        description = describe(plan, format, quantize, written, source)
        writer.write_file(
            folder, EXPORT_FILE, json.dumps(description, indent=2, ensure_ascii=False)
        )
    return ExportResult(
        output, format, [*written, *plan.files, EXPORT_FILE], description
    )


def describe(
    plan: ExportPlan,
    format: str,
    quantize: str,
    written: list[str],
    source: dict[str, Any],
) -> dict[str, Any]:
    """The content of export.json."""
    import keras
    import tensorflow as tf

    import rnnkit

    if format == "saved_model":
        signatures = {
            endpoint.name: {
                "inputs": [t.describe() for t in endpoint.inputs],
                "outputs": [t.describe() for t in endpoint.outputs],
                "doc": endpoint.doc,
            }
            for endpoint in plan.endpoints
        }
        models = {
            "saved_model": {
                "signatures": signatures,
                "serving_default": plan.endpoints[0].name,
            }
        }
    else:
        from rnnkit.export.portable import file_name

        models = {
            artefact.name: {
                "file": file_name(artefact, format),
                "inputs": [t.describe() for t in artefact.inputs],
                "outputs": [t.describe() for t in artefact.outputs],
                "doc": artefact.doc,
            }
            for artefact in plan.artefacts
        }
    return {
        "format": format,
        "quantize": quantize,
        **source,
        "models": models,
        "files": sorted(plan.files),
        **({"notes": plan.notes} if plan.notes else {}),
        "versions": {
            "rnnkit": rnnkit.__version__,
            "tensorflow": tf.__version__,
            "keras": keras.__version__,
        },
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(
            timespec="seconds"
        ),
    }
