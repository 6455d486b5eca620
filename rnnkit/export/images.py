"""Encoded images to square pixels in a TensorFlow graph, exactly as Pillow makes them.

`squashed_pixels` is, for a SavedModel that reads image bytes, what
`rnnkit.export.clients.image_pixels` is in Python:
`PIL.Image.open(...).convert("RGB").resize((size, size), Image.BILINEAR)`. The same
uint8 pixels, not close ones:

- JPEG is decoded with libjpeg's accurate integer DCT and fancy upsampling, which is
  what Pillow's decoder uses (TensorFlow's default DCT differs by a few levels);
  PNG, GIF and BMP through `tf.io.decode_image` (8-bit channels; an alpha channel is
  dropped, as `convert("RGB")` does; grey is repeated over the three channels);
- the resize is Pillow's (`ImagingResample`, libImaging/Resample.c): a triangle
  filter stretched by the scale when shrinking, its weights rounded to 22-bit
  fixed point, the rows resampled first and rounded to uint8, then the columns.
  `tf.image.resize(..., antialias=True)` is the same filter without the two
  roundings, and differs by one level in many pixels.

tests/export checks it against Pillow on real Flickr8k JPEGs and on PNGs.
"""

from __future__ import annotations

from typing import Any

# Pillow's fixed-point weights (libImaging/Resample.c: PRECISION_BITS = 32 - 8 - 2).
PRECISION_BITS = 22


def resample_weights(input_size: Any, output_size: int):
    """Pillow's bilinear weights `(output_size, input_size)` float64, in fixed point
    (integers summing to about 2**22 per row), for one axis.

    The computation is Pillow's `precompute_coeffs` and `normalize_coeffs_8bpc`
    step for step in float64, so each weight rounds as Pillow's does.
    """
    import tensorflow as tf

    input_size = tf.cast(input_size, tf.int32)
    scale = tf.cast(input_size, tf.float64) / float(output_size)
    filter_scale = tf.maximum(scale, 1.0)  # shrinking stretches the filter
    support = filter_scale  # the triangle filter's support is 1
    centres = (tf.range(output_size, dtype=tf.float64) + 0.5) * scale  # (out,)
    # C's (int) truncates; the first bound is clipped at 0 below anyway.
    first = tf.maximum(tf.cast(centres - support + 0.5, tf.int32), 0)  # (out,)
    last = tf.minimum(tf.cast(centres + support + 0.5, tf.int32), input_size)
    taps = tf.cast(tf.math.ceil(support), tf.int32) * 2 + 1
    offsets = tf.range(taps)  # (taps,)
    positions = first[:, None] + offsets[None, :]  # (out, taps)
    # Times the reciprocal, as Pillow: dividing may round the last bit otherwise.
    distance = (tf.cast(positions, tf.float64) - centres[:, None] + 0.5) * (
        1.0 / filter_scale
    )  # (out, taps)
    weights = tf.maximum(1.0 - tf.abs(distance), 0.0)  # (out, taps)
    weights = tf.where(offsets[None, :] < (last - first)[:, None], weights, 0.0)
    # Summed left to right, as Pillow does, so the normalisation rounds alike.
    total = tf.cumsum(weights, axis=1)[:, -1:]  # (out, 1)
    weights = tf.where(total != 0.0, weights / total, weights)
    fixed = tf.floor(0.5 + weights * float(1 << PRECISION_BITS))  # (out, taps)
    columns = tf.one_hot(
        tf.minimum(positions, input_size - 1), input_size, dtype=tf.float64
    )  # (out, taps, in)
    return tf.reduce_sum(columns * fixed[..., None], axis=1)  # (out, in)


def _round_to_uint8_levels(fixed_point):
    """Pillow's `clip8`: round a fixed-point sum to 0..255 (still float64)."""
    import tensorflow as tf

    half = float(1 << (PRECISION_BITS - 1))
    return tf.minimum(
        tf.floor((fixed_point + half) / float(1 << PRECISION_BITS)), 255.0
    )


def pillow_resize(pixels, size: int):
    """`(size, size, 3)` uint8 of `(height, width, 3)` uint8 pixels, resized as
    Pillow's `resize((size, size), Image.BILINEAR)`.

    The products and sums are integers below 2**31, exact in float64.
    """
    import tensorflow as tf

    shape = tf.shape(pixels)
    values = tf.cast(pixels, tf.float64)  # (h, w, 3)
    across = resample_weights(shape[1], size)  # (size, w)
    rows = _round_to_uint8_levels(
        tf.einsum("hwc,xw->hxc", values, across)
    )  # (h, size, 3)
    down = resample_weights(shape[0], size)  # (size, h)
    squashed = _round_to_uint8_levels(
        tf.einsum("hxc,yh->yxc", rows, down)
    )  # (size, size, 3)
    return tf.cast(squashed, tf.uint8)


def decode_rgb(content):
    """`(height, width, 3)` uint8 RGB pixels of one encoded image (a scalar string),
    decoded as Pillow decodes it (see the module docstring)."""
    import tensorflow as tf

    return tf.cond(
        tf.io.is_jpeg(content),
        lambda: tf.io.decode_jpeg(
            content, channels=3, dct_method="INTEGER_ACCURATE", fancy_upscaling=True
        ),
        lambda: tf.io.decode_image(content, channels=3, expand_animations=False),
    )


def squashed_pixels(contents, size: int):
    """`(batch, size, size, 3)` uint8 pixels of a `(batch,)` string tensor of encoded
    images (JPEG, PNG, GIF, BMP), each squashed (not cropped) to `size` squares as
    `rnnkit.export.clients.image_pixels` does with Pillow."""
    import tensorflow as tf

    return tf.map_fn(
        lambda content: pillow_resize(decode_rgb(content), size),
        contents,
        fn_output_signature=tf.TensorSpec((size, size, 3), tf.uint8),
    )
