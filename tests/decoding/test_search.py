"""Tests for rnnkit.decoding: greedy and beam search on tiny encoder-decoders."""

import itertools

import keras
import numpy as np
import pytest

from rnnkit import decoding
from rnnkit.models.encoder_decoder import EncoderDecoder

PAD, UNK, START, END = 0, 1, 2, 3
SUPPRESS = (PAD, START)
SOURCE = np.array([[5, 6, 7, 8, 0], [9, 10, 0, 0, 0], [4, 4, 4, 4, 4]])


def tiny_model(target_vocabulary=6, attention="bahdanau", seed=1, **kwargs):
    keras.utils.set_random_seed(seed)
    model = EncoderDecoder(
        12, target_vocabulary, embedding_dim=6, units=8, attention=attention, **kwargs
    )
    model.build()
    return model


def sequence_log_prob(model, source_row, tokens):
    """log P(tokens | source) by stepping the decoder eagerly, one token at a time."""
    memory = model.encode(source_row[None, :])
    state = model.initial_decoder_state(memory)
    previous, total, weights = START, 0.0, []
    for token in tokens:
        logits, state, step_weights = model.decode_step(
            np.array([previous]), state, memory
        )
        log_probs = keras.ops.convert_to_numpy(keras.ops.log_softmax(logits))
        total += float(log_probs[0, token])
        weights.append(keras.ops.convert_to_numpy(step_weights)[0])
        previous = token
    return total, np.array(weights)


def batch_log_probs(model, source_row, hypotheses):
    """log P(h | source) of many hypotheses at once, under teacher forcing."""
    steps = max(len(h) for h in hypotheses)
    targets = np.array([list(h) + [PAD] * (steps - len(h)) for h in hypotheses])
    target_in = np.concatenate([np.full((len(targets), 1), START), targets[:, :-1]], 1)
    source = np.repeat(source_row[None, :], len(targets), axis=0)
    logits = model({"source": source, "target_in": target_in})
    log_probs = keras.ops.convert_to_numpy(keras.ops.log_softmax(logits))
    picked = np.take_along_axis(log_probs, targets[:, :, None], axis=2)[:, :, 0]
    return np.where(targets != PAD, picked, 0.0).sum(axis=1)


def every_hypothesis(words, max_steps):
    """Every output of at most `max_steps` tokens: ended by END, or cut at the limit."""
    ended = [
        (*body, END)
        for length in range(max_steps)
        for body in itertools.product(words, repeat=length)
    ]
    return ended + list(itertools.product(words, repeat=max_steps))


def search_kwargs(**overrides):
    kwargs = dict(
        start_id=START,
        end_id=END,
        suppress_ids=SUPPRESS,
        max_length_ratio=0.0,
        max_length_offset=3,
    )
    return {**kwargs, **overrides}


# With and without attention, each with and without a length penalty (the other two
# pairs add no path: each search traces in seconds, which the CI pays per pair).
@pytest.mark.parametrize(("attention", "alpha"), [("bahdanau", 0.7), ("none", 0.0)])
def test_beam_width_one_is_greedy(attention, alpha):
    model = tiny_model(target_vocabulary=9, attention=attention)
    kwargs = search_kwargs(max_length_ratio=1.5, max_length_offset=2)
    greedy = decoding.greedy_search(model, SOURCE, length_penalty_alpha=alpha, **kwargs)
    beam = decoding.beam_search(
        model, SOURCE, beam_width=1, length_penalty_alpha=alpha, **kwargs
    )
    np.testing.assert_array_equal(beam.tokens, greedy.tokens)
    np.testing.assert_array_equal(beam.lengths, greedy.lengths)
    np.testing.assert_allclose(beam.log_probs, greedy.log_probs, rtol=1e-6)
    np.testing.assert_allclose(beam.scores, greedy.scores, rtol=1e-6)
    np.testing.assert_allclose(beam.attention, greedy.attention, atol=1e-6)


