"""What cannot be exported, said in one line: the checks of a model before it is
converted, and the reading of a converter's failure after (`rnnkit.export.convert`).
"""

from __future__ import annotations

import re

from rnnkit.export.errors import ExportError

# Keras' recurrent layers whose rnnkit namesakes take their weights and convert.
NAMESAKES = ("SimpleRNN", "LSTM", "GRU")


def _layers(model) -> list:
    """`model` and every layer inside it, at any depth."""
    from rnnkit._keras_private import nested_layers

    return [model, *nested_layers(model)]


def check_model(model, what: str) -> None:
    """An `ExportError` for a Keras model no converted file can reproduce: a
    stateful recurrent layer (its state lives in variables that the file cannot
    update) or a layer that computes in float16 or bfloat16 (the converters take
    float32 graphs)."""
    layers = _layers(model)
    for layer in layers:
        if getattr(layer, "stateful", False):
            raise ExportError(
                f"{what} cannot be exported: layer {layer.name!r} is stateful, and a "
                "converted model cannot carry state from call to call; rebuild it "
                "with stateful=False and return_state=True (the state in and out "
                "as tensors), then set_weights."
            )
    for layer in layers:
        dtype = getattr(layer, "compute_dtype", "float32")
        if dtype in ("float16", "bfloat16"):
            raise ExportError(
                f"{what} cannot be exported: layer {layer.name!r} computes in "
                f"{dtype}; build the same model under the float32 policy "
                "(keras.config.set_dtype_policy('float32')), set_weights, and "
                "export that (quantize='float16' makes the LiteRT weights small)."
            )


def keras_recurrent_advice(model) -> str | None:
    """What to use instead of the Keras recurrent layers inside `model` (None:
    there are none)."""
    import keras

    from rnnkit.layers import RecurrentLayer

    found = sorted(
        {
            type(layer).__name__
            for layer in _layers(model)
            if isinstance(layer, keras.layers.RNN)
            and not isinstance(layer, RecurrentLayer)
        }
    )
    if not found:
        return None
    namesakes = [name for name in found if name in NAMESAKES]
    others = [name for name in found if name not in NAMESAKES]
    advice = [f"rnnkit.layers.{name} for keras.layers.{name}" for name in namesakes]
    advice += [
        f"rnnkit.layers.SimpleRNN, LSTM or GRU for keras.layers.{name} of a cell"
        for name in others
    ]
    return (
        f"use {'; '.join(advice)} (they take the Keras weights through "
        "set_weights, and convert)"
    )


def tflite_failure(what: str, model, error: BaseException) -> str:
    """One line: which operations have no LiteRT builtin, and what to do."""
    import keras

    text = str(error)
    ops = sorted(set(re.findall(r"'(tf\.\w+)' op", text)))
    ops += sorted(set(re.findall(r"\bFlex(\w+)", text)) - {op[3:] for op in ops})
    if re.search(r"Assign\w*VariableOp", text):
        needs = (
            "it updates a variable (a stateful layer, a random generator), which "
            "a converted model cannot"
        )
    elif ops:
        needs = f"it needs TensorFlow op(s) {', '.join(ops[:4])}" + (
            " ..." if len(ops) > 4 else ""
        )
    else:
        needs = first_line(error)
    advice = keras_recurrent_advice(model) if isinstance(model, keras.Model) else None
    if advice is None and any("TensorList" in op for op in ops):
        advice = (
            "a loop keeps a tf.TensorArray of unknown batch size (tf.map_fn, "
            "tf.scan, a Keras recurrent layer): loop with rnnkit.layers instead"
        )
    if advice is None:
        advice = (
            "replace that operation, or convert it yourself with Select TF ops "
            "(tf.lite.OpsSet.SELECT_TF_OPS), which need the TensorFlow runtime "
            "inside LiteRT"
        )
    return f"{what} does not convert to LiteRT with builtin ops: {needs}; {advice}."


def unconverted_onnx_ops(proto) -> list[str]:
    """The operations tf2onnx left as TensorFlow ops (it keeps what it cannot
    convert, `continue_on_error`): every node outside ONNX's own domains."""
    return sorted(
        {
            node.op_type
            for node in _all_nodes(proto.graph)
            if node.domain not in ("", "ai.onnx", "ai.onnx.ml")
        }
    )


def _all_nodes(graph):
    """Every node of an ONNX graph, those of its subgraphs (a Loop's body)
    included."""
    for node in graph.node:
        yield node
        for attribute in node.attribute:
            if attribute.g.node:
                yield from _all_nodes(attribute.g)
            for subgraph in attribute.graphs:
                yield from _all_nodes(subgraph)


def first_line(error: BaseException) -> str:
    text = str(error).strip() or type(error).__name__
    return text.splitlines()[0]
