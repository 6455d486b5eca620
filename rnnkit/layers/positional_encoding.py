"""The fixed sinusoidal positional encoding of Vaswani et al. (2017)."""

import math

import keras
from keras import ops


@keras.saving.register_keras_serializable(package="rnnkit")
class PositionalEncoding(keras.layers.Layer):
    """Adds the fixed sinusoidal encoding of each position to its features.

    For position t and feature index i of a model with d features:

        PE(t, 2i)     = sin(t / max_wavelength^(2i / d))
        PE(t, 2i + 1) = cos(t / max_wavelength^(2i / d))

    so each pair of features is a sinusoid of its own wavelength, from 2 pi up to
    2 pi * max_wavelength, and PE(t + k) is a linear function of PE(t) for any
    offset k. The layer returns `inputs + PE`; it has no weights and works for
    any sequence length. The input's Keras mask passes through unchanged.

    Args:
        max_wavelength: float, default 10000.0 (the paper's value). The base of
            the geometric progression of wavelengths.
        **kwargs: base layer arguments, such as `name` and `dtype`.

    Call arguments:
        inputs: (batch, T, d), e.g. token embeddings.
        start_index: int or scalar int tensor, default 0. The position of the
            first time step, for decoding one step (T = 1) at a time.

    Returns:
        `inputs + PE[start_index : start_index + T]`, shape (batch, T, d).

    Example:
    >>> embeddings = np.zeros((2, 10, 16), "float32")
    >>> tuple(PositionalEncoding()(embeddings).shape)
    (2, 10, 16)

    Reference:
        - [Vaswani et al., 2017](https://arxiv.org/abs/1706.03762), section 3.5.
    """

    def __init__(self, max_wavelength=10000.0, **kwargs):
        if (
            isinstance(max_wavelength, bool)
            or not isinstance(max_wavelength, (int, float))
            or max_wavelength <= 1
        ):
            raise ValueError(
                "`max_wavelength` must be a number greater than 1. "
                f"Received: {max_wavelength!r}"
            )
        super().__init__(**kwargs)
        self.max_wavelength = float(max_wavelength)
        self.supports_masking = True

    def build(self, input_shape):
        if len(input_shape) != 3 or input_shape[-1] is None:
            raise ValueError(
                f"{self.name} expects inputs of shape (batch, T, d) with a known d. "
                f"Received: input_shape={input_shape}"
            )

    def call(self, inputs, start_index=0):
        length, features = ops.shape(inputs)[1], inputs.shape[-1]
        positions = ops.cast(ops.arange(length) + start_index, "float32")  # (T,)
        feature_index = ops.arange(features)  # (d,)
        pair_index = ops.cast(feature_index // 2 * 2, "float32")  # 2i for 2i and 2i+1
        inverse_wavelength = ops.exp(
            pair_index * (-math.log(self.max_wavelength) / features)
        )  # (d,): max_wavelength^(-2i / d)
        angles = positions[:, None] * inverse_wavelength[None, :]  # (T, d)
        encoding = ops.where(
            feature_index % 2 == 0, ops.sin(angles), ops.cos(angles)
        )  # (T, d)
        return inputs + ops.cast(encoding, inputs.dtype)  # (batch, T, d)

    def get_config(self):
        config = super().get_config()
        config.update({"max_wavelength": self.max_wavelength})
        return config
