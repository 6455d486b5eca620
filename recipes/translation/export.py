"""What the exported translation model takes and returns (`rnnkit export RUN_DIR`).

SavedModel, signature `translate` (also `serving_default`), greedy decoding inside
(a `tf.while_loop`):

    text         string (batch,): source sentences, raw
 -> translation  string (batch,): detokenized greedy translations
    token_ids    int32 (batch, steps): the generated target ids, end token included

Its text handling is the recipe's, in graph ops (`rnnkit.export.text`); Unicode
normalisation and SentencePiece are TensorFlow Text ops, so load it after
`import tensorflow_text`. The SavedModel also has `encode` and `decoder_step`, the
two signatures below with any source length.

LiteRT and ONNX: two files, so that a client runs greedy or beam search itself
(`rnnkit.export.clients.greedy_decode` is the greedy loop):

- `encoder`: `source_ids` int32 (batch, source_length), right-padded with 0 (an
  empty sentence is the one id 1, unknown) -> the memory the decoder attends over
  (`memory_values`, `memory_keys`, `memory_mask`, ...) and its first state
  (`state_0`, ...);
- `decoder_step`: `token` int32 (batch,) (the start id 2 first), the state and the
  memory -> `logits` (batch, target vocabulary), `attention` (batch,
  source_length) and `next_state_0`, ... for the next step.

A Transformer run (`model.architecture = "transformer"`) exports the same files
and signatures. Its memory is the encoder's outputs and mask with every decoder
block's cross-attention keys and values (`memory_cross_keys_0`, ...,
`memory_cross_values_0`, ...), computed once per sentence; its state is the
self-attention key/value cache of fixed size, so that a step costs the same at
every position: per decoder block i, in `tf.nest` order, keys and values float32
(batch, heads, max_steps, model_dim / heads) and "written" int32 (batch, max_steps),
1 at the positions generated so far, then the next position, int32 (batch,)
(`state_0` ... `state_{3 x blocks}`; each input's doc in export.json names its
part). `max_steps` (export.json's notes; in the SavedModel's `encode`, from the
source's padded width) is the recipe's length bound,
`ceil(max_length_ratio x source_length) + max_length_offset + 1`: a client
generates at most that many tokens. The encoder returns the empty cache and
position 0, so `rnnkit.export.clients.greedy_decode` drives both architectures
unchanged.

The vocabularies are written beside them (`source_vocabulary.txt`,
`target_vocabulary.txt`, line i = id i) with, for subword vocabularies, the
SentencePiece models (`source.model`, `target.model`) that encode words to piece ids
(`rnnkit.data.parallel_text.tokenize` makes the words).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

TRANSFORMER_STATE = (
    "state_0 .. state_{3L-1}: per decoder block i, the self-attention cache "
    "caches/i/key and caches/i/value float32 (batch, heads, max_steps, key_dim) and "
    "caches/i/written int32 (batch, max_steps); state_{3L}: step int32 (batch,), "
    "the next position; the encoder's outputs are the empty cache and step 0"
)

if TYPE_CHECKING:
    import keras
    from rnnkit_recipes.translation.config import TranslationConfig

    from rnnkit.export import ExportPlan


def export_plan(
    model: keras.Model, config: TranslationConfig, format: str
) -> ExportPlan:
    import tensorflow as tf
    from keras import ops
    from rnnkit_recipes.translation.data import text_options
    from rnnkit_recipes.translation.decode import search_options
    from rnnkit_recipes.translation.recipe import _saved_tokenizer

    from rnnkit.data.parallel_text import (
        PAD_ID,
        UNK_ID,
        SubwordVocabulary,
    )
    from rnnkit.decoding import greedy_loop
    from rnnkit.export import Endpoint, ExportError, ExportPlan, Tensor
    from rnnkit.export.steps import (
        decoder_signatures,
        encoder_decoder_artefacts,
        encoder_decoder_endpoints,
    )
    from rnnkit.export.text import GraphVocabulary, words

    if model.source_tokens is None or model.target_tokens is None:
        raise ExportError(
            "this run's model holds no vocabularies (token lists); it cannot be "
            "exported with its text handling"
        )
    transformer = getattr(model, "architecture", "rnn") == "transformer"
    tokenizer = _saved_tokenizer(model, config)
    subword = tokenizer == "subword"
    options = text_options(config)
    search = search_options(config)
    files = {
        "source_vocabulary.txt": "\n".join(model.source_tokens) + "\n",
        "target_vocabulary.txt": "\n".join(model.target_tokens) + "\n",
    }
    if subword:
        files["source.model"] = SubwordVocabulary(model.source_tokens).model_proto()
        files["target.model"] = SubwordVocabulary(model.target_tokens).model_proto()
    notes = {
        "tokenizer": tokenizer,
        "unicode_form": options.unicode_form,
        "lowercase": options.lowercase,
        "split_punctuation": options.split_punctuation,
        "unknown_id": UNK_ID,
        # The special ids and length limits of the recipe's searches (start_id,
        # end_id, pad_id, suppress_ids, max_length_ratio, max_length_offset).
        **search,
    }
    plan = ExportPlan(recipe="translation", files=files, notes=notes)

    if format == "saved_model":
        source = GraphVocabulary(
            model.source_tokens, files.get("source.model") if subword else None
        )
        target = GraphVocabulary(
            model.target_tokens,
            files.get("target.model") if subword else None,
            encodes=False,
        )

        def translate(values: dict) -> dict:
            tokens = words(
                values["text"],
                options.unicode_form,
                options.lowercase,
                options.split_punctuation,
            )
            ids = source.encode(tokens)  # ragged (batch, None)
            lengths = ids.row_lengths()
            width = tf.maximum(tf.reduce_max(tf.concat([lengths, [1]], 0)), 1)
            dense = tf.pad(ids.to_tensor(PAD_ID), [[0, 0], [0, 1]])[:, :width]
            # A sentence without tokens still has one, unknown (as `search` does).
            first = tf.where(tf.equal(lengths, 0), UNK_ID, dense[:, 0])
            dense = tf.concat([first[:, None], dense[:, 1:]], axis=1)
            result = greedy_loop(model, dense, **search)
            token_ids = ops.cast(result["tokens"][:, 0], "int32")  # (batch, steps)
            return {"translation": target.decode(token_ids), "token_ids": token_ids}

        source_spec = Tensor(
            "source_ids", "int32", (None, None), "source token ids, right-padded"
        )
        signatures = decoder_signatures(
            model, source_spec, ops.ones((1, 3), "int32"), decode_length(search)
        )
        plan.endpoints = [
            Endpoint(
                "translate",
                translate,
                [Tensor("text", "string", (None,), "source sentences")],
                [
                    Tensor("translation", "string", (None,), "greedy translations"),
                    Tensor("token_ids", "int32", (None, None), "generated ids"),
                ],
                "source sentences in, greedy translations out",
            ),
            *encoder_decoder_endpoints(signatures, "the encoder"),
        ]
        plan.track = [model, *source.resources(), *target.resources()]
        return plan

    length = config.data.max_length or 50
    source_spec = Tensor(
        "source_ids",
        "int32",
        (None, length),
        "source token ids, right-padded with 0 to this length",
    )
    signatures = decoder_signatures(
        model, source_spec, ops.ones((1, length), "int32"), decode_length(search)
    )
    plan.notes["source_length"] = length
    if transformer:
        plan.notes["max_steps"] = decode_length(search)(ops.ones((1, length)))
        plan.notes["decoder_state"] = TRANSFORMER_STATE
    plan.artefacts = encoder_decoder_artefacts(
        model, signatures, "source ids in, the decoder's memory and first state out"
    )
    return plan


def decode_length(search: dict):
    """The most tokens the recipe's searches generate for source ids of a padded
    width, `ceil(max_length_ratio * width) + max_length_offset + 1` (the bound of
    `rnnkit.decoding`'s buffers): the slots of a Transformer's cache. A function of
    the source ids: an int for a fixed width, a tensor for a dynamic one."""
    import math

    from keras import ops

    ratio, offset = search["max_length_ratio"], search["max_length_offset"]

    def slots(source_ids):
        width = source_ids.shape[1]
        if width is None:  # a SavedModel signature's dynamic width
            width = ops.cast(ops.shape(source_ids)[1], "float32")
            return ops.cast(ops.ceil(ratio * width), "int32") + offset + 1
        return math.ceil(ratio * width) + offset + 1

    return slots
