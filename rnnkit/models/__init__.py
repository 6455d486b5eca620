"""Reusable architectures built from the rnnkit layers.

Importing this package registers the custom Keras objects of every model module, so
that `keras.saving.load_model` can rebuild a saved model in safe mode.
"""

from rnnkit.models import (
    encoder_decoder,
    forecaster,
    image_captioner,
    language_model,
    sequence_classifier,
    transformer_encoder_decoder,
    transformer_language_model,
)
