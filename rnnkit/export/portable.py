"""LiteRT and ONNX files of an `ExportPlan`: each artefact converted by
`rnnkit.export.convert` (builtin LiteRT ops; ONNX through tf2onnx)."""

from __future__ import annotations

from pathlib import Path

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
    import onnx

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
