"""Beam search with the GNMT length penalty (see `rnnkit.decoding.search` for the
model interface, the length limits and the score)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import keras
import numpy as np
from keras import ops, tree

from rnnkit.decoding.search import (
    _IMPOSSIBLE,
    SearchResult,
    _attention_length,
    _decoder_weights,
    _initial_state,
    _length_limits,
    _next_token_log_probs,
    _run,
    _Settings,
    _settings,
    _time_slot,
    length_penalty,
)


def beam_search(
    model: keras.Model,
    source_ids: Any,
    *,
    start_id: int,
    end_id: int,
    beam_width: int = 5,
    n_best: int = 1,
    length_penalty_alpha: float = 0.6,
    pad_id: int = 0,
    suppress_ids: Sequence[int] = (),
    max_length_ratio: float = 1.5,
    max_length_offset: int = 10,
    max_length: int | None = None,
) -> SearchResult:
    """Keeps the `beam_width` best-scoring hypotheses of every sentence at each step.

    All sentences of the batch are searched together: beams are folded into the batch
    axis, so the model runs once per step on `batch * beam_width` rows.

    Args:
        model, source_ids, start_id, end_id, pad_id, suppress_ids: as for
            `greedy_search`.
        max_length_ratio, max_length_offset, max_length: as for `greedy_search`.
        beam_width: hypotheses kept per sentence (1 gives greedy search).
        n_best: how many of the final hypotheses to return, best first.
        length_penalty_alpha: alpha of the GNMT length penalty (0 ranks by log
            probability; 0.6 to 1.0 favour longer translations).

    Returns:
        A `SearchResult`.
    """
    if not isinstance(beam_width, int) or beam_width < 1:
        raise ValueError(
            f"beam_width must be a positive integer; received {beam_width}"
        )
    if not isinstance(n_best, int) or not 1 <= n_best <= beam_width:
        raise ValueError(
            f"n_best must be an integer in [1, beam_width={beam_width}]; "
            f"received {n_best}"
        )
    if length_penalty_alpha < 0:
        raise ValueError(
            f"length_penalty_alpha must be >= 0; received {length_penalty_alpha}"
        )
    settings = _settings(
        start_id=start_id,
        end_id=end_id,
        pad_id=pad_id,
        suppress_ids=suppress_ids,
        max_length_ratio=max_length_ratio,
        max_length_offset=max_length_offset,
        length_penalty_alpha=length_penalty_alpha,
        beam_width=beam_width,
        n_best=n_best,
        max_length=max_length,
    )
    return _run(model, source_ids, settings, _beam)


def _beam(model, source_ids, settings: _Settings):
    beam_width = settings.beam_width
    batch_size = ops.shape(source_ids)[0]
    limits, max_steps, source_length = _length_limits(source_ids, settings)
    memory = model.encode(source_ids, training=False)
    source_length = _attention_length(model, memory, source_length)
    # Every sentence's memory repeated beam_width times: row b * beam_width + k.
    memory = tree.map_structure(lambda x: ops.repeat(x, beam_width, axis=0), memory)
    state = _initial_state(model, memory, max_steps)
    decoder_weights = _decoder_weights(model)
    # Row offsets that turn (batch, beam) parent indices into rows of the folded batch.
    row_offsets = ops.arange(batch_size, dtype="int32")[:, None] * beam_width

    def gather_rows(x, parents):
        rows = ops.reshape(parents + row_offsets, (-1,))  # (batch * beam,)
        return ops.take(x, rows, axis=0)

    def step(t, tokens, state, finished, log_prob, lengths, sequence, attention):
        step_log_probs, state, weights = _next_token_log_probs(
            model, tokens, state, memory, settings, decoder_weights
        )
        vocabulary_size = step_log_probs.shape[-1]
        step_log_probs = ops.reshape(
            step_log_probs, (batch_size, beam_width, vocabulary_size)
        )
        # A finished hypothesis has one continuation, padding, that costs nothing.
        frozen = np.full((vocabulary_size,), _IMPOSSIBLE, "float32")
        frozen[settings.end_id] = 0.0
        step_log_probs = ops.where(finished[:, :, None], frozen, step_log_probs)
        candidate_log_probs = log_prob[:, :, None] + step_log_probs  # (b, k, vocab)
        candidate_lengths = lengths + ops.cast(ops.logical_not(finished), "int32")
        candidate_scores = (
            candidate_log_probs
            / length_penalty(candidate_lengths, settings.alpha)[:, :, None]
        )  # (batch, beam, vocab)
        flat_scores = ops.reshape(candidate_scores, (batch_size, -1))
        _, chosen = ops.top_k(flat_scores, k=beam_width)  # (batch, beam)
        chosen = ops.cast(chosen, "int32")
        parents = chosen // vocabulary_size
        new_tokens = chosen % vocabulary_size
        log_prob = ops.take_along_axis(
            ops.reshape(candidate_log_probs, (batch_size, -1)), chosen, axis=1
        )
        parent_finished = ops.take_along_axis(finished, parents, axis=1)
        alive = ops.logical_not(parent_finished)
        alive_float = ops.cast(alive, "float32")
        new_tokens = ops.where(alive, new_tokens, settings.pad_id)
        lengths = ops.take_along_axis(candidate_lengths, parents, axis=1)
        slot = _time_slot(t, max_steps)
        sequence = ops.take_along_axis(sequence, parents[:, :, None], axis=1)
        sequence = sequence + ops.cast(slot, "int32") * new_tokens[:, :, None]
        weights = ops.reshape(
            gather_rows(weights, parents), (batch_size, beam_width, 1, -1)
        )
        attention = ops.take_along_axis(attention, parents[:, :, None, None], axis=1)
        attention = attention + (
            slot[:, None] * alive_float[:, :, None, None] * weights
        )  # (batch, beam, max_steps, source_length)
        ends = ops.logical_or(
            ops.equal(new_tokens, settings.end_id), (t + 1 >= limits)[:, None]
        )
        finished = ops.logical_or(parent_finished, ends)
        state = tree.map_structure(lambda x: gather_rows(x, parents), state)
        tokens = ops.reshape(new_tokens, (-1,))
        return t + 1, tokens, state, finished, log_prob, lengths, sequence, attention

    def keep_going(t, tokens, state, finished, log_prob, *_):
        dead = log_prob < _IMPOSSIBLE / 2
        done = ops.all(ops.logical_or(finished, dead))
        return ops.logical_and(t < ops.max(limits), ops.logical_not(done))

    # Only the first copy of each sentence starts alive, so the first step expands
    # one hypothesis instead of beam_width identical ones.
    first_only = np.full((1, beam_width), _IMPOSSIBLE, "float32")
    first_only[0, 0] = 0.0
    loop_vars = (
        ops.convert_to_tensor(0, "int32"),
        ops.full((batch_size * beam_width,), settings.start_id, "int32"),
        state,
        ops.zeros((batch_size, beam_width), "bool"),
        ops.zeros((batch_size, beam_width), "float32") + first_only,
        ops.zeros((batch_size, beam_width), "int32"),
        ops.zeros((batch_size, beam_width, max_steps), "int32"),
        ops.zeros((batch_size, beam_width, max_steps, source_length), "float32"),
    )
    *_, log_prob, lengths, sequence, attention = ops.while_loop(
        keep_going, step, loop_vars
    )
    scores = log_prob / length_penalty(lengths, settings.alpha)
    scores = ops.where(log_prob < _IMPOSSIBLE / 2, -np.inf, scores)
    best_scores, order = ops.top_k(scores, k=settings.n_best)  # (batch, n_best)
    order = ops.cast(order, "int32")
    return {
        "tokens": ops.take_along_axis(sequence, order[:, :, None], axis=1),
        "lengths": ops.take_along_axis(lengths, order, axis=1),
        "log_probs": ops.take_along_axis(log_prob, order, axis=1),
        "scores": best_scores,
        "attention": ops.take_along_axis(attention, order[:, :1, None, None], axis=1)[
            :, 0
        ],
    }
