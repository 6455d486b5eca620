"""What the exported classifier takes and returns (`rnnkit export RUN_DIR`).

SavedModel, signature `classify` (also `serving_default`):

    text           string (batch,): raw texts; the run's vocabulary and text
                   standardization are inside
 -> probabilities  float32 (batch, classes): one column per class, in the order of
                   export.json's notes.class_names (two for a binary classifier)
    label          string (batch,): the most probable class name

and `classify_token_ids`, the same from token ids (below).

LiteRT and ONNX models take no strings, so their `model` file starts after the text
layers:

    token_ids      int32 (batch, data.sequence_length): word ids, right-padded with 0
 -> probabilities  float32 (batch, classes)

with the vocabulary written beside it (`vocabulary.txt`, line i = id i) and
`rnnkit.export.clients.sentiment_token_ids` as the tokenizer (the settings it needs
are in export.json's notes).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import keras
    from rnnkit_recipes.sentiment.config import SentimentConfig

    from rnnkit.export import ExportPlan

VOCABULARY_FILE = "vocabulary.txt"


def export_plan(model: keras.Model, config: SentimentConfig, format: str) -> ExportPlan:
    import keras
    import tensorflow as tf
    from keras import ops

    from rnnkit.export import Artefact, Endpoint, ExportError, ExportPlan, Tensor
    from rnnkit.export.signature import SignatureModel
    from rnnkit.models.sequence_classifier import class_names_of

    vectorizer = model.get_layer("vectorizer")
    truncate = model.get_layer("truncate")
    names = class_names_of(model)
    length = truncate.max_length
    vocabulary = [str(token) for token in vectorizer.get_vocabulary()]
    if any("\n" in token or "\r" in token for token in vocabulary):
        raise ExportError("the vocabulary holds a line break; it cannot be a text file")
    after_text = keras.Model(truncate.output, model.output, name="after_text")
    names_tensor = tf.constant(names)

    def all_classes(probabilities):
        probabilities = ops.cast(probabilities, "float32")
        if len(names) == 2:  # one sigmoid unit: P(class 1)
            return ops.concatenate([1.0 - probabilities, probabilities], axis=-1)
        return probabilities  # (batch, classes)

    def from_ids(values: dict) -> dict:
        ids = ops.cast(values["token_ids"], "int32")
        return {"probabilities": all_classes(after_text(ids, training=False))}

    def classify(values: dict) -> dict:
        probabilities = all_classes(model(values["text"], training=False))
        label = tf.gather(names_tensor, ops.argmax(probabilities, axis=-1))
        return {"probabilities": probabilities, "label": label}

    classes = len(names)
    probabilities = Tensor(
        "probabilities", "float32", (None, classes), f"P(class), classes {names}"
    )
    token_ids = Tensor(
        "token_ids",
        "int32",
        (None, length),
        f"word ids ({VOCABULARY_FILE}, line i = id i), right-padded with 0",
    )
    text = Tensor("text", "string", (None,), "raw texts")
    label = Tensor("label", "string", (None,), "the most probable class name")
    plan = ExportPlan(
        recipe="sentiment",
        endpoints=[
            Endpoint(
                "classify",
                classify,
                [text],
                [probabilities, label],
                "raw texts in, class probabilities out",
            ),
            Endpoint(
                "classify_token_ids",
                from_ids,
                [token_ids],
                [probabilities],
                "token ids in (as the LiteRT / ONNX model), class probabilities out",
            ),
        ],
        artefacts=[
            Artefact(
                "model",
                SignatureModel(from_ids, [after_text], name="classifier"),
                [token_ids],
                [probabilities],
                "token ids in (clients.sentiment_token_ids), class probabilities out",
            )
        ],
        files={VOCABULARY_FILE: "\n".join(vocabulary) + "\n"},
        track=[model],
        notes={
            "class_names": names,
            "sequence_length": length,
            "keep": truncate.keep,
            "lowercase": config.data.lowercase,
            "tokenizer": "rnnkit.export.clients.sentiment_token_ids",
        },
    )
    return plan
