"""The SavedModel of an `ExportPlan`, written through `keras.export.ExportArchive`.

Every endpoint becomes a signature that takes and returns named tensors; the first
is also `serving_default` (TF Serving's default). Lookup tables of the Keras text
layers are tracked by the archive itself; other resources (a SentencePiece
tokenizer) are listed in the plan's `track`.
"""

from __future__ import annotations

from pathlib import Path

from rnnkit.export.plan import ExportPlan


def write(plan: ExportPlan, folder: Path) -> None:
    import keras

    archive = keras.export.ExportArchive()
    for resource in plan.track:
        archive.track(resource)
    for endpoint in plan.endpoints:
        archive.add_endpoint(
            endpoint.name,
            _keyword_function(endpoint.function),
            input_signature=[{t.name: t.spec() for t in endpoint.inputs}],
        )
    archive.write_out(str(folder), verbose=False)


def _keyword_function(function):
    """The endpoint called with one dict, so the signature's inputs keep their names."""

    def endpoint(inputs):
        return dict(function(dict(inputs)))

    return endpoint


def run(path: str | Path, signature: str, inputs: dict) -> dict:
    """Runs one signature of a SavedModel (loaded with `tf.saved_model.load`) on
    numpy inputs; returns numpy outputs by name."""
    import numpy as np
    import tensorflow as tf

    loaded = tf.saved_model.load(str(path))
    function = loaded.signatures[signature]
    outputs = function(**{name: tf.constant(value) for name, value in inputs.items()})
    return {name: np.asarray(value) for name, value in outputs.items()}
