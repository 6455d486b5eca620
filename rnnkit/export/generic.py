"""The export plan of a Keras model of your own: its inputs and outputs as they are.

A functional model (or any model whose `inputs` are known) exports one SavedModel
signature, `serve`, and one LiteRT / ONNX file, `model`, both taking the model's
inputs by name and returning its outputs by name. A model that reads strings has no
LiteRT or ONNX form (neither takes string tensors).
"""

from __future__ import annotations

from typing import Any

from rnnkit.export.errors import ExportError
from rnnkit.export.plan import Artefact, Endpoint, ExportPlan, Tensor
from rnnkit.export.signature import SignatureModel


def named_outputs(model: Any, outputs: Any) -> dict:
    """The model's outputs as {output name: tensor}."""
    names = list(getattr(model, "output_names", None) or [])
    if isinstance(outputs, dict):
        return dict(outputs)
    flat = list(outputs) if isinstance(outputs, (list, tuple)) else [outputs]
    if len(names) != len(flat):
        names = [f"output_{index}" for index in range(len(flat))]
    return dict(zip(names, flat, strict=True))


def model_plan(model: Any, format: str) -> ExportPlan:
    """The plan of a Keras model whose input dtypes and shapes are known."""
    import keras

    if not isinstance(model, keras.Model):
        raise ExportError(
            f"export takes a run directory or a keras.Model, got {type(model).__name__}"
        )
    try:
        symbolic_inputs = list(model.inputs)
    except (AttributeError, ValueError):
        symbolic_inputs = []
    if not symbolic_inputs:
        raise ExportError(
            f"model {model.name!r} has no known inputs (a subclassed model that was "
            "never called on keras.Input tensors); wrap it in a functional model: "
            "keras.Model(inputs, model(inputs))"
        )
    inputs = [
        Tensor(tensor.name, str(tensor.dtype), tuple(tensor.shape))
        for tensor in symbolic_inputs
    ]
    output_specs = named_outputs(model, model.outputs)
    outputs = [
        Tensor(name, str(tensor.dtype), tuple(tensor.shape))
        for name, tensor in output_specs.items()
    ]

    def serve(values: dict) -> dict:
        arguments = [values[t.name] for t in inputs]
        result = model(arguments[0] if len(arguments) == 1 else arguments)
        return named_outputs(model, result)

    plan = ExportPlan(
        recipe="",
        endpoints=[Endpoint("serve", serve, inputs, outputs)],
        track=[model],
    )
    if any(t.dtype == "string" for t in inputs):
        plan.refused.update(
            {
                name: f"model {model.name!r} reads strings, which {label} models "
                "cannot take as inputs; export it with --format saved_model, or "
                "export the part after its text layer (token ids in)"
                for name, label in (("tflite", "LiteRT"), ("onnx", "ONNX"))
            }
        )
    else:
        plan.artefacts.append(
            Artefact(
                "model",
                SignatureModel(serve, [model], name=model.name),
                inputs,
                outputs,
            )
        )
    return plan
