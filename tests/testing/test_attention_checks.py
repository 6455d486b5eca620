"""rnnkit.testing.attention: the checks pass a correct layer and fail, naming the
check, against wrong equations (rnnkit's own layers pass them in tests/layers)."""

from __future__ import annotations

import numpy as np
import pytest

from rnnkit.layers import DotProductAttention
from rnnkit.testing import attention_layer_checks, check_attention_layer, references

INPUTS = {
    "query": np.random.RandomState(0).randn(2, 3, 4),
    "value": np.random.RandomState(1).randn(2, 5, 4),
}


def scaled_dot_product(query, value):
    """softmax(q k^T / sqrt(d)) v with the keys equal to the values."""
    scores = np.einsum("bqd,bkd->bqk", query, value) / np.sqrt(query.shape[-1])
    return np.einsum("bqk,bkv->bqv", references.masked_softmax(scores), value)


def test_every_check_passes_a_correct_layer():
    ran = check_attention_layer(
        DotProductAttention, INPUTS, numpy_forward=scaled_dot_product
    )
    assert ran == [
        "numpy_outputs_and_gradients",
        "padded_positions",
        "mixed_precision",
        "config_round_trip",
        "fresh_process_reload",
        "training_reduces_loss",
    ]


def test_wrong_equations_fail_naming_the_check():
    def unscaled(query, value):
        scores = np.einsum("bqd,bkd->bqk", query, value)
        return np.einsum("bqk,bkv->bqv", references.masked_softmax(scores), value)

    with pytest.raises(
        AssertionError, match="check numpy_outputs_and_gradients failed: output"
    ):
        check_attention_layer(
            DotProductAttention,
            INPUTS,
            numpy_forward=unscaled,
            checks=["numpy_outputs_and_gradients"],
        )


def test_unknown_checks_are_named():
    with pytest.raises(ValueError, match="unknown check.*nope"):
        attention_layer_checks(DotProductAttention, INPUTS, checks=["nope"])
