"""What the exported language model takes and returns (`rnnkit export RUN_DIR`).

One step, for streaming generation, in every format (SavedModel signature `step`,
also `serving_default`; LiteRT / ONNX file `step`):

    token        int32 (batch,): the current token id (`vocabulary.json`, position
                 = id; an unknown token is id 0, `<unk>`)
    h_0 [, c_0]  float32 (batch, units) per layer (an LSTM has h and c, a GRU h):
                 the states, zeros at the start of a text
    conv_0 ...   float32 (batch, conv_width - 1, units) per block, only in a model
                 of Hawk's blocks (notes: block "hawk"): each block's last
                 convolution inputs, oldest first, zeros at the start of a text
 -> logits       float32 (batch, vocabulary): the next token's logits
    next_h_0 ... the states after this token, fed back as h_0 ... at the next step

A Transformer run (`model.architecture = "transformer"`) carries its key/value
cache instead, fixed-size tensors of `context_length` (`train.bptt`) positions, so
a step costs the same at every position:

    token        int32 (batch,): the current token id
    step         int32 (batch,): its position in the text, 0 first (the same in
                 every row; below context_length)
    key_i, value_i  float32 (batch, heads, context_length, model_dim / heads) per
                 block i: its self-attention keys and values by position
    written_i    int32 (batch, context_length): 1 at the positions read so far
                 (all these zeros at the start of a text)
 -> logits       float32 (batch, vocabulary)
    next_step, next_key_0, ...: fed back as step, key_0, ... at the next token

A text longer than `context_length` tokens starts again from zeros, its last
tokens fed again from position 0 (the recipe's generation keeps the last
`context_length // 2`). The notes give `architecture`, `context_length`, `layers`,
`num_heads` and `model_dim`.

The SavedModel also has `logits`: token ids (batch, time) in, logits
(batch, time, vocabulary) out from a zero state (scoring a whole text; a
Transformer reads at most `context_length` tokens). The vocabulary is written as
`vocabulary.json` (a JSON list: character tokens include the line break); how the
recipe cuts text into tokens is in export.json's notes.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import keras
    from rnnkit_recipes.language_model.config import LanguageModelConfig

    from rnnkit.export import ExportPlan

VOCABULARY_FILE = "vocabulary.json"


def export_plan(
    model: keras.Model, config: LanguageModelConfig, format: str
) -> ExportPlan:
    from keras import ops
    from rnnkit_recipes.language_model.data import EOS, UNK

    from rnnkit.export import Artefact, Endpoint, ExportPlan, Tensor
    from rnnkit.export.signature import SignatureModel
    from rnnkit.export.steps import (
        language_model_step,
        transformer_language_model_step,
    )

    transformer = getattr(model, "architecture", "rnn") == "transformer"
    if transformer:
        # No state between calls: the step's is its key/value cache.
        stateless = model
        step, inputs, outputs = transformer_language_model_step(model)
        architecture = {
            "architecture": "transformer",
            "layers": model.num_layers,
            "context_length": model.context_length,
            "num_heads": model.num_heads,
            "model_dim": model.model_dim,
        }
    else:
        # The step passes its states in and out as tensors: it is built on a
        # stateless copy (same weights), which the converters accept.
        stateless = model.with_batch_size(None, stateful=False)
        step, inputs, outputs = language_model_step(stateless)
        architecture = {
            "architecture": "rnn",
            "block": model.block,
            "cell_type": model.cell_type,
            "layers": model.num_layers,
            "units": model.units,
        }

    def sequence_logits(values: dict) -> dict:
        ids = ops.cast(values["ids"], "int32")
        return {"logits": ops.cast(stateless(ids, training=False), "float32")}

    ids = Tensor("ids", "int32", (None, None), "token ids, from a zero state")
    logits = Tensor(
        "logits",
        "float32",
        (None, None, model.vocabulary_size),
        "the next token's logits at every position",
    )
    doc = "one step: token and states in, next-token logits and states out"
    return ExportPlan(
        recipe="language_model",
        endpoints=[
            Endpoint("step", step, inputs, outputs, doc),
            Endpoint(
                "logits",
                sequence_logits,
                [ids],
                [logits],
                "a whole text in, next-token logits at every position out",
            ),
        ],
        artefacts=[
            Artefact(
                "step",
                SignatureModel(step, [stateless], name="language_model_step"),
                inputs,
                outputs,
                doc,
            )
        ],
        files={VOCABULARY_FILE: json.dumps(list(model.tokens), ensure_ascii=False)},
        track=[model] if transformer else [model, stateless],
        notes={
            "level": config.data.level,
            "lowercase": config.data.lowercase,
            "standardize": config.data.standardize,
            "unknown_token": UNK,
            "end_of_line_token": EOS if config.data.level == "word" else None,
            **architecture,
        },
    )
