"""What a recipe declares for export: an `ExportPlan` of signatures and artefacts.

A recipe's `export_plan(model, config, format)` (see `rnnkit.recipe`) returns one:

- `endpoints`: the SavedModel's signatures, each a TensorFlow-traceable function of
  named tensors returning named tensors (the first is also `serving_default`);
- `artefacts`: the LiteRT / ONNX models, each a Keras model of named inputs
  (`Tensor`s, fixed shapes where a converter needs them) returning named outputs;
  a recipe whose model needs two (an encoder and a one-step decoder) lists two;
- `files`: text files written beside the artefacts (vocabularies, tokenizer models);
- `refused`: {format: why that format cannot carry the model, and which can}.

`export.json`, written beside the artefacts, describes all of it for a client.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

FORMATS = ("saved_model", "tflite", "onnx")
QUANTIZE = ("none", "dynamic", "float16")


@dataclasses.dataclass(frozen=True)
class Tensor:
    """A named input or output: its dtype, its shape (None = any size) and what it
    holds, for export.json and the docs. `probe`: for a float input, the (low, high)
    range of the values it takes (e.g. pixel levels 0-255), drawn uniformly for the
    probe batch that checks a conversion (`rnnkit.export.portable.check`); None:
    values around zero."""

    name: str
    dtype: str
    shape: tuple[int | None, ...]
    doc: str = ""
    probe: tuple[float, float] | None = None

    def spec(self):
        """The `tf.TensorSpec` of this tensor."""
        import tensorflow as tf

        return tf.TensorSpec(self.shape, tf.as_dtype(self.dtype), name=self.name)

    def describe(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "dtype": self.dtype,
            "shape": list(self.shape),
            "doc": self.doc,
        }


@dataclasses.dataclass
class Endpoint:
    """One SavedModel signature: `function(dict of inputs) -> dict of outputs`."""

    name: str
    function: Callable[[dict], dict]
    inputs: list[Tensor]
    outputs: list[Tensor]
    doc: str = ""


@dataclasses.dataclass
class Artefact:
    """One LiteRT / ONNX model: `model(dict of inputs) -> dict of outputs`, written as
    `<name>.tflite` / `<name>.onnx`."""

    name: str
    model: Any  # keras.Model
    inputs: list[Tensor]
    outputs: list[Tensor]
    doc: str = ""


@dataclasses.dataclass
class ExportPlan:
    """Everything `rnnkit.export.export` writes for one model (see the module
    docstring). `track` lists what the SavedModel must keep beside the variables its
    endpoints use (models, tokenizers with lookup tables)."""

    recipe: str
    endpoints: list[Endpoint] = dataclasses.field(default_factory=list)
    artefacts: list[Artefact] = dataclasses.field(default_factory=list)
    files: dict[str, str | bytes] = dataclasses.field(default_factory=dict)
    track: list[Any] = dataclasses.field(default_factory=list)
    refused: dict[str, str] = dataclasses.field(default_factory=dict)
    notes: dict[str, Any] = dataclasses.field(default_factory=dict)
