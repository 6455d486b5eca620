"""LiteRT and ONNX files of an `ExportPlan`: each artefact converted by
`rnnkit.export.convert` (builtin LiteRT ops; ONNX through tf2onnx), then run in its
own runtime on a probe batch and compared with the Keras artefact before it is
written: a conversion that changes the numbers is refused, never written."""

from __future__ import annotations

from pathlib import Path

from rnnkit._optional import optional_import
from rnnkit.export.plan import Artefact, ExportPlan
from rnnkit.export.writer import write_file

SUFFIX = {"tflite": ".tflite", "onnx": ".onnx"}


def file_name(artefact: Artefact, format: str) -> str:
    return artefact.name + SUFFIX[format]


def write(plan: ExportPlan, folder: Path, format: str, quantize: str) -> list[str]:
    """Converts and writes every artefact; returns the file names."""
    names = []
    for artefact in plan.artefacts:
        data = convert(artefact, format, quantize)
        check(artefact, format, data, quantize)
        names.append(file_name(artefact, format))
        write_file(folder, names[-1], data)
    return names


def convert(artefact: Artefact, format: str, quantize: str = "none") -> bytes:
    """The bytes of one artefact in `format` ("tflite" or "onnx")."""
    from rnnkit.export import convert as converters

    signature = [{t.name: t.spec() for t in artefact.inputs}]
    if format == "tflite":
        return converters.to_tflite(
            artefact.model, input_signature=signature, quantize=quantize
        )
    data = converters.to_onnx(artefact.model, input_signature=signature)
    return named_onnx_outputs(data, sorted(t.name for t in artefact.outputs))


def named_onnx_outputs(data: bytes, names: list[str]) -> bytes:
    """The ONNX model with its outputs named `names` (tf2onnx names them after the
    graph's tensors; the converter gives a dict's outputs in sorted key order), so a
    client reads "logits", "next_h_0", ... as in every other format."""
    onnx = optional_import("onnx")

    proto = onnx.load_from_string(data)
    graph = proto.graph
    if len(graph.output) != len(names):
        return data
    for output, name in zip(graph.output, names, strict=True):
        if output.name == name:
            continue
        graph.node.append(onnx.helper.make_node("Identity", [output.name], [name]))
        output.name = name
    return proto.SerializeToString()


# Largest difference from Keras allowed on the probe batch, relative to the largest
# output magnitude plus one: float32 conversions agree to about 1e-6; quantized
# weights move outputs by a few per cent.
TOLERANCE = {"none": 1e-4, "float16": 0.05, "dynamic": 0.25}


def probe_inputs(artefact: Artefact, seed: int = 0) -> dict:
    """A small batch for `artefact`: batch 2, length 5 where a size is free; token
    ids and other integers 1, floats from a seeded normal distribution, or uniform
    over the input's `probe` range where it declares one (an image's pixel levels:
    a near-black image would check a quantized CNN where it is never used)."""
    import numpy as np

    generator = np.random.default_rng(seed)
    inputs = {}
    for tensor in artefact.inputs:
        shape = [
            (2 if axis == 0 else 5) if size is None else size
            for axis, size in enumerate(tensor.shape)
        ]
        dtype = np.dtype(tensor.dtype)
        if dtype.kind == "f" and tensor.probe is not None:
            low, high = tensor.probe
            inputs[tensor.name] = generator.uniform(low, high, shape).astype(dtype)
        elif dtype.kind == "f":
            inputs[tensor.name] = (0.5 * generator.standard_normal(shape)).astype(dtype)
        elif dtype.kind == "b":
            inputs[tensor.name] = np.ones(shape, bool)
        else:
            inputs[tensor.name] = np.ones(shape, dtype)
    return inputs


def check(artefact: Artefact, format: str, data: bytes, quantize: str) -> None:
    """Runs the converted `data` on `probe_inputs` and compares it with the Keras
    artefact; an `ExportError` when they differ (or the file gives NaN)."""
    import numpy as np

    from rnnkit.export.errors import ExportError
    from rnnkit.export.runtimes import run_onnx, run_tflite

    inputs = probe_inputs(artefact)
    outputs = artefact.model(inputs)
    if isinstance(outputs, dict):
        expected = [outputs[name] for name in sorted(outputs)]
    elif isinstance(outputs, (list, tuple)):
        expected = list(outputs)
    else:
        expected = [outputs]
    expected = [np.asarray(value, dtype=np.float64) for value in expected]
    run = run_tflite if format == "tflite" else run_onnx
    got = [np.asarray(value, dtype=np.float64) for value in run(data, inputs)]
    scale = 1.0 + max((float(np.max(np.abs(v))) for v in expected if v.size), default=0)
    worst = 0.0
    for want, have in zip(expected, got, strict=False):
        if want.shape != have.shape or not np.all(np.isfinite(have)):
            worst = float("inf")
            break
        if want.size:
            worst = max(worst, float(np.max(np.abs(want - have))))
    if len(got) != len(expected) or worst > TOLERANCE[quantize] * scale:
        name = {"tflite": "LiteRT", "onnx": "ONNX"}[format]
        if quantize == "none":
            fix = (
                "export this run with --format saved_model (or the other portable "
                "format)"
            )
        else:
            fix = (
                f"its weights do not survive --quantize {quantize}; use "
                + ("--quantize float16 or " if quantize == "dynamic" else "")
                + "--quantize none"
            )
        raise ExportError(
            f"the {name} conversion of {artefact.name!r} does not reproduce the Keras "
            f"model on a probe batch (largest difference {worst:.3g}, allowed "
            f"{TOLERANCE[quantize] * scale:.3g}), so it was not written; {fix}"
        )
