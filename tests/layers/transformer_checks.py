"""The Transformer blocks in float64 numpy, and the small blocks the tests share."""

from __future__ import annotations

import numpy as np

from rnnkit.layers import TransformerDecoderBlock, TransformerEncoderBlock
from rnnkit.testing import attention as checks
from rnnkit.testing import references
from tests.layers.test_multi_head_attention import numpy_multi_head_attention

BATCH, TARGET_STEPS, SOURCE_STEPS = 2, 4, 5
MODEL_DIM, SOURCE_DIM, HEADS, FEEDFORWARD_DIM = 4, 3, 2, 6
EPSILON = 1e-5
ACTIVATIONS = {"relu": lambda x: np.maximum(x, 0.0), "tanh": np.tanh}


def named_weights(layer, arrays):
    """{"sublayer/weight": array} in the order of `layer.weights`."""
    names = ["/".join(v.path.split("/")[1:]) for v in layer.weights]
    return dict(zip(names, arrays, strict=True))


def numpy_layer_norm(x, gamma, beta, epsilon=EPSILON):
    mean = x.mean(axis=-1, keepdims=True)
    variance = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
    return (x - mean) / np.sqrt(variance + epsilon) * gamma + beta


def numpy_sublayer(x, sublayer, weights, norm, norm_first):
    """Post-norm LayerNorm(x + f(x)) or pre-norm x + f(LayerNorm(x))."""
    gamma, beta = weights[f"{norm}/gamma"], weights[f"{norm}/beta"]
    if norm_first:
        return x + sublayer(numpy_layer_norm(x, gamma, beta))
    return numpy_layer_norm(x + sublayer(x), gamma, beta)


def numpy_attention(weights, name, query, value, mask):
    parts = [
        weights[f"{name}/{part}_{kind}"]
        for part in ("query", "key", "value", "output")
        for kind in ("kernel", "bias")
    ]
    return numpy_multi_head_attention(query, value, value, *parts, mask)


def numpy_feedforward(weights, activation):
    def feedforward(x):
        hidden = ACTIVATIONS[activation](
            x @ weights["feedforward_inner/kernel"] + weights["feedforward_inner/bias"]
        )
        return (
            hidden @ weights["feedforward_output/kernel"]
            + weights["feedforward_output/bias"]
        )

    return feedforward


def numpy_encoder_block(
    weights,
    x,
    padding_mask=None,
    use_causal_mask=False,
    norm_first=False,
    activation="relu",
):
    """Vaswani et al. (2017): self-attention, then feed-forward, each wrapped."""
    steps = x.shape[1]
    mask = references.attention_mask(
        steps, steps, value_mask=padding_mask, use_causal_mask=use_causal_mask
    )

    def attention(h):
        return numpy_attention(weights, "self_attention", h, h, mask)[0]

    x = numpy_sublayer(x, attention, weights, "self_attention_norm", norm_first)
    feedforward = numpy_feedforward(weights, activation)
    return numpy_sublayer(x, feedforward, weights, "feedforward_norm", norm_first)


def numpy_decoder_block(
    weights,
    x,
    memory=None,
    padding_mask=None,
    memory_mask=None,
    use_causal_mask=True,
    norm_first=False,
    activation="relu",
):
    """Causal self-attention, cross-attention over `memory`, feed-forward."""
    steps = x.shape[1]
    self_mask = references.attention_mask(
        steps, steps, value_mask=padding_mask, use_causal_mask=use_causal_mask
    )

    def self_attention(h):
        return numpy_attention(weights, "self_attention", h, h, self_mask)[0]

    x = numpy_sublayer(x, self_attention, weights, "self_attention_norm", norm_first)
    if memory is not None:
        cross_mask = references.attention_mask(
            steps, memory.shape[1], value_mask=memory_mask
        )

        def cross_attention(h):
            return numpy_attention(weights, "cross_attention", h, memory, cross_mask)[0]

        x = numpy_sublayer(
            x, cross_attention, weights, "cross_attention_norm", norm_first
        )
    feedforward = numpy_feedforward(weights, activation)
    return numpy_sublayer(x, feedforward, weights, "feedforward_norm", norm_first)


def randomize(layer, seed, scale=0.7):
    """Every trainable weight uniform in [-scale, scale]; LayerNorm gains near 1."""
    rng = np.random.RandomState(seed)
    for variable in layer.trainable_variables:
        values = rng.uniform(-scale, scale, variable.shape)
        if variable.path.endswith("gamma"):
            values = 1.0 + values / 2
        variable.assign(values)


def target(seed=0, steps=TARGET_STEPS, batch=BATCH):
    return checks.random_array((batch, steps, MODEL_DIM), seed)


def source(seed=1, steps=SOURCE_STEPS, batch=BATCH):
    return checks.random_array((batch, steps, SOURCE_DIM), seed)


def built_encoder(seed=0, **options):
    layer = TransformerEncoderBlock(HEADS, FEEDFORWARD_DIM, **options)
    layer(target())
    randomize(layer, seed)
    return layer


def built_decoder(seed=0, use_cross_attention=True, **options):
    layer = TransformerDecoderBlock(
        HEADS, FEEDFORWARD_DIM, use_cross_attention=use_cross_attention, **options
    )
    if use_cross_attention:
        layer(target(), source())
    else:
        layer(target())
    randomize(layer, seed)
    return layer
