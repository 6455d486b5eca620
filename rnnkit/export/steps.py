"""One step at a time: the exported views of rnnkit's generative models.

- `language_model_step`: one step of a `LanguageModel`, token and states in,
  next-token logits and states out (streaming generation with any runtime);
- `transformer_language_model_step`: the same for a `TransformerLanguageModel`,
  whose state is its key/value cache, fixed-size tensors of `context_length`
  positions, and the token's position ("step");
- `decoder_signatures`: the encoder and one decoder step (attention included) of
  a model with the decoding interface of `rnnkit.decoding` (`EncoderDecoder`,
  `ImageCaptioner`, `TransformerEncoderDecoder`, whose state is its key/value
  cache, fixed-size, and the next position), so a client can run greedy or beam
  search; `encoder_decoder_endpoints` and `encoder_decoder_artefacts` make the
  SavedModel endpoints and the LiteRT / ONNX files of those two.

Each returns `(function, inputs, outputs)` (`decoder_signatures` one for the encoder
and one for the step): a TensorFlow-traceable function of named tensors and the
`rnnkit.export.Tensor`s it takes and gives. A state input
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
ZERO_STATE = "recurrent state, zeros at the start"


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


def _layer_step(layer: Any, index: int, units: int, hawk: bool):
    """The state inputs of one of a `LanguageModel`'s recurrent layers (a layer, or
    one of Hawk's blocks), and its step: (x, values) -> (x, {"next_NAME": state})."""
    cell = layer.recurrent.cell if hawk else layer.cell
    names = cell_state_names(cell, index)
    inputs = [Tensor(name, "float32", (None, units), ZERO_STATE) for name in names]
    conv_name = f"conv_{index}" if hawk and layer.conv_width > 1 else None
    if conv_name:
        inputs.append(
            Tensor(
                conv_name,
                "float32",
                (None, layer.conv_width - 1, units),
                "the convolution's last inputs, oldest first; zeros at the start",
            )
        )

    def step(x, values: dict) -> tuple[Any, dict]:
        states = [ops.cast(values[name], "float32") for name in names]
        if hawk:
            conv = values[conv_name] if conv_name else None
            x, conv, states = layer.step(x, conv, states)  # (batch, E)
        else:
            conv = None
            x, states = _cell_step(cell, x, states)  # (batch, units)
        nexts = dict(zip(names, states, strict=True))
        if conv_name:
            nexts[conv_name] = conv
        return x, {NEXT + name: ops.cast(v, "float32") for name, v in nexts.items()}

    return inputs, step


def language_model_step(model: Any) -> tuple[Callable, list[Tensor], list[Tensor]]:
    """One step of a `rnnkit.models.LanguageModel`.

    Inputs: "token" int32 (batch,), then each layer's states ("h_0", "c_0" for an
    LSTM, ...) float32 (batch, units), zeros at the start of a text; a model of
    Hawk's blocks (`block="hawk"`) also takes each block's convolution inputs
    "conv_0", ... float32 (batch, conv_width - 1, units), zeros at the start too.
    Outputs: "logits" float32 (batch, vocabulary) for the next token, and
    "next_h_0", ... (and "next_conv_0", ...).
    """
    hawk = getattr(model, "block", "none") == "hawk"
    layers = [
        _layer_step(layer, index, model.units, hawk)
        for index, layer in enumerate(model.recurrent_layers)
    ]

    def step(values: dict) -> dict:
        x = model.embedding(ops.cast(values["token"], "int32"))  # (batch, E)
        outputs = {}
        for _, layer_step in layers:
            x, nexts = layer_step(x, values)
            outputs.update(nexts)
        if hawk:
            x = model.final_norm(x)
        return {"logits": ops.cast(model.logits(x), "float32"), **outputs}

    state_inputs = [tensor for layer_inputs, _ in layers for tensor in layer_inputs]
    inputs = [Tensor("token", "int32", (None,), "the current token id"), *state_inputs]
    outputs = [
        Tensor("logits", "float32", (None, model.vocabulary_size), "next-token logits"),
        *[
            Tensor(NEXT + t.name, "float32", t.shape, f"{t.name} after this token")
            for t in state_inputs
        ],
    ]
    return step, inputs, outputs


