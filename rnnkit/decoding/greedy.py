"""Greedy search: the most probable next token at every step (see
`rnnkit.decoding.search` for the model interface and the length limits)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import keras
from keras import ops

from rnnkit.decoding.search import (
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


def greedy_search(
    model: keras.Model,
    source_ids: Any,
    *,
    start_id: int,
    end_id: int,
    pad_id: int = 0,
    suppress_ids: Sequence[int] = (),
    max_length_ratio: float = 1.5,
    max_length_offset: int = 10,
    length_penalty_alpha: float = 0.0,
    max_length: int | None = None,
) -> SearchResult:
    """Picks the most probable next token at every step.

    Args:
        model: an encoder-decoder offering the three methods in the module docstring.
        source_ids: `(batch, source_length)` int ids, right-padded with `pad_id`.
        start_id: the id fed as the first previous token.
        end_id: the id that ends a hypothesis.
        pad_id: the padding id of `source_ids` and of the returned tokens.
        suppress_ids: ids never generated (e.g. padding and the start token).
        max_length_ratio: hypotheses stop after
            `ceil(max_length_ratio * source_length) + max_length_offset` tokens.
        max_length_offset: see `max_length_ratio`.
        length_penalty_alpha: alpha of the GNMT length penalty, used only for the
            returned `scores`.
        max_length: if given, every hypothesis stops after this many tokens instead
            (the length ratio and offset are not used), and `source_ids` may be any
            batch-major numeric array, e.g. images or image features.

    Returns:
        A `SearchResult` with `n_best = 1`.
    """
    settings = _settings(
        start_id=start_id,
        end_id=end_id,
        pad_id=pad_id,
        suppress_ids=suppress_ids,
        max_length_ratio=max_length_ratio,
        max_length_offset=max_length_offset,
        length_penalty_alpha=length_penalty_alpha,
        max_length=max_length,
    )
    return _run(model, source_ids, settings, _greedy)


def greedy_loop(model: keras.Model, source: Any, **options: Any) -> dict[str, Any]:
    """Greedy search as tensors, to be traced into a graph of your own (the
    SavedModels of `rnnkit export` run it inside a signature).

    The same loop as `greedy_search`, without its compilation cache and without
    converting the result to numpy: call it inside a `tf.function` (or `jax.jit`).

    Args:
        model: as for `greedy_search`.
        source: the source ids (or features, with `max_length`), a tensor.
        **options: `greedy_search`'s keyword arguments, `start_id` and `end_id`
            required.

    Returns:
        A dict of tensors: "tokens" `(batch, 1, max_steps)`, "lengths" and
        "log_probs" `(batch, 1)`, "scores" `(batch, 1)` (the log probabilities
        over the length penalty), "attention" `(batch, max_steps, source_length)`.
    """
    return _greedy(model, source, _settings(**options))


def _greedy(model, source_ids, settings: _Settings):
    batch_size = ops.shape(source_ids)[0]
    limits, max_steps, source_length = _length_limits(source_ids, settings)
    memory = model.encode(source_ids, training=False)
    source_length = _attention_length(model, memory, source_length)
    state = _initial_state(model, memory, max_steps)
    decoder_weights = _decoder_weights(model)

    def step(t, tokens, state, finished, log_prob, lengths, sequence, attention):
        step_log_probs, state, weights = _next_token_log_probs(
            model, tokens, state, memory, settings, decoder_weights
        )
        best = ops.cast(ops.argmax(step_log_probs, axis=-1), "int32")  # (batch,)
        best_log_prob = ops.take_along_axis(step_log_probs, best[:, None], axis=1)[:, 0]
        alive = ops.logical_not(finished)
        alive_float = ops.cast(alive, "float32")
        tokens = ops.where(alive, best, settings.pad_id)
        log_prob = log_prob + alive_float * best_log_prob
        lengths = lengths + ops.cast(alive, "int32")
        slot = _time_slot(t, max_steps)
        sequence = sequence + ops.cast(slot, "int32")[None, :] * tokens[:, None]
        attention = attention + (
            slot[None, :, None] * (alive_float[:, None] * weights)[:, None, :]
        )  # (batch, max_steps, source_length)
        finished = ops.logical_or(
            finished,
            ops.logical_or(ops.equal(tokens, settings.end_id), t + 1 >= limits),
        )
        return t + 1, tokens, state, finished, log_prob, lengths, sequence, attention

    def keep_going(t, tokens, state, finished, *_):
        return ops.logical_and(t < ops.max(limits), ops.logical_not(ops.all(finished)))

    loop_vars = (
        ops.convert_to_tensor(0, "int32"),
        ops.full((batch_size,), settings.start_id, "int32"),
        state,
        ops.zeros((batch_size,), "bool"),
        ops.zeros((batch_size,), "float32"),
        ops.zeros((batch_size,), "int32"),
        ops.zeros((batch_size, max_steps), "int32"),
        ops.zeros((batch_size, max_steps, source_length), "float32"),
    )
    *_, log_prob, lengths, sequence, attention = ops.while_loop(
        keep_going, step, loop_vars
    )
    return {
        "tokens": sequence[:, None, :],
        "lengths": lengths[:, None],
        "log_probs": log_prob[:, None],
        "scores": (log_prob / length_penalty(lengths, settings.alpha))[:, None],
        "attention": attention,
    }