def test_greedy_loop_traced_is_greedy_search():
    import tensorflow as tf

    model = tiny_model(target_vocabulary=9)
    kwargs = search_kwargs(max_length_ratio=1.5, length_penalty_alpha=0.7)
    greedy = decoding.greedy_search(model, SOURCE, **kwargs)
    loop = tf.function(
        lambda source: decoding.greedy_loop(model, source, **kwargs),
        input_signature=[tf.TensorSpec([None, None], "int32")],  # as in a SavedModel
    )
    traced = {key: value.numpy() for key, value in loop(SOURCE.astype("int32")).items()}
    np.testing.assert_array_equal(traced["tokens"], greedy.tokens)
    np.testing.assert_array_equal(traced["lengths"], greedy.lengths)
    np.testing.assert_allclose(traced["log_probs"], greedy.log_probs, rtol=1e-5)
    np.testing.assert_allclose(traced["scores"], greedy.scores, rtol=1e-5)
    np.testing.assert_allclose(traced["attention"], greedy.attention, atol=1e-6)
    with pytest.raises(TypeError, match="max_lenght"):
        decoding.greedy_loop(model, SOURCE, max_lenght=3, **kwargs)


@pytest.mark.parametrize("alpha", [0.0, 1.0])
def test_full_beam_finds_the_exhaustive_ranking(alpha):
    """With room for every hypothesis, beam search is exhaustive search."""
    model = tiny_model()  # words: UNK, 4, 5 (PAD and START are never generated)
    hypotheses = every_hypothesis([UNK, 4, 5], max_steps=3)  # 40 of them
    result = decoding.beam_search(
        model,
        SOURCE,
        beam_width=len(hypotheses),
        n_best=len(hypotheses),
        length_penalty_alpha=alpha,
        **search_kwargs(),
    )
    for row in range(len(SOURCE)):
        log_probs = batch_log_probs(model, SOURCE[row], hypotheses)
        exhaustive = sorted(
            (
                (log_prob / ((5 + len(tokens)) / 6) ** alpha, tokens)
                for log_prob, tokens in zip(log_probs, hypotheses, strict=True)
            ),
            reverse=True,
        )
        found = [
            tuple(int(t) for t in tokens[:length])
            for tokens, length in zip(
                result.tokens[row], result.lengths[row], strict=True
            )
        ]
        assert found == [tokens for _, tokens in exhaustive]
        np.testing.assert_allclose(
            result.scores[row], [score for score, _ in exhaustive], rtol=1e-5
        )


def test_n_best_is_sorted_distinct_and_marks_empty_slots():
    model = tiny_model()
    result = decoding.beam_search(
        model, SOURCE, beam_width=6, n_best=6, **search_kwargs(max_length_offset=1)
    )
    # One step allows only END, UNK, 4 and 5: the last two slots stay empty.
    assert np.all(np.isneginf(result.scores[:, 4:]))
    finite = result.scores[:, :4]
    assert np.all(np.diff(finite, axis=1) <= 0)
    for row in result.tokens[:, :4, 0]:
        assert sorted(row) == [UNK, END, 4, 5]


def test_length_limit_is_relative_to_each_source():
    model = tiny_model()
    kwargs = search_kwargs(
        suppress_ids=(*SUPPRESS, END), max_length_ratio=1.5, max_length_offset=1
    )
    source_lengths = (SOURCE != PAD).sum(axis=1)
    expected = np.ceil(1.5 * source_lengths).astype(int) + 1  # END can never come
    greedy = decoding.greedy_search(model, SOURCE, **kwargs)
    beam = decoding.beam_search(model, SOURCE, beam_width=3, n_best=3, **kwargs)
    np.testing.assert_array_equal(greedy.lengths[:, 0], expected)
    np.testing.assert_array_equal(beam.lengths, np.repeat(expected[:, None], 3, 1))
    for row, length in enumerate(expected):
        assert np.all(greedy.tokens[row, 0, :length] != PAD)
        assert np.all(greedy.tokens[row, 0, length:] == PAD)