def transformer_language_model_step(
    model: Any,
) -> tuple[Callable, list[Tensor], list[Tensor]]:
    """One step of a `rnnkit.models.TransformerLanguageModel` through its key/value
    cache, of fixed size: `model.context_length` positions.

    Inputs: "token" int32 (batch,), "step" int32 (batch,), the token's position
    (0 at the start of a text, the same in every row), and per block i the cache
    "key_i" and "value_i" float32 (batch, heads, context_length, model_dim / heads)
    and "written_i" int32 (batch, context_length), all zeros at the start of a
    text. Outputs: "logits" float32 (batch, vocabulary) for the next token,
    "next_step" and "next_key_i", "next_value_i", "next_written_i". A step costs
    one pass of one token, O(context_length) whatever the position; a text longer
    than `context_length` tokens restarts from zeros with its last tokens fed
    again (as the recipe's generation does).
    """
    blocks = len(model.blocks)
    parts = ("key", "value", "written")

    def step(values: dict) -> dict:
        position = ops.cast(values["step"], "int32")  # (batch,)
        caches = [
            {
                "key": ops.cast(values[f"key_{i}"], model.compute_dtype),
                "value": ops.cast(values[f"value_{i}"], model.compute_dtype),
                "written": ops.cast(values[f"written_{i}"], "int32"),
            }
            for i in range(blocks)
        ]
        token = ops.cast(values["token"], "int32")[:, None]  # (batch, 1)
        logits, caches = model.decode(token, caches, position[0])
        outputs = {
            "logits": ops.cast(logits[:, 0], "float32"),  # (batch, vocabulary)
            "next_step": position + 1,
        }
        for i, cache in enumerate(caches):
            for part in parts:
                dtype = "int32" if part == "written" else "float32"
                outputs[f"{NEXT}{part}_{i}"] = ops.cast(cache[part], dtype)
        return outputs

    length = model.context_length
    heads = model.num_heads
    key_dim = model.model_dim // heads
    cache_inputs = []
    for i in range(blocks):
        cache_inputs += [
            Tensor(
                f"key_{i}",
                "float32",
                (None, heads, length, key_dim),
                f"block {i}'s self-attention keys by position, zeros at the start",
            ),
            Tensor(
                f"value_{i}",
                "float32",
                (None, heads, length, key_dim),
                f"block {i}'s self-attention values by position, zeros at the start",
            ),
            Tensor(
                f"written_{i}",
                "int32",
                (None, length),
                "1 at the positions read so far, zeros at the start",
            ),
        ]
    position = Tensor(
        "step",
        "int32",
        (None,),
        f"the token's position, 0 at the start of a text (below {length})",
    )
    inputs = [
        Tensor("token", "int32", (None,), "the current token id"),
        position,
        *cache_inputs,
    ]
    outputs = [
        Tensor("logits", "float32", (None, model.vocabulary_size), "next-token logits"),
        *[
            Tensor(NEXT + t.name, t.dtype, t.shape, f"{t.name} after this token")
            for t in (position, *cache_inputs)
        ],
    ]
    return step, inputs, outputs


def _specs(
    function: Callable, inputs: list[Tensor], docs: dict, example: dict | None
) -> list[Tensor]:
    """The outputs of `function` in the order of `docs` ({output name: what it
    holds}): their dtypes and shapes from one eager call on `example` (inputs of
    fixed shape past the batch: every output's shape is fixed too, which a
    TensorFlow trace does not always see through a loop), else as TensorFlow
    traces them on `inputs` (None where a size follows a dynamic input)."""
    import tensorflow as tf

    if example is not None:
        outputs = function(dict(example))
        shapes = {name: (None, *tuple(outputs[name].shape)[1:]) for name in docs}
    else:
        outputs = (
            tf.function(
                lambda values: dict(function(dict(values))),
                input_signature=[{t.name: t.spec() for t in inputs}],
                autograph=False,
            )
            .get_concrete_function()
            .structured_outputs
        )
        shapes = {name: tuple(outputs[name].shape.as_list()) for name in docs}
    return [
        Tensor(name, tf.as_dtype(outputs[name].dtype).name, shapes[name], doc)
        for name, doc in docs.items()
    ]


