"""Tests for the sampling half of rnnkit.decoding, against numpy references."""

import numpy as np
import pytest

from rnnkit import decoding

LOGITS = np.log(np.array([0.05, 0.3, 0.1, 0.25, 0.02, 0.28]))


def softmax(logits):
    e = np.exp(logits - logits.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def nucleus_reference(probabilities, top_p):
    """The nucleus by a plain loop: the most probable tokens, one at a time, until
    their mass reaches top_p."""
    kept, mass = [], 0.0
    for token in sorted(range(len(probabilities)), key=lambda i: -probabilities[i]):
        if mass >= top_p:
            break
        kept.append(token)
        mass += probabilities[token]
    return set(kept)


def draw(logits, n, seed=0, **options):
    rng = np.random.default_rng(seed)
    rows = np.broadcast_to(logits, (n, len(logits)))
    return decoding.sample_next(rows, rng, **options)


def test_plain_sampling_frequencies_match_the_softmax():
    n = 40000
    counts = np.bincount(draw(LOGITS, n), minlength=len(LOGITS)) / n
    expected = softmax(LOGITS)
    tolerance = 4 * np.sqrt(expected * (1 - expected) / n)
    np.testing.assert_array_less(np.abs(counts - expected), tolerance)


@pytest.mark.parametrize("temperature", [0.5, 2.0])
def test_temperature_scales_the_logits(temperature):
    n = 40000
    counts = np.bincount(draw(LOGITS, n, temperature=temperature), minlength=6) / n
    expected = softmax(LOGITS / temperature)
    np.testing.assert_allclose(
        decoding.sampling_probabilities(LOGITS, temperature), expected, rtol=1e-12
    )
    tolerance = 4 * np.sqrt(expected * (1 - expected) / n)
    np.testing.assert_array_less(np.abs(counts - expected), tolerance)


def test_temperature_zero_is_greedy_and_a_tiny_temperature_agrees():
    logits = np.random.default_rng(1).normal(size=(50, 30))
    greedy = logits.argmax(-1)
    rng = np.random.default_rng(0)
    np.testing.assert_array_equal(
        decoding.sample_next(logits, rng, temperature=0.0), greedy
    )
    np.testing.assert_array_equal(
        decoding.sample_next(logits, rng, temperature=1e-4), greedy
    )


def test_top_k_never_samples_outside_the_k_largest():
    logits = np.random.default_rng(2).normal(size=(200, 40))
    rng = np.random.default_rng(3)
    for _ in range(20):
        ids = decoding.sample_next(logits, rng, top_k=5)
        top5 = np.argsort(-logits, axis=-1)[:, :5]
        assert all(ids[row] in top5[row] for row in range(len(ids)))
    # Within the k largest, the renormalised softmax.
    probabilities = decoding.sampling_probabilities(logits, top_k=5)
    reference = np.zeros_like(probabilities)
    for row, top in enumerate(np.argsort(-logits, axis=-1)[:, :5]):
        reference[row, top] = softmax(logits[row, top])
    np.testing.assert_allclose(probabilities, reference, rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize("top_p", [0.3, 0.5, 0.58, 0.9, 0.999])
def test_top_p_keeps_the_smallest_set_reaching_the_mass(top_p):
    probabilities = softmax(LOGITS)
    nucleus = nucleus_reference(probabilities, top_p)
    assert probabilities[list(nucleus)].sum() >= top_p
    filtered = decoding.sampling_probabilities(LOGITS, top_p=top_p)
    assert set(np.flatnonzero(filtered)) == nucleus
    expected = np.zeros_like(probabilities)
    expected[list(nucleus)] = probabilities[list(nucleus)]
    np.testing.assert_allclose(filtered, expected / expected.sum(), rtol=1e-12)
    ids = draw(LOGITS, 5000, seed=4, top_p=top_p)
    assert set(np.unique(ids)) <= nucleus


def test_top_k_then_top_p_combine():
    filtered = decoding.sampling_probabilities(LOGITS, top_k=3, top_p=0.5)
    # Top 3: ids 1 (0.3), 5 (0.28), 3 (0.25), renormalised to 0.361, 0.337, 0.301;
    # the nucleus of 0.5 of those is {1, 5}.
    assert set(np.flatnonzero(filtered)) == {1, 5}


def bigram_logits(table):
    """A next_logits function whose logits depend only on the last id fed."""

    def next_logits(ids):
        return table[ids[:, -1]]  # (1, vocabulary)

    return next_logits


def test_sample_sequence_is_seeded_and_greedy_at_temperature_zero():
    table = np.random.default_rng(5).normal(size=(7, 7)) * 3
    run = bigram_logits(table)
    first = decoding.sample_sequence(run, [2], 50, temperature=0.8, seed=11)
    again = decoding.sample_sequence(run, [2], 50, temperature=0.8, seed=11)
    other = decoding.sample_sequence(run, [2], 50, temperature=0.8, seed=12)
    assert first == again and first != other and len(first) == 50
    greedy, token = [], 2
    for _ in range(20):
        token = int(table[token].argmax())
        greedy.append(token)
    assert decoding.sample_sequence(run, [2], 20, temperature=0.0) == greedy
    assert decoding.sample_sequence(run, [2], 20, top_k=1, seed=3) == greedy


def test_sample_sequence_stops_at_the_stop_id():
    table = np.full((3, 3), -10.0)
    table[:, 2] = 10.0  # always token 2
    assert decoding.sample_sequence(bigram_logits(table), [0], 9, stop_id=2) == [2]


@pytest.mark.parametrize(
    "options, message",
    [
        ({"temperature": -1.0}, "temperature"),
        ({"top_k": -1}, "top_k"),
        ({"top_p": 0.0}, "top_p"),
        ({"top_p": 1.5}, "top_p"),
    ],
)
def test_bad_sampling_options_are_named(options, message):
    with pytest.raises(ValueError, match=message):
        decoding.sampling_probabilities(LOGITS, **options)
