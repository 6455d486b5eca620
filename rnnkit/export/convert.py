"""Keras models and `tf.function`s as LiteRT (TFLite) and ONNX models, and their
runtimes.

Both converters trace the model afresh inside `export_mode()`, where rnnkit's
recurrent layers run their time loop as a `tf.while_loop` over plain tensors and the
Bahdanau layer scores all queries at once (`rnnkit.layers._export`): no
`tf.TensorArray`, no XLA-compiled function, no fused kernel, so nothing that LiteRT's
builtin ops or ONNX cannot carry. Trained weights and the numbers are those of the
model: the same cell steps, the same masking rules.

- `to_tflite`: TensorFlow's LiteRT converter with builtin ops only
  (`target_spec.supported_ops = [TFLITE_BUILTINS]`). An operation without a builtin
  (Keras' own `LSTM`/`GRU`/`SimpleRNN`, whose loops keep `TensorList`s of
  unknown batch size) is an `ExportError` that names it, not a model that needs
  the Select TF ops runtime.
- `to_onnx`: tf2onnx's `convert.from_function`, given the function frozen as for
  LiteRT (every captured value a constant). tf2onnx freezes resource variables
  itself but keeps any other captured tensor as a graph input: an adapted
  `Normalization`'s mean and variance, which Keras holds as tensors beside its
  variables, would become inputs a client has to feed. Keras' own
  `Model.export(format="onnx")` runs the same converter on the TensorFlow backend,
  but takes only a Keras model and writes a file, while `from_function` takes any
  `tf.function` (a decoder's single step, a signature of several inputs) and
  returns the model in memory; torch.onnx would need the PyTorch backend, which a
  process chooses once, before any model is built.
- `run_tflite`, `run_onnx`: one call of the model in `ai_edge_litert`'s interpreter
  or in onnxruntime, on numpy inputs.
"""

from __future__ import annotations

import contextlib
import os
import re
import tempfile
from collections.abc import Iterator, Mapping
from typing import Any

from rnnkit._keras_private import freeze_function
from rnnkit._optional import optional_import
from rnnkit.export import _diagnosis
from rnnkit.export.errors import ExportError
from rnnkit.export.runtimes import run_onnx, run_tflite
from rnnkit.layers._export import export_mode

QUANTIZE = ("none", "dynamic", "float16")

# Keras' recurrent layers: their loops keep `tf.TensorArray`s, which convert to
# builtins only for a static batch size. rnnkit's layers of the same names take
# their weights unchanged.
KERAS_RECURRENT = ("SimpleRNN", "LSTM", "GRU")


def to_tflite(model: Any, input_signature: Any = None, quantize: str = "none") -> bytes:
    """`model` as a LiteRT flatbuffer that uses builtin ops only.

    Args:
        model: A built `keras.Model`, a `tf.function` (traced anew), a Python
            function, or a concrete function (already traced: trace it inside
            `export_mode()`).
        input_signature: What the model takes: for a Keras model, a `tf.TensorSpec`
            or the list or dict of them its `inputs` have (default: its `inputs`,
            batch size and lengths left dynamic); for a function, the list of
            specs of its positional arguments (default: its own
            `input_signature`).
        quantize: `"none"` (float32), `"dynamic"` (int8 weights, dynamic-range
            quantization) or `"float16"` (float16 weights).

    Returns:
        The flatbuffer. Its one signature takes the inputs under their spec
        names; its outputs are `output_0`, `output_1`, ... in the order of the
        flattened outputs (or keep their keys when the model returns a dict).

    Raises:
        ExportError: An operation has no LiteRT builtin, or the arguments are
            wrong.
    """
    if quantize not in QUANTIZE:
        raise ExportError(
            f"Unknown quantize={quantize!r}: choose one of {', '.join(QUANTIZE)}."
        )
    import tensorflow as tf

    with export_mode("tflite"):
        function, what = _traced(model, input_signature)
    try:
        with _stderr_captured():
            # The weights as constants (which quantization needs), not resource
            # variables that a client would have to initialise; a tf.Module as the
            # owner: the converter saves it with the function as its signature,
            # which keeps the names.
            converter = tf.lite.TFLiteConverter.from_concrete_functions(
                [_frozen(function)], tf.Module()
            )
            converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS]
            converter.experimental_enable_resource_variables = False
            if quantize != "none":
                converter.optimizations = [tf.lite.Optimize.DEFAULT]
            if quantize == "float16":
                converter.target_spec.supported_types = [tf.float16]
            return converter.convert()
    except Exception as error:  # the converter's ConverterError, among others
        raise ExportError(_diagnosis.tflite_failure(what, model, error)) from None


