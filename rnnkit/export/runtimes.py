"""One call of an exported model in its own runtime: LiteRT's interpreter
(`ai_edge_litert`) or onnxruntime, on numpy inputs, outputs in the order the
converters (`rnnkit.export.convert`) gave them."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from typing import Any

from rnnkit._optional import optional_import
from rnnkit.export.errors import ExportError


def run_tflite(
    model: bytes | str | os.PathLike,
    inputs: Any,
    signature_key: str | None = None,
) -> list:
    """One call of a LiteRT model in `ai_edge_litert`'s interpreter.

    Args:
        model: The flatbuffer (`to_tflite`) or the path of a `.tflite` file.
        inputs: A dict of numpy arrays by input name, or for a model of one
            input, the array. (A LiteRT signature keeps its inputs by name
            only, not in the order of the model's arguments.)
        signature_key: The signature to run; None: the model's only one.

    Returns:
        The outputs as a list of numpy arrays, in the order of `to_tflite`.
    """
    Interpreter = optional_import("ai_edge_litert.interpreter").Interpreter

    if isinstance(model, (bytes, bytearray)):
        interpreter = Interpreter(model_content=bytes(model))
    else:
        interpreter = Interpreter(model_path=str(model))
    signatures = interpreter.get_signature_list()
    if signature_key is None:
        if len(signatures) != 1:
            raise ExportError(
                f"The LiteRT model has {len(signatures)} signatures "
                f"({', '.join(signatures) or 'none'}): pass signature_key."
            )
        signature_key = next(iter(signatures))
    runner = interpreter.get_signature_runner(signature_key)
    details = runner.get_input_details()
    if len(details) > 1 and not isinstance(inputs, Mapping):
        raise ExportError(
            f"The LiteRT model takes {len(details)} inputs "
            f"({', '.join(sorted(details))}): pass a dict of arrays by name."
        )
    feeds = {
        name: _as_input(value, details[name]["dtype"])
        for name, value in _named(inputs, sorted(details)).items()
    }
    results = runner(**feeds)
    return [results[name] for name in sorted(results, key=_output_order)]


def run_onnx(model: bytes | str | os.PathLike, inputs: Any) -> list:
    """One call of an ONNX model in onnxruntime (on the CPU).

    Args:
        model: The serialized model (`to_onnx`) or the path of a `.onnx` file.
        inputs: A dict of numpy arrays by input name, a list of them in the order
            of the model's inputs, or for a model of one input, the array.

    Returns:
        The outputs as a list of numpy arrays, in the model's order.
    """
    onnxruntime = optional_import("onnxruntime")

    options = onnxruntime.SessionOptions()
    options.log_severity_level = 3  # errors only
    session = onnxruntime.InferenceSession(
        bytes(model) if isinstance(model, (bytes, bytearray)) else str(model),
        options,
        providers=["CPUExecutionProvider"],
    )
    dtypes = {
        "tensor(float)": "float32",
        "tensor(double)": "float64",
        "tensor(int32)": "int32",
        "tensor(int64)": "int64",
        "tensor(bool)": "bool",
    }
    specs = {spec.name: spec for spec in session.get_inputs()}
    feeds = {
        name: _as_input(value, dtypes.get(specs[name].type))
        for name, value in _named(inputs, list(specs)).items()
    }
    return session.run(None, feeds)


def _output_order(name: str):
    """`output_2` before `output_10`; other names alphabetically (tf.nest's order
    of a dict)."""
    match = re.fullmatch(r"output_(\d+)", name)
    return (0, int(match.group(1)), "") if match else (1, 0, name)


def _named(inputs, names: Sequence[str]) -> dict:
    """`inputs` (one array, a list in order, or a dict) by input name."""
    if isinstance(inputs, Mapping):
        unknown = sorted(set(inputs) - set(names))
        missing = sorted(set(names) - set(inputs))
        if unknown or missing:
            raise ExportError(
                f"The model's inputs are {', '.join(names)}; got "
                f"{', '.join(map(str, inputs))}."
            )
        return dict(inputs)
    values = list(inputs) if isinstance(inputs, (list, tuple)) else [inputs]
    if len(values) != len(names):
        raise ExportError(
            f"The model takes {len(names)} input(s) ({', '.join(names)}); got "
            f"{len(values)}."
        )
    return dict(zip(names, values, strict=True))


def _as_input(value, dtype):
    import numpy as np

    value = np.asarray(value)
    return value if dtype is None else value.astype(dtype, copy=False)
