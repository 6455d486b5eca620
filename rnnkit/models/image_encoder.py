"""The CNN encoder of the image captioner: 0-255 RGB images in, annotation vectors out.

`image_encoder(name, image_size)` builds a `keras.applications` backbone
("mobilenet" (v1, width multiplier `alpha`), "mobilenet_v2", "efficientnet_b0",
"resnet50") without its top, or "small_cnn", four convolution blocks for training from
scratch on a CPU, behind the `ImagePreprocessing` its backbone expects. Both are
importable from `rnnkit.models.image_captioner` too.
"""

from __future__ import annotations

import keras
from keras import ops

from rnnkit.models._arguments import positive_int

ENCODERS = ("small_cnn", "mobilenet", "mobilenet_v2", "efficientnet_b0", "resnet50")


# How each backbone expects its 0-255 RGB input (keras.applications preprocess_input).
_PREPROCESSING = {
    "small_cnn": "unit",
    "mobilenet": "symmetric",
    "mobilenet_v2": "symmetric",
    "efficientnet_b0": "raw",
    "resnet50": "caffe",
}
_CAFFE_BGR_MEAN = (103.939, 116.779, 123.68)


@keras.saving.register_keras_serializable(package="rnnkit")
class ImagePreprocessing(keras.layers.Layer):
    """Maps 0-255 RGB pixels to what a backbone was trained on.

    Args:
        mode: "unit" (x / 255), "symmetric" (x / 127.5 - 1, MobileNet v1 and v2), "raw"
            (unchanged; EfficientNet rescales inside) or "caffe" (RGB -> BGR minus
            the ImageNet channel means, ResNet50).
    """

    MODES = ("unit", "symmetric", "raw", "caffe")

    def __init__(self, mode="unit", **kwargs):
        if mode not in self.MODES:
            raise ValueError(
                f"Argument `mode` must be one of {self.MODES}, received mode={mode!r}."
            )
        super().__init__(**kwargs)
        self.mode = mode

    def call(self, images):
        images = ops.cast(images, self.compute_dtype)
        if self.mode == "unit":
            return images / 255.0
        if self.mode == "symmetric":
            return images / 127.5 - 1.0
        if self.mode == "caffe":
            return ops.flip(images, axis=-1) - ops.convert_to_tensor(
                _CAFFE_BGR_MEAN, self.compute_dtype
            )
        return images

    def get_config(self):
        return {**super().get_config(), "mode": self.mode}


def image_encoder(
    name: str, image_size: int, width: int = 32, alpha: float = 1.0
) -> keras.Model:
    """The CNN that maps `(batch, size, size, 3)` 0-255 images to annotation vectors
    `(batch, L, D)`, with random weights (load pretrained ones afterwards).

    Args:
        name: one of `ENCODERS`.
        image_size: side of the square input images in pixels.
        width: filters of the first "small_cnn" block (doubled per block).
        alpha: width multiplier of "mobilenet" (ImageNet weights exist for 0.25,
            0.5, 0.75 and 1.0; 0.75 gives 768 channels).
    """
    if name not in ENCODERS:
        raise ValueError(
            f"Argument `name` must be one of {ENCODERS}, received {name!r}."
        )
    positive_int("image_size", image_size)
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or alpha <= 0:
        raise ValueError(
            f"Argument `alpha` must be a number > 0, received alpha={alpha!r}."
        )
    images = keras.Input((image_size, image_size, 3), name="image")
    x = ImagePreprocessing(_PREPROCESSING[name], name="preprocessing")(images)
    if name == "small_cnn":
        positive_int("width", width)
        for block in range(4):
            filters = width * 2**block
            x = keras.layers.Conv2D(
                filters, 3, padding="same", use_bias=False, name=f"conv_{block}"
            )(x)
            x = keras.layers.BatchNormalization(name=f"norm_{block}")(x)
            x = keras.layers.ReLU(name=f"relu_{block}")(x)
            x = keras.layers.MaxPooling2D(2, name=f"pool_{block}")(x)  # halves h, w
    else:
        backbone = application(name)(
            include_top=False,
            weights=None,
            input_shape=(image_size, image_size, 3),
            **({"alpha": alpha} if name == "mobilenet" else {}),
        )
        x = backbone(x)
    height, width_, depth = x.shape[1:]
    annotations = keras.layers.Reshape((height * width_, depth), name="annotations")(
        x
    )  # (batch, L, D)
    return keras.Model(images, annotations, name=f"{name}_encoder")


def application(name: str):
    """The `keras.applications` constructor of backbone `name`."""
    return {
        "mobilenet": keras.applications.MobileNet,
        "mobilenet_v2": keras.applications.MobileNetV2,
        "efficientnet_b0": keras.applications.EfficientNetB0,
        "resnet50": keras.applications.ResNet50,
    }[name]