def to_onnx(model: Any, input_signature: Any = None, opset: int | None = None) -> bytes:
    """`model` as a serialized ONNX model (through tf2onnx).

    Args:
        model, input_signature: As for `to_tflite`.
        opset: The ONNX opset; None: tf2onnx's default.

    Returns:
        The model's bytes (`onnx.ModelProto.SerializeToString`). Its inputs take
        the spec names; its outputs come in the order of the flattened outputs.

    Raises:
        ExportError: An operation that tf2onnx cannot convert, or wrong arguments.
    """
    import logging

    onnx = optional_import("onnx")
    tf2onnx = optional_import("tf2onnx")

    with export_mode("onnx"):
        function, what = _traced(model, input_signature)
        signature = function.structured_input_signature[0]
        # Frozen here, not by tf2onnx: it would keep captured tensors that are not
        # variables (adapted statistics) as inputs.
        frozen = _frozen(function)
        _check_onnx_names(function, what)
        # Its rewriters log failed pattern matches as errors; what matters ends in
        # an exception or an unconverted node, checked below.
        tf2onnx_log = logging.getLogger("tf2onnx")
        level = tf2onnx_log.level
        tf2onnx_log.setLevel(logging.CRITICAL)
        try:
            with _stderr_captured():
                proto, _ = tf2onnx.convert.from_function(
                    _Traced(frozen), signature, opset=opset
                )
        except Exception as error:
            raise ExportError(
                f"{what} does not convert to ONNX: {_diagnosis.first_line(error)}"
            ) from None
        finally:
            tf2onnx_log.setLevel(level)
    unconverted = _diagnosis.unconverted_onnx_ops(proto)
    if unconverted:
        raise ExportError(
            f"{what} does not convert to ONNX: tf2onnx has no conversion for the "
            f"TensorFlow op(s) {', '.join(unconverted)}."
        )
    try:
        onnx.checker.check_model(proto)
    except onnx.checker.ValidationError as error:
        raise ExportError(
            f"{what} converted to an invalid ONNX model: {_diagnosis.first_line(error)}"
        ) from None
    return proto.SerializeToString()


def _check_onnx_names(function, what: str) -> None:
    """An ONNX graph names every tensor once: an output may not take an input's
    name (tf2onnx would rename the input away)."""
    import tensorflow as tf

    inputs = {
        spec.name for spec in tf.nest.flatten(function.structured_input_signature)
    }
    outputs = function.structured_outputs
    shared = sorted(inputs & set(outputs)) if isinstance(outputs, Mapping) else []
    if shared:
        raise ExportError(
            f"{what} has an output named like an input ({', '.join(shared)}), which "
            "ONNX cannot name twice: rename the output (e.g. 'next_state')."
        )


class _Traced:
    """A concrete function in the shape tf2onnx asks for (a `tf.function` whose
    `get_concrete_function` it calls)."""

    def __init__(self, function):
        self.function = function

    def get_concrete_function(self, *_):
        return self.function


def _traced(model, input_signature):
    """(The concrete function of `model`, traced now, outputs flattened; what it
    is, for messages)."""
    import keras
    import tensorflow as tf

    if isinstance(model, keras.Model):
        return _traced_keras(model, input_signature)
    if isinstance(model, tf.types.experimental.ConcreteFunction):
        if input_signature is not None:
            raise ExportError(
                "A concrete function has its signature already: pass "
                "input_signature=None, or pass the tf.function instead."
            )
        return model, f"function {model.name!r}"
    if isinstance(model, tf.types.experimental.PolymorphicFunction):
        signature = input_signature or model.input_signature
        python_function = model.python_function
    elif callable(model):
        signature, python_function = input_signature, model
    else:
        raise ExportError(
            f"Cannot export a {type(model).__name__}: pass a keras.Model, a "
            "tf.function or a Python function."
        )
    name = getattr(python_function, "__name__", "function")
    if signature is None:
        raise ExportError(
            f"Function {name!r} has no input signature: pass input_signature, a "
            "list of tf.TensorSpec (one per argument)."
        )
    arguments = _as_list(signature)

    def serve(*flat):
        args = keras.tree.pack_sequence_as(arguments, list(flat))
        return _flat_outputs(python_function(*args))

    # autograph as for any tf.function: the function may branch on tensors.
    traced = tf.function(serve, input_signature=_named_specs(arguments))
    return traced.get_concrete_function(), f"function {name!r}"


