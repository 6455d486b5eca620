"""One step at a time: the exported views of rnnkit's generative models.

- `language_model_step`: one step of a `LanguageModel`, token and states in,
  next-token logits and states out (streaming generation with any runtime);
- `encoder_signature` / `decoder_step_signature`: the encoder and one decoder step
  (attention included) of a model with the decoding interface of `rnnkit.decoding`
  (`EncoderDecoder`, `ImageCaptioner`), so a client can run greedy or beam search;
- `greedy_tokens`: greedy search as a TensorFlow graph (a `tf.while_loop` through
  `rnnkit.decoding.greedy_loop`), for the SavedModels' end-to-end signatures.

Each function returns `(function, inputs, outputs)`: a TensorFlow-traceable function
of named tensors and the `rnnkit.export.Tensor`s it takes and gives. A state input
NAME comes back as the output "next_NAME" (ONNX does not let an output share an
input's name), which `rnnkit.export.clients.greedy_decode` feeds to the next step.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from keras import ops

from rnnkit.export.plan import Tensor
from rnnkit.models._recurrent import states_per_cell

NEXT = "next_"


def cell_state_names(cell: Any, index: int) -> list[str]:
    """Names of a cell's states: "h_0", "c_0" for the first LSTM cell, "h_1" for a
    second GRU cell, ..."""
    count = states_per_cell(cell)
    letters = ["h", "c"] if count == 2 else ["h"] if count == 1 else None
    if letters is None:
        letters = [f"state{j}" for j in range(count)]
    return [f"{letter}_{index}" for letter in letters]


def _cell_step(cell, x, states):
    """One step of an rnnkit cell from its `gate_weights()` (no dropout); states
    stay in the dtype they came in (float32)."""
    x = cell.augment_inputs(ops.cast(x, cell.compute_dtype))  # [x_t, 1]
    return cell.step(x, list(states), cell.gate_weights())


def language_model_step(model: Any) -> tuple[Callable, list[Tensor], list[Tensor]]:
    """One step of a `rnnkit.models.LanguageModel`.

    Inputs: "token" int32 (batch,), then each layer's states ("h_0", "c_0" for an
    LSTM, ...) float32 (batch, units), zeros at the start of a text. Outputs:
    "logits" float32 (batch, vocabulary) for the next token, and "next_h_0", ...
    """
    names = [
        cell_state_names(layer.cell, index)
        for index, layer in enumerate(model.recurrent_layers)
    ]

    def step(values: dict) -> dict:
        x = model.embedding(ops.cast(values["token"], "int32"))  # (batch, E)
        outputs = {}
        for layer, layer_names in zip(model.recurrent_layers, names, strict=True):
            states = [ops.cast(values[name], "float32") for name in layer_names]
            x, states = _cell_step(layer.cell, x, states)  # (batch, units)
            for name, state in zip(layer_names, states, strict=True):
                outputs[NEXT + name] = ops.cast(state, "float32")
        return {"logits": ops.cast(model.logits(x), "float32"), **outputs}

    units = model.units
    state_inputs = [
        Tensor(name, "float32", (None, units), "recurrent state, zeros at the start")
        for layer_names in names
        for name in layer_names
    ]
    inputs = [Tensor("token", "int32", (None,), "the current token id"), *state_inputs]
    outputs = [
        Tensor("logits", "float32", (None, model.vocabulary_size), "next-token logits"),
        *[
            Tensor(NEXT + t.name, "float32", t.shape, f"{t.name} after this token")
            for t in state_inputs
        ],
    ]
    return step, inputs, outputs


def _spec_of(name: str, tensor: Any, doc: str, dynamic_axes: int) -> Tensor:
    """A Tensor named `name` shaped like `tensor` past its first `dynamic_axes`."""
    shape = tuple(tensor.shape)
    import keras

    dtype = keras.backend.standardize_dtype(tensor.dtype)
    return Tensor(name, dtype, (None,) * dynamic_axes + shape[dynamic_axes:], doc)


def decoder_signatures(
    model: Any,
    source: Tensor,
    example_source: Any,
    memory_axes: dict[str, int] | None = None,
) -> tuple[Callable, list[Tensor], list[Tensor], Callable, list[Tensor], list[Tensor]]:
    """The encoder and the one-step decoder of a model with the decoding interface
    (`encode`, `initial_decoder_state`, `decode_step`).

    The encoder takes `source` and returns the memory the decoder reads
    ("memory_values", "memory_keys", ...: only the entries `decode_step` uses) and
    the decoder's first state ("state_0", ...: every tensor of
    `initial_decoder_state`, flattened). The step takes "token" int32 (batch,), the
    state and the memory, and returns "logits" (batch, vocabulary), "attention"
    (batch, positions) and "next_state_0", ...

    Args:
        model: the model.
        source: the encoder's input; its shape is kept (a fixed source length for
            LiteRT's loops, or None).
        example_source: a batch of one source shaped as `source` (its fixed
            length, if any), to learn the memory's and the state's structure,
            dtypes and shapes from one eager call.
        memory_axes: {memory key: leading axes of any size} for the returned
            shapes; default 2 (batch, positions) when the source length is not
            fixed, else 1.
    """
    import tensorflow as tf

    memory = model.encode(example_source, training=False)
    state = model.initial_decoder_state(memory)
    flat_state = tf.nest.flatten(state)
    token = ops.ones((1,), "int32")
    needed = []
    for key in sorted(memory):
        partial = {k: v for k, v in memory.items() if k != key}
        try:
            model.decode_step(token, state, partial, training=False)
        except KeyError:
            needed.append(key)
    fixed = source.shape[1] is not None if len(source.shape) > 1 else True
    axes = memory_axes or {}
    memory_specs = [
        _spec_of(
            f"memory_{key}",
            memory[key],
            f"the encoder's {key!r}, as the encoder returned it",
            axes.get(key, 1 if fixed else 2),
        )
        for key in needed
    ]
    state_specs = [
        _spec_of(f"state_{i}", s, "decoder state", 1) for i, s in enumerate(flat_state)
    ]

    def encode(values: dict) -> dict:
        memory = model.encode(values[source.name], training=False)
        state = tf.nest.flatten(model.initial_decoder_state(memory))
        return {
            **{f"memory_{key}": memory[key] for key in needed},
            **{f"state_{i}": ops.cast(s, "float32") for i, s in enumerate(state)},
        }

    def step(values: dict) -> dict:
        memory = {key: values[f"memory_{key}"] for key in needed}
        state = tf.nest.pack_sequence_as(
            state_template, [values[t.name] for t in state_specs]
        )
        token = ops.cast(values["token"], "int32")
        logits, state, weights = model.decode_step(token, state, memory)
        outputs = {
            "logits": ops.cast(logits, "float32"),
            "attention": ops.cast(weights, "float32"),
        }
        for index, tensor in enumerate(tf.nest.flatten(state)):
            outputs[f"{NEXT}state_{index}"] = ops.cast(tensor, "float32")
        return outputs

    state_template = state
    vocabulary = int(model.decode_step(token, state, memory)[0].shape[-1])
    positions = memory_specs[0].shape[1] if memory_specs else None
    step_inputs = [
        Tensor("token", "int32", (None,), "the previous token (start id first)"),
        *state_specs,
        *memory_specs,
    ]
    step_outputs = [
        Tensor("logits", "float32", (None, vocabulary), "next-token logits"),
        Tensor("attention", "float32", (None, positions), "attention weights"),
        *[
            Tensor(NEXT + t.name, "float32", t.shape, f"{t.name} for the next step")
            for t in state_specs
        ],
    ]
    return (
        encode,
        [source],
        [*memory_specs, *state_specs],
        step,
        step_inputs,
        step_outputs,
    )
