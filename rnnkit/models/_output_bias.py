"""The output bias of the language models (recurrent and Transformer): one value per
token, in the tied output layer's `output_bias` or in the untied projection's bias."""

from __future__ import annotations

import keras
from keras import ops


def set_output_bias(model: keras.Model, bias) -> None:
    """Assigns `bias`, shape `(model.vocabulary_size,)`, to the output bias of
    `model` (building it first if needed); a `ValueError` for another shape."""
    bias = ops.convert_to_tensor(bias, "float32")
    if tuple(bias.shape) != (model.vocabulary_size,):
        raise ValueError(
            f"The output bias needs one value per token, shape "
            f"({model.vocabulary_size},); received shape {tuple(bias.shape)}."
        )
    if not model.built:
        model.build()
    variable = (
        model.output_bias
        if model.output_projection is None
        else model.output_projection.bias
    )
    variable.assign(ops.cast(bias, variable.dtype))
