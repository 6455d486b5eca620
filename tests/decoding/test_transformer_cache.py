"""Greedy and beam search over `TransformerEncoderDecoder` with its key/value cache
give the same tokens, scores and attention as a decoder that recomputes the whole
prefix at every step (teacher forcing on what was generated so far)."""

import numpy as np
import pytest
from keras import ops

from rnnkit import decoding
from tests.transformer_support import tiny_transformer

PAD, UNK, START, END = 0, 1, 2, 3
SOURCE = np.array(
    [[5, 6, 7, 8, 9, 0], [9, 10, 0, 0, 0, 0], [4, 11, 4, 12, 4, 13], [7, 0, 0, 0, 0, 0]]
)
COMMON = dict(start_id=START, end_id=END, suppress_ids=(PAD, START))


class FullRecomputation:
    """The same model without a cache: each step runs the whole model (encoder and
    decoder) on the source and the prefix generated so far, and reads the last
    position's logits and heads-averaged cross-attention."""

    def __init__(self, model):
        self.model = model

    def encode(self, source_ids, training=False):
        return {"source": ops.cast(source_ids, "int32")}

    def initial_decoder_state(self, memory, max_length):
        rows = ops.shape(memory["source"])[0]
        return {
            "step": ops.zeros((rows,), "int32"),
            "prefix": ops.zeros((rows, max_length), "int32"),
        }

    def decode_step(self, token_ids, state, memory, training=False):
        step = state["step"][0]
        prefix = ops.slice_update(
            state["prefix"], (0, step), ops.cast(token_ids, "int32")[:, None]
        )  # (rows, max_length): positions 0..step hold the tokens fed so far
        inputs = {"source": memory["source"], "target_in": prefix}
        logits = ops.take(self.model(inputs), step, axis=1)  # (rows, vocabulary)
        weights = self.model.cross_attention_weights(memory["source"], prefix)
        attention = ops.mean(ops.take(weights, step, axis=2), axis=1)  # (rows, S)
        return logits, {"step": state["step"] + 1, "prefix": prefix}, attention


def assert_same_result(cached, full):
    np.testing.assert_array_equal(cached.tokens, full.tokens)
    np.testing.assert_array_equal(cached.lengths, full.lengths)
    np.testing.assert_allclose(cached.log_probs, full.log_probs, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(cached.scores, full.scores, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(cached.attention, full.attention, atol=1e-5)


def test_greedy_search_with_the_cache_equals_full_recomputation():
    model = tiny_transformer()
    cached = decoding.greedy_search(model, SOURCE, **COMMON)
    full = decoding.greedy_search(FullRecomputation(model), SOURCE, **COMMON)
    assert_same_result(cached, full)
    # A real test: the rows decode to different token sequences, of several tokens.
    best = [tuple(row[0, : length[0]]) for row, length in zip(
        cached.tokens, cached.lengths, strict=True)]  # fmt: skip
    assert len(set(best)) == len(best)
    assert max(len(set(tokens)) for tokens in best) > 1
    # The attention rows of generated tokens are distributions over the real source
    # tokens only.
    for row, length in enumerate(cached.lengths[:, 0]):
        weights = cached.attention[row, :length]
        np.testing.assert_allclose(weights.sum(-1), 1.0, atol=1e-5)
        assert np.all(weights[:, SOURCE[row] == PAD] == 0.0)


@pytest.mark.parametrize(
    "options",
    [
        {"norm_first": False, "positional_encoding": "learned"},
        {"norm_first": True, "tie_embeddings": False},
    ],
)
def test_beam_search_with_the_cache_equals_full_recomputation(options):
    model = tiny_transformer(**options)
    search = dict(COMMON, beam_width=3, n_best=3, length_penalty_alpha=0.6)
    cached = decoding.beam_search(model, SOURCE, **search)
    full = decoding.beam_search(FullRecomputation(model), SOURCE, **search)
    assert_same_result(cached, full)
    # The beams kept different hypotheses (the cache was reordered with them).
    for row in cached.tokens:
        assert len({tuple(hypothesis) for hypothesis in row}) == 3
