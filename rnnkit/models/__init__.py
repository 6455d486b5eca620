"""Reusable architectures built from the rnnkit layers.

The model classes and builders are importable from here (`rnnkit.models.EncoderDecoder`,
`rnnkit.models.build_sequence_classifier`, ...); the modules hold their helpers.
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
from rnnkit.models.encoder_decoder import EncoderDecoder
from rnnkit.models.forecaster import build_forecaster
from rnnkit.models.image_captioner import ImageCaptioner
from rnnkit.models.image_encoder import image_encoder
from rnnkit.models.language_model import LanguageModel
from rnnkit.models.sequence_classifier import (
    build_sequence_classifier,
    compile_sequence_classifier,
)
from rnnkit.models.sequence_regressor import build_sequence_regressor
from rnnkit.models.text_standardizer import TextStandardizer
from rnnkit.models.transformer_encoder_decoder import TransformerEncoderDecoder
from rnnkit.models.transformer_language_model import TransformerLanguageModel

__all__ = [
    "EncoderDecoder",
    "ImageCaptioner",
    "LanguageModel",
    "TextStandardizer",
    "TransformerEncoderDecoder",
    "TransformerLanguageModel",
    "build_forecaster",
    "build_sequence_classifier",
    "build_sequence_regressor",
    "compile_sequence_classifier",
    "image_encoder",
]