@pytest.mark.parametrize("reverse_source", [False, True])
def test_attention_of_the_chosen_hypothesis(reverse_source):
    model = tiny_model(target_vocabulary=9, reverse_source=reverse_source)
    result = decoding.beam_search(
        model, SOURCE, beam_width=4, **search_kwargs(max_length_offset=5)
    )
    for row in range(len(SOURCE)):
        length = result.lengths[row, 0]
        log_prob, weights = sequence_log_prob(
            model, SOURCE[row], result.tokens[row, 0, :length]
        )
        assert result.log_probs[row, 0] == pytest.approx(log_prob, rel=1e-5)
        np.testing.assert_allclose(result.attention[row, :length], weights, atol=1e-5)
        assert np.all(result.attention[row, length:] == 0)
        # No weight on padding, and weights in source order (row 0: 4 tokens + pad).
        assert np.all(result.attention[row, :length, SOURCE[row] == PAD] == 0)


@pytest.mark.skipif(
    keras.backend.backend() != "tensorflow", reason="checks the tf.function trace"
)
def test_search_is_one_compiled_loop_traced_once():
    model = tiny_model()
    for batch in (SOURCE, SOURCE[:2, :3], np.pad(SOURCE, ((0, 0), (0, 4)))):
        decoding.beam_search(model, batch, beam_width=3, **search_kwargs())
    (search,) = decoding.search._compiled_searches[model].values()
    assert search.experimental_get_tracing_count() == 1


CALLS = {"decoder_weights": 0, "steps": 0, "steps_given_weights": 0}


class CountingEncoderDecoder(EncoderDecoder):
    """Counts, while the search is traced, how the decoder weights reach each step."""

    def decoder_weights(self):
        CALLS["decoder_weights"] += 1
        return super().decoder_weights()

    def decode_step(self, token_ids, state, memory, training=False, weights=None):
        CALLS["steps"] += 1
        CALLS["steps_given_weights"] += weights is not None
        return super().decode_step(token_ids, state, memory, training, weights)


@pytest.mark.parametrize("beam_width", [1, 3])
def test_decoder_weights_are_split_once_per_search_not_per_step(beam_width):
    keras.utils.set_random_seed(1)
    model = CountingEncoderDecoder(12, 6, embedding_dim=6, units=8, decoder_layers=2)
    model.build()
    CALLS.update(decoder_weights=0, steps=0, steps_given_weights=0)
    decoding.beam_search(model, SOURCE, beam_width=beam_width, **search_kwargs())
    # One trace: the loop body is traced once, the weights computed once before it.
    assert CALLS == {"decoder_weights": 1, "steps": 1, "steps_given_weights": 1}


def test_argument_errors():
    model = tiny_model()
    with pytest.raises(ValueError, match="beam_width"):
        decoding.beam_search(model, SOURCE, beam_width=0, **search_kwargs())
    with pytest.raises(ValueError, match="n_best"):
        decoding.beam_search(model, SOURCE, beam_width=2, n_best=3, **search_kwargs())
    with pytest.raises(ValueError, match="source_ids"):
        decoding.greedy_search(model, SOURCE[0], **search_kwargs())


def test_max_length_replaces_the_source_length_limit():
    """With max_length every hypothesis stops there, whatever the source's length;
    the search equals the one whose ratio/offset limit gives the same length."""
    model = tiny_model()
    common = dict(start_id=START, end_id=END, suppress_ids=(PAD, START, END))
    fixed = decoding.beam_search(model, SOURCE, beam_width=2, max_length=3, **common)
    assert fixed.tokens.shape == (3, 1, 3)
    np.testing.assert_array_equal(fixed.lengths, 3)  # END suppressed: cut at 3
    same = decoding.beam_search(
        model, SOURCE, beam_width=2, max_length_ratio=0.0, max_length_offset=3, **common
    )
    np.testing.assert_array_equal(same.tokens[:, :, :3], fixed.tokens)
    np.testing.assert_allclose(same.scores, fixed.scores, rtol=1e-6)
    with pytest.raises(ValueError, match="max_length"):
        decoding.greedy_search(model, SOURCE, max_length=0, **common)
    with pytest.raises(ValueError, match="numeric"):
        decoding.greedy_search(model, np.array([["a"]]), max_length=2, **common)