def _initial_state(model: Any, memory: dict, max_length: Any) -> Any:
    """`model.initial_decoder_state(memory)`, with `max_length` slots for a model
    whose state holds one per generated token (a Transformer's cache)."""
    import inspect

    parameters = inspect.signature(model.initial_decoder_state).parameters
    if "max_length" not in parameters:
        return model.initial_decoder_state(memory)
    if max_length is None:
        raise ValueError(
            f"{type(model).__name__}'s decoder state holds one slot per generated "
            "token: give decoder_signatures max_length (the search's length bound)"
        )
    return model.initial_decoder_state(memory, max_length=max_length)


def _as_float32(tensor: Any) -> Any:
    """Floating tensors as float32 (mixed precision's float16 states included);
    integer and boolean ones (a cache's positions) as they are."""
    import keras

    dtype = keras.backend.standardize_dtype(tensor.dtype)
    return ops.cast(tensor, "float32") if "float" in dtype else tensor


def decoder_signatures(
    model: Any,
    source: Tensor,
    example_source: Any,
    max_length: int | Callable[[Any], Any] | None = None,
) -> tuple[Callable, list[Tensor], list[Tensor], Callable, list[Tensor], list[Tensor]]:
    """The encoder and the one-step decoder of a model with the decoding interface
    (`encode`, `initial_decoder_state`, `decode_step`).

    The encoder takes `source` and returns the memory the decoder reads
    ("memory_values", "memory_keys", ...: only the entries `decode_step` uses; a
    list entry such as a Transformer's "cross_keys" as "memory_cross_keys_0",
    "memory_cross_keys_1", ...) and the decoder's first state ("state_0", ...:
    every tensor of `initial_decoder_state`, flattened with dict keys in sorted
    order; each one's doc names its place in the state, e.g. "caches/0/key"). The
    step takes "token" int32 (batch,), the state and the memory, and returns
    "logits" (batch, vocabulary),
    "attention" (batch, positions) and "next_state_0", ...

    A Transformer's state is its self-attention key/value cache, of fixed size
    (`max_length` positions per block: "caches/i/key", "caches/i/value",
    "caches/i/written") and the position of the next token ("step", int32
    (batch,)), so each step costs the same whatever its position.

    Args:
        model: the model.
        source: the encoder's input; its shape is kept (a fixed source length for
            LiteRT's loops, or None).
        example_source: a batch of one source shaped as `source` (its fixed
            length, if any), to learn which memory entries the step reads, and
            for a fixed length every shape, from eager calls.
        max_length: for a model whose state holds one slot per generated token
            (`initial_decoder_state(memory, max_length)`), the slots: an int, or
            a function of the source ids returning one (the search's length
            bound for their padded width). Ignored for other models.
    """
    import keras

    def slots(source_ids):
        return max_length(source_ids) if callable(max_length) else max_length

    memory = model.encode(example_source, training=False)
    state = _initial_state(model, memory, slots(example_source))
    token = ops.ones((1,), "int32")
    needed = []
    for key in sorted(memory):
        partial = {k: v for k, v in memory.items() if k != key}
        try:
            model.decode_step(token, state, partial, training=False)
        except KeyError:
            needed.append(key)

    def memory_names(key):
        if isinstance(memory[key], (list, tuple)):
            return [f"memory_{key}_{i}" for i in range(len(memory[key]))]
        return [f"memory_{key}"]

    def flat_memory(memory):
        flat = {}
        for key in needed:
            values = memory[key]
            values = values if isinstance(values, (list, tuple)) else [values]
            flat.update(zip(memory_names(key), values, strict=True))
        return flat

    state_paths = [
        "/".join(str(key) for key in path)
        for path, _ in keras.tree.flatten_with_path(state)
    ]
    state_names = [f"state_{i}" for i in range(len(state_paths))]

    def encode(values: dict) -> dict:
        source_ids = values[source.name]
        memory = model.encode(source_ids, training=False)
        state = keras.tree.flatten(_initial_state(model, memory, slots(source_ids)))
        return {
            **flat_memory(memory),
            **{
                name: _as_float32(s) for name, s in zip(state_names, state, strict=True)
            },
        }

    def step(values: dict) -> dict:
        memory = {}
        for key in needed:
            entries = [values[name] for name in memory_names(key)]
            listed = isinstance(state_memory[key], (list, tuple))
            memory[key] = entries if listed else entries[0]
        state = keras.tree.pack_sequence_as(
            state_template, [values[name] for name in state_names]
        )
        token = ops.cast(values["token"], "int32")
        logits, state, weights = model.decode_step(token, state, memory)
        outputs = {
            "logits": ops.cast(logits, "float32"),
            "attention": ops.cast(weights, "float32"),
        }
        for name, tensor in zip(state_names, keras.tree.flatten(state), strict=True):
            outputs[NEXT + name] = _as_float32(tensor)
        return outputs

    state_template, state_memory = state, memory
    memory_docs = {
        name: f"the encoder's {key!r}, as the encoder returned it"
        for key in needed
        for name in memory_names(key)
    }
    state_docs = {
        name: f"decoder state {path!r}"
        for name, path in zip(state_names, state_paths, strict=True)
    }
    fixed = all(size is not None for size in source.shape[1:])
    example = {source.name: example_source} if fixed else None
    encoder_outputs = _specs(encode, [source], {**memory_docs, **state_docs}, example)
    if fixed:
        example = {**encode(example), "token": ops.ones((1,), "int32")}
    step_inputs = [
        Tensor("token", "int32", (None,), "the previous token (start id first)"),
        *[t for t in encoder_outputs if t.name in state_docs],
        *[t for t in encoder_outputs if t.name in memory_docs],
    ]
    step_outputs = _specs(
        step,
        step_inputs,
        {
            "logits": "next-token logits",
            "attention": "attention weights",
            **{NEXT + name: f"{name} for the next step" for name in state_names},
        },
        example,
    )
    return encode, [source], encoder_outputs, step, step_inputs, step_outputs


