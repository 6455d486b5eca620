"""rnnkit.models.image_encoder: the captioner's CNN and its input scaling."""

from __future__ import annotations

import numpy as np
import pytest
from keras import ops

from rnnkit.models import image_captioner
from rnnkit.models.image_encoder import ImagePreprocessing, image_encoder


@pytest.mark.parametrize(
    ("mode", "expected"),
    [
        ("unit", [0.0, 0.5, 1.0]),
        ("symmetric", [-1.0, 0.0, 1.0]),
        ("raw", [0.0, 127.5, 255.0]),
        # RGB -> BGR, minus the ImageNet channel means
        ("caffe", [255.0 - 103.939, 127.5 - 116.779, 0.0 - 123.68]),
    ],
)
def test_preprocessing_modes(mode, expected):
    pixels = np.array([[[[0.0, 127.5, 255.0]]]], "float32")
    out = ops.convert_to_numpy(ImagePreprocessing(mode)(pixels))[0, 0, 0]
    np.testing.assert_allclose(out, expected, rtol=1e-6)


def test_small_cnn_gives_annotation_vectors_and_names_bad_arguments():
    encoder = image_encoder("small_cnn", 32, width=2)
    assert encoder.output_shape == (None, 4, 16)  # (batch, L = 2 * 2, D = 2 * 8)
    with pytest.raises(ValueError, match="Argument `name`"):
        image_encoder("vgg", 32)
    with pytest.raises(ValueError, match="Argument `image_size`"):
        image_encoder("small_cnn", 0)


def test_still_importable_from_the_captioner():
    assert image_captioner.ImagePreprocessing is ImagePreprocessing
    assert image_captioner.image_encoder is image_encoder


def test_mobilenet_v1_takes_its_width_and_scales_to_plus_minus_one():
    encoder = image_encoder("mobilenet", 64, alpha=0.25)
    assert encoder.output_shape == (None, 4, 256)  # (batch, 2 * 2, 1024 * alpha)
    assert encoder.get_layer("preprocessing").mode == "symmetric"
    with pytest.raises(ValueError, match="Argument `alpha`"):
        image_encoder("mobilenet", 64, alpha=0)
