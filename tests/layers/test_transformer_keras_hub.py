"""Parity with keras-hub's TransformerEncoder/TransformerDecoder, weights copied.

Skipped where keras-hub is not installed (it is a test dependency, not one of rnnkit),
and on the JAX and PyTorch backends: the numpy references of test_transformer.py check
the blocks there; keras-hub's layers run the same Keras ops on every backend, so one
backend shows the parity (and keeps CI's time).
"""

import keras
import numpy as np
import pytest

from rnnkit.layers import TransformerDecoderBlock, TransformerEncoderBlock
from rnnkit.testing import attention as checks
from rnnkit.testing.recurrent import assert_close
from tests.layers import transformer_checks as tc

if keras.backend.backend() != "tensorflow":
    pytest.skip(
        "keras-hub parity runs on the TensorFlow backend", allow_module_level=True
    )
keras_hub = pytest.importorskip("keras_hub")

B, T, S = tc.BATCH, tc.TARGET_STEPS, tc.SOURCE_STEPS

# rnnkit's sublayer -> keras-hub's, one for one.
ENCODER_PAIRS = {
    "self_attention": "_self_attention_layer",
    "self_attention_norm": "_self_attention_layer_norm",
    "feedforward_inner": "_feedforward_intermediate_dense",
    "feedforward_output": "_feedforward_output_dense",
    "feedforward_norm": "_feedforward_layer_norm",
}
DECODER_PAIRS = {
    **ENCODER_PAIRS,
    "cross_attention": "_cross_attention_layer",
    "cross_attention_norm": "_cross_attention_layer_norm",
}


def copy_weights(ours, theirs, pairs):
    """keras-hub's weights into ours; returns, for each of our trainable variables,
    the index of its counterpart among keras-hub's."""
    for mine, hub_name in pairs.items():
        getattr(ours, mine).set_weights(getattr(theirs, hub_name).get_weights())
    hub_order = {id(v): i for i, v in enumerate(theirs.trainable_variables)}
    position = {}
    for mine, hub_name in pairs.items():
        for a, b in zip(
            getattr(ours, mine).trainable_variables,
            getattr(theirs, hub_name).trainable_variables,
            strict=True,
        ):
            position[id(a)] = hub_order[id(b)]
    return [position[id(v)] for v in ours.trainable_variables]


def assert_same(ours, theirs, pairs, inputs, our_call, hub_call):
    """Same outputs and gradients (weights and inputs) as keras-hub's layer."""
    to_hub = copy_weights(ours, theirs, pairs)
    out_a, grads_a, dx_a, cotangent = checks.outputs_and_gradients(
        ours, inputs, **our_call
    )
    hub_inputs = dict(zip(hub_call.pop("names"), inputs.values(), strict=True))
    out_b, grads_b, dx_b, _ = checks.outputs_and_gradients(
        theirs, hub_inputs, cotangent, **hub_call
    )
    assert_close(out_a, out_b, what="output")
    for variable, got, index in zip(
        ours.trainable_variables, grads_a, to_hub, strict=True
    ):
        assert_close(got, grads_b[index], what=f"gradient of {variable.path}")
    for name, hub_name in zip(inputs, hub_inputs, strict=True):
        assert_close(dx_a[name], dx_b[hub_name], what=f"gradient of {name}")


@pytest.mark.parametrize("norm_first", [False, True], ids=["post_norm", "pre_norm"])
def test_encoder_matches_keras_hub(norm_first):
    inputs = {"inputs": tc.target(1)}
    padding = checks.padding_mask(B, T)
    theirs = keras_hub.layers.TransformerEncoder(
        tc.FEEDFORWARD_DIM, tc.HEADS, normalize_first=norm_first
    )
    theirs(inputs["inputs"])
    tc.randomize(theirs, 2)
    ours = TransformerEncoderBlock(tc.HEADS, tc.FEEDFORWARD_DIM, norm_first=norm_first)
    ours(inputs["inputs"])
    assert_same(
        ours,
        theirs,
        ENCODER_PAIRS,
        inputs,
        {"padding_mask": padding},
        {"names": ["inputs"], "padding_mask": padding},
    )


@pytest.mark.parametrize("norm_first", [False, True], ids=["post_norm", "pre_norm"])
def test_decoder_matches_keras_hub(norm_first):
    inputs = {"inputs": tc.target(3), "encoder_outputs": tc.source(4)}
    padding, source_padding = checks.padding_mask(B, T), checks.padding_mask(B, S)
    theirs = keras_hub.layers.TransformerDecoder(
        tc.FEEDFORWARD_DIM, tc.HEADS, normalize_first=norm_first
    )
    theirs(*inputs.values())
    tc.randomize(theirs, 5)
    ours = TransformerDecoderBlock(tc.HEADS, tc.FEEDFORWARD_DIM, norm_first=norm_first)
    ours(*inputs.values())
    assert_same(
        ours,
        theirs,
        DECODER_PAIRS,
        inputs,
        {"padding_mask": padding, "encoder_padding_mask": source_padding},
        {
            "names": ["decoder_sequence", "encoder_sequence"],
            "decoder_padding_mask": padding,
            "encoder_padding_mask": source_padding,
        },
    )


def test_cached_decoding_matches_keras_hub_step_by_step():
    """Our key/value cache and keras-hub's give the same outputs, step by step."""
    inputs, encoder_outputs = tc.target(6), tc.source(7)
    theirs = keras_hub.layers.TransformerDecoder(tc.FEEDFORWARD_DIM, tc.HEADS)
    theirs(inputs, encoder_outputs)
    tc.randomize(theirs, 8)
    ours = TransformerDecoderBlock(tc.HEADS, tc.FEEDFORWARD_DIM)
    ours(inputs, encoder_outputs)
    copy_weights(ours, theirs, DECODER_PAIRS)
    key_dim = tc.MODEL_DIM // tc.HEADS
    self_cache = np.zeros((B, 2, T, tc.HEADS, key_dim), "float32")
    cross_cache = np.zeros((B, 2, S, tc.HEADS, key_dim), "float32")
    cache = ours.initial_cache(B, T, encoder_outputs)
    for step in range(T):
        token = inputs[:, step : step + 1]
        expected, self_cache, cross_cache = theirs(
            token,
            encoder_outputs,
            self_attention_cache=self_cache,
            self_attention_cache_update_index=step,
            cross_attention_cache=cross_cache,
            cross_attention_cache_update_index=0 if step == 0 else None,
        )
        output, cache = ours(token, encoder_outputs, cache=cache, step=step)
        to_numpy = keras.ops.convert_to_numpy
        assert_close(to_numpy(output), to_numpy(expected), what=f"step {step}")