def encoder_decoder_endpoints(signatures: tuple, encoder_doc: str) -> list:
    """The SavedModel's `encode` and `decoder_step` endpoints from
    `decoder_signatures`' six values (a recipe adds its end-to-end one first)."""
    from rnnkit.export.plan import Endpoint

    encode, e_in, e_out, step, s_in, s_out = signatures
    return [
        Endpoint("encode", encode, e_in, e_out, encoder_doc),
        Endpoint("decoder_step", step, s_in, s_out, "one decoder step"),
    ]


def encoder_decoder_artefacts(model, signatures: tuple, encoder_doc: str) -> list:
    """The LiteRT / ONNX files `encoder` and `decoder_step` from
    `decoder_signatures`' six values: a client runs its own greedy or beam search
    over them (`rnnkit.export.clients.greedy_decode`)."""
    from rnnkit.export.plan import Artefact
    from rnnkit.export.signature import SignatureModel

    encode, e_in, e_out, step, s_in, s_out = signatures
    return [
        Artefact(
            "encoder",
            SignatureModel(encode, [model], name="encoder"),
            e_in,
            e_out,
            encoder_doc,
        ),
        Artefact(
            "decoder_step",
            SignatureModel(step, [model], name="decoder_step"),
            s_in,
            s_out,
            "the previous token, state and memory in; logits and next state out",
        ),
    ]
