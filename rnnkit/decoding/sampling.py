"""Sampling the next token of a language model.

Sampling (`sampling_probabilities`, `sample_next`, `sample_sequence` and
`sampled_tokens`, the same one id at a time) draws the next token from the softmax of
the logits divided by a temperature, restricted to the `top_k` most probable tokens
and to the nucleus, the smallest set of most probable tokens whose probability reaches
`top_p` (Holtzman et al. 2020), then renormalised. Temperature 0 is greedy decoding.
It runs in numpy with a seeded `numpy.random.Generator`, so the same
seed gives the same text.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np


def sampling_probabilities(
    logits: Any, temperature: float = 1.0, top_k: int = 0, top_p: float = 1.0
) -> np.ndarray:
    """The distribution that `sample_next` draws from, (..., vocabulary) float64.

    Args:
        logits: (..., vocabulary) next-token logits.
        temperature: divides the logits; below 1 sharpens, above 1 flattens; 0 puts
            all mass on the most probable token (the first one on ties).
        top_k: keep only the `top_k` most probable tokens (0: all).
        top_p: keep only the nucleus, the fewest most probable tokens whose total
            probability reaches `top_p` (1: all).

    Example:
    >>> logits = np.log([0.5, 0.3, 0.2])
    >>> sampling_probabilities(logits, top_k=2).round(3)
    array([0.625, 0.375, 0.   ])
    >>> sampling_probabilities(logits, top_p=0.6).round(3)  # 0.5 + 0.3 reach 0.6
    array([0.625, 0.375, 0.   ])
    >>> sampling_probabilities(logits, temperature=0)  # greedy
    array([1., 0., 0.])
    """
    if temperature < 0:
        raise ValueError(f"temperature must be >= 0; received {temperature}")
    if not isinstance(top_k, int) or top_k < 0:
        raise ValueError(f"top_k must be an integer >= 0; received {top_k}")
    if not 0 < top_p <= 1:
        raise ValueError(f"top_p must be in (0, 1]; received {top_p}")
    logits = np.asarray(logits, "float64")
    if temperature == 0:
        greedy = np.zeros_like(logits)
        np.put_along_axis(greedy, logits.argmax(-1)[..., None], 1.0, axis=-1)
        return greedy
    scaled = logits / temperature
    probabilities = np.exp(scaled - scaled.max(-1, keepdims=True))
    probabilities /= probabilities.sum(-1, keepdims=True)
    # Most probable first; a stable sort keeps the lower id first on ties.
    order = np.argsort(-probabilities, axis=-1, kind="stable")
    ranked = np.take_along_axis(probabilities, order, axis=-1)
    keep = np.ones_like(ranked, dtype=bool)
    if top_k:
        keep[..., top_k:] = False
    if top_p < 1:
        # A token stays if the tokens ranked above it hold less than top_p.
        mass_before = np.cumsum(ranked, axis=-1) - ranked
        keep &= mass_before < top_p
    kept = np.zeros_like(keep)
    np.put_along_axis(kept, order, keep, axis=-1)
    probabilities = np.where(kept, probabilities, 0.0)
    return probabilities / probabilities.sum(-1, keepdims=True)


def sample_next(
    logits: Any,
    rng: np.random.Generator,
    temperature: float = 1.0,
    top_k: int = 0,
    top_p: float = 1.0,
) -> np.ndarray:
    """One token id per row of (batch, vocabulary) logits, drawn with `rng`."""
    probabilities = sampling_probabilities(logits, temperature, top_k, top_p)
    probabilities = probabilities.reshape(-1, probabilities.shape[-1])
    # Inverse-CDF draw: one uniform number per row.
    cumulative = np.cumsum(probabilities, axis=-1)
    draws = rng.random((len(cumulative), 1)) * cumulative[:, -1:]
    ids = (cumulative <= draws).sum(-1)
    return np.minimum(ids, probabilities.shape[-1] - 1).reshape(np.shape(logits)[:-1])


def sample_sequence(
    next_logits: Callable[[np.ndarray], Any],
    prompt_ids: Sequence[int],
    length: int,
    *,
    temperature: float = 1.0,
    top_k: int = 0,
    top_p: float = 1.0,
    seed: int | None = None,
    stop_id: int | None = None,
) -> list[int]:
    """Generates `length` tokens after `prompt_ids`, one at a time.

    Args:
        next_logits: called with (1, steps) int32 ids, first the whole prompt and
            then each sampled token as (1, 1); returns the logits of the token that
            follows, (1, vocabulary) (or (1, steps, vocabulary): the last step is
            used). It must carry its own state between calls, e.g. a stateful
            language model.
        prompt_ids: the ids that condition the text (at least one).
        length: how many tokens to generate.
        temperature, top_k, top_p: as for `sampling_probabilities`.
        seed: seed of the draws (same seed, same text).
        stop_id: stop after generating this id (it is included).

    Returns:
        The generated ids (not the prompt).
    """
    return list(
        sampled_tokens(
            next_logits,
            prompt_ids,
            length,
            temperature=temperature,
            top_k=top_k,
            top_p=top_p,
            seed=seed,
            stop_id=stop_id,
        )
    )


def sampled_tokens(
    next_logits: Callable[[np.ndarray], Any],
    prompt_ids: Sequence[int],
    length: int,
    *,
    temperature: float = 1.0,
    top_k: int = 0,
    top_p: float = 1.0,
    seed: int | None = None,
    stop_id: int | None = None,
) -> Iterator[int]:
    """`sample_sequence` one id at a time, as each is drawn (to stream a text)."""
    if not prompt_ids:
        raise ValueError("prompt_ids must hold at least one id")
    if length < 0:
        raise ValueError(f"length must be >= 0; received {length}")
    rng = np.random.default_rng(seed)
    ids = np.asarray([list(prompt_ids)], "int32")  # (1, prompt length)
    for _ in range(length):
        logits = np.asarray(next_logits(ids))
        if logits.ndim == 3:
            logits = logits[:, -1]  # (1, vocabulary)
        token = int(sample_next(logits, rng, temperature, top_k, top_p)[0])
        yield token
        if token == stop_id:
            break
        ids = np.asarray([[token]], "int32")