def _traced_keras(model, input_signature):
    import keras
    import tensorflow as tf

    what = f"Model {model.name!r}"
    _diagnosis.check_model(model, what)
    if input_signature is None:
        if not model.built or not getattr(model, "inputs", None):
            raise ExportError(
                f"{what} has no known inputs (never built, or subclassed): pass "
                "input_signature, e.g. [tf.TensorSpec((None, None, 8), 'float32')]."
            )
        try:
            structure = model.input  # a dict, a list or one input, as built
        except (AttributeError, ValueError):
            structure = model.inputs
        if isinstance(structure, (list, tuple)) and len(structure) == 1:
            structure = structure[0]
        arguments = [structure]
    else:
        # As for `Model.export`: one entry per positional argument of `call`; a
        # flat list of one spec per input of a multi-input model is taken too.
        arguments = _as_list(input_signature)
        inputs = getattr(model, "inputs", None) or []
        if len(arguments) > 1 and len(arguments) == len(inputs):
            arguments = [arguments]
    signature = _named_specs(arguments)

    def serve(*flat):
        args = keras.tree.pack_sequence_as(arguments, list(flat))
        return _flat_outputs(model(*args, training=False))

    traced = tf.function(serve, input_signature=signature, autograph=False)
    return traced.get_concrete_function(), what


def _frozen(function):
    """`function` with the values of its variables as constants, and its input
    names and output structure (dict keys) kept."""
    import tensorflow as tf

    constant = freeze_function(function)  # flat inputs -> flat outputs
    structure = function.structured_outputs

    def serve(*args):
        outputs = constant(*tf.nest.flatten(args))
        return tf.nest.pack_sequence_as(structure, outputs, expand_composites=True)

    signature = function.structured_input_signature[0]
    return tf.function(serve, input_signature=signature).get_concrete_function()


def _named_specs(arguments):
    """A `tf.TensorSpec` per input leaf of `arguments`, named after the input, its
    key in a dict, or "input_<i>", each name once."""
    import keras

    specs, seen = [], set()
    for position, (path, leaf) in enumerate(keras.tree.flatten_with_path(arguments)):
        spec = _to_spec(leaf)
        keys = [str(key) for key in path if isinstance(key, str)]
        name = spec.name or getattr(leaf, "name", None) or "_".join(keys)
        name = re.sub(r"\W", "_", name or "") or f"input_{position}"
        while name in seen:
            name += "_"
        seen.add(name)
        specs.append(type(spec)(spec.shape, spec.dtype, name=name))
    return specs


def _to_spec(value):
    """A `tf.TensorSpec` from a spec, a Keras tensor or input spec, or an array."""
    import tensorflow as tf

    if isinstance(value, tf.TensorSpec):
        return value
    shape, dtype = getattr(value, "shape", None), getattr(value, "dtype", None)
    if shape is None or dtype is None:
        raise ExportError(
            f"input_signature holds {value!r}: give tf.TensorSpec(shape, dtype) "
            "for each input."
        )
    return tf.TensorSpec(shape, tf.as_dtype(dtype), name=getattr(value, "name", None))


def _as_list(signature):
    return list(signature) if isinstance(signature, (list, tuple)) else [signature]


def _flat_outputs(outputs):
    """The outputs as one tensor, a tuple of tensors, or a flat dict by key."""
    import tensorflow as tf

    if isinstance(outputs, Mapping):
        flat = tf.nest.flatten(outputs)
        if len(flat) == len(outputs):
            return {str(key): value for key, value in sorted(outputs.items())}
    flat = tf.nest.flatten(outputs)
    return flat[0] if len(flat) == 1 else tuple(flat)


@contextlib.contextmanager
def _stderr_captured() -> Iterator[None]:
    """Keeps what the converters' native code writes to file descriptor 2 (the
    MLIR diagnostics of a failed conversion, which the error repeats) off the
    terminal."""
    try:
        saved = os.dup(2)
    except OSError:
        yield
        return
    with tempfile.TemporaryFile() as capture:
        os.dup2(capture.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)


__all__ = [
    "ExportError",
    "QUANTIZE",
    "export_mode",
    "run_onnx",
    "run_tflite",
    "to_onnx",
    "to_tflite",
]
