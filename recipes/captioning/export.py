"""What the exported captioning model takes and returns (`rnnkit export RUN_DIR`).

Every format takes images, never cached features: the CNN encoder is in the exported
model, also for a run that trained a frozen encoder on its feature store.

SavedModel, signature `caption` (also `serving_default`), greedy decoding inside
(a `tf.while_loop`):

    image      string (batch,): encoded images (JPEG, PNG, GIF, BMP), any size
 -> caption    string (batch,): the greedy caption, words joined by spaces
    token_ids  int32 (batch, steps): the generated ids, end token included

Each image is decoded and squashed to the model's square as the recipe does it
(`rnnkit.export.images`: the same uint8 pixels as Pillow). The SavedModel also has
`encode` and `decoder_step`, the two signatures below.

LiteRT and ONNX: two files, so that a client runs greedy or beam search itself
(`rnnkit.export.clients.greedy_decode` is the greedy loop):

- `encoder`: `image` float32 (batch, size, size, 3), the image's RGB levels 0-255
  (not scaled: the encoder scales them as its backbone expects), the image decoded
  with Pillow, converted to RGB and squashed (not cropped) to size x size with
  Pillow's bilinear filter (`rnnkit.export.clients.image_pixels` does it) -> the
  memory the decoder attends over (`memory_annotations`, `memory_keys`, ...) and
  its first state (`state_0`, ...);
- `decoder_step`: `token` int32 (batch,) (the start id 2 first), the state and the
  memory -> `logits` (batch, vocabulary), `attention` (batch, image positions) and
  `next_state_0`, ... for the next step.

The vocabulary is written beside them (`vocabulary.txt`, line i = id i; line 0,
padding, is empty); export.json's notes hold the image size, the special ids and the
longest caption.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import keras
    from rnnkit_recipes.captioning.config import CaptioningConfig

    from rnnkit.export import ExportPlan

PIXELS = (
    "RGB levels 0-255 as float32 (not scaled), the image decoded with Pillow, "
    "converted to RGB and squashed (not cropped) to image_size x image_size with "
    "Pillow's bilinear filter: rnnkit.export.clients.image_pixels"
)


def export_plan(
    model: keras.Model, config: CaptioningConfig, format: str
) -> ExportPlan:
    import tensorflow as tf
    from keras import ops
    from rnnkit_recipes.captioning.decode import search_options

    from rnnkit.decoding import greedy_loop
    from rnnkit.export import Endpoint, ExportError, ExportPlan, Tensor
    from rnnkit.export.images import squashed_pixels
    from rnnkit.export.steps import (
        decoder_signatures,
        encoder_decoder_artefacts,
        encoder_decoder_endpoints,
    )
    from rnnkit.export.text import generated_tokens

    if model.tokens is None:
        raise ExportError(
            "this run's model holds no vocabulary (token list); it cannot be "
            "exported with its captions as text"
        )
    size = model.image_size
    search = search_options(config)
    notes = {
        "image_size": size,
        "image": PIXELS,
        "encoder": model.encoder_name,
        "pad_id": search["pad_id"],
        "start_id": search["start_id"],
        "end_id": search["end_id"],
        "suppress_ids": list(search["suppress_ids"]),
        "max_steps": search["max_length"],
    }
    plan = ExportPlan(
        recipe="captioning",
        files={"vocabulary.txt": "\n".join(model.tokens) + "\n"},
        notes=notes,
    )
    image = Tensor("image", "float32", (None, size, size, 3), PIXELS, (0.0, 255.0))
    signatures = decoder_signatures(model, image, ops.zeros((1, size, size, 3)))

    if format == "saved_model":
        tokens = tf.constant(list(model.tokens))

        def caption(values: dict) -> dict:
            pixels = ops.cast(squashed_pixels(values["image"], size), "float32")
            result = greedy_loop(model, pixels, **search)
            token_ids = ops.cast(result["tokens"][:, 0], "int32")  # (batch, steps)
            words = generated_tokens(tokens, token_ids)  # ragged (batch, None)
            text = tf.strings.reduce_join(words, axis=-1, separator=" ")
            return {"caption": text, "token_ids": token_ids}

        plan.endpoints = [
            Endpoint(
                "caption",
                caption,
                [Tensor("image", "string", (None,), "encoded images (JPEG, PNG)")],
                [
                    Tensor("caption", "string", (None,), "greedy captions"),
                    Tensor("token_ids", "int32", (None, None), "generated ids"),
                ],
                "encoded images in, greedy captions out",
            ),
            *encoder_decoder_endpoints(signatures, "the CNN encoder"),
        ]
        plan.track = [model]
        return plan

    plan.artefacts = encoder_decoder_artefacts(
        model, signatures, "pixels in, the decoder's memory and first state out"
    )
    return plan
