"""Greedy and beam search for encoder-decoder models, and sampling for language models.

Both searches drive any model that offers three methods (as
`rnnkit.models.EncoderDecoder` does):

- `encode(source_ids, training=False) -> memory`: a nested structure of batch-major
  tensors computed once per source sentence (encoder states, projected keys, mask);
- `initial_decoder_state(memory) -> state`: a nested structure of batch-major tensors;
- `decode_step(token_ids, state, memory, training=False) -> (logits, state, weights)`:
  one decoder step for the previous tokens `(batch,)`, giving next-token logits
  `(batch, vocabulary)`, the new state and attention weights `(batch, source_length)`.

A model may also offer `decoder_weights() -> weights` and take them as
`decode_step(..., weights=weights)`: what every step reads from the decoder's
variables but does not change (the rnnkit cells' kernels split per gate), computed once
per search before the time loop instead of once per step.

A model whose attention does not run over the source tokens (an image captioner attends
over the positions of a feature map) also offers `attention_length(memory) -> int`, the
number of positions its weights cover. Such a source need not be token ids: with
`max_length` set, the source is any batch-major numeric array (images, image features)
and every hypothesis stops after `max_length` tokens.

The time loop is a `keras.ops.while_loop` whose tensors keep their shapes from step to
step (outputs are written into preallocated buffers), and the whole search is compiled
once per model and setting: a `tf.function` traced once for every input shape on the
TensorFlow backend, `jax.jit` (once per input shape) on JAX. No Python code runs per
decoding step.

A hypothesis stops at the end token or at its length limit,
`ceil(max_length_ratio * source_length) + max_length_offset` tokens (the end token
included), or `max_length` tokens when that is given, whichever comes first. Beam
search ranks hypotheses by the GNMT score (Wu et al. 2016): log P(Y | X) / lp(Y) with
lp(Y) = ((5 + |Y|) / 6) ** alpha, where |Y| counts the generated tokens including the
end token. Finished hypotheses stay in the beam with a frozen score, so beam width 1
is exactly greedy search.

Sampling (`sampling_probabilities`, `sample_next`, `sample_sequence`) draws the next
token from the softmax of the logits divided by a temperature, restricted to the `top_k`
most probable tokens and to the nucleus, the smallest set of most probable tokens whose
probability reaches `top_p` (Holtzman et al. 2020), then renormalised. Temperature 0 is
greedy decoding. It runs in numpy with a seeded `numpy.random.Generator`, so the same
seed gives the same text.
"""

from __future__ import annotations

import dataclasses
import math
import weakref
from collections.abc import Callable, Sequence
from typing import Any

import keras
import numpy as np
from keras import ops, tree

# Log-probability of an impossible continuation. Finite, so sums never give NaN.
_IMPOSSIBLE = -1e9

_compiled_searches: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


@dataclasses.dataclass(frozen=True)
class SearchResult:
    """What a search returns, as numpy arrays.

    Attributes:
        tokens: `(batch, n_best, max_steps)` generated ids, best hypothesis first,
            the end token included, padded with 0 after it.
        lengths: `(batch, n_best)` generated tokens per hypothesis (end included).
        log_probs: `(batch, n_best)` log P(Y | X) of each hypothesis.
        scores: `(batch, n_best)` length-normalised scores, log_probs / lp(Y);
            `-inf` marks an empty slot (fewer distinct hypotheses than asked for).
        attention: `(batch, max_steps, source_length)` attention weights of the best
            hypothesis, one row per generated token (zero rows after it ends).
    """

    tokens: np.ndarray
    lengths: np.ndarray
    log_probs: np.ndarray
    scores: np.ndarray
    attention: np.ndarray


def length_penalty(lengths: Any, alpha: float) -> Any:
    """GNMT length penalty ((5 + |Y|) / 6) ** alpha (Wu et al. 2016, eq. 14).

    Example:
    >>> float(length_penalty(7, 0.5))  # ((5 + 7) / 6) ** 0.5, the square root of 2
    1.414...
    """
    return ops.power((5.0 + ops.cast(lengths, "float32")) / 6.0, alpha)


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
    settings = _Settings(
        start_id,
        end_id,
        pad_id,
        tuple(suppress_ids),
        float(max_length_ratio),
        int(max_length_offset),
        float(length_penalty_alpha),
        beam_width=1,
        n_best=1,
        max_length=max_length,
    )
    return _run(model, source_ids, settings, greedy=True)


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
    settings = _Settings(
        start_id,
        end_id,
        pad_id,
        tuple(suppress_ids),
        float(max_length_ratio),
        int(max_length_offset),
        float(length_penalty_alpha),
        beam_width,
        n_best,
        max_length,
    )
    return _run(model, source_ids, settings, greedy=False)


@dataclasses.dataclass(frozen=True)
class _Settings:
    start_id: int
    end_id: int
    pad_id: int
    suppress_ids: tuple[int, ...]
    max_length_ratio: float
    max_length_offset: int
    alpha: float
    beam_width: int
    n_best: int
    max_length: int | None = None


def _run(model, source_ids, settings: _Settings, greedy: bool) -> SearchResult:
    if settings.max_length_ratio < 0 or settings.max_length_offset < 0:
        raise ValueError(
            "max_length_ratio and max_length_offset must be >= 0; received "
            f"{settings.max_length_ratio} and {settings.max_length_offset}"
        )
    source_ids = np.asarray(source_ids)
    if settings.max_length is not None:
        if not isinstance(settings.max_length, int) or settings.max_length < 1:
            raise ValueError(
                f"max_length must be a positive integer; received {settings.max_length}"
            )
        if source_ids.ndim < 1 or not np.issubdtype(source_ids.dtype, np.number):
            raise ValueError(
                "the source must be a batch-major numeric array; received shape "
                f"{source_ids.shape} of {source_ids.dtype}"
            )
        dtype = "int32" if np.issubdtype(source_ids.dtype, np.integer) else "float32"
    elif source_ids.ndim != 2 or not np.issubdtype(source_ids.dtype, np.integer):
        raise ValueError(
            "source_ids must be a 2-D integer array (batch, source_length); "
            f"received shape {source_ids.shape} of {source_ids.dtype}"
        )
    else:
        dtype = "int32"
    source_ids = source_ids.astype(dtype)
    cache = _compiled_searches.setdefault(model, {})
    # Token ids of any length share one trace; other sources trace once per shape.
    source_shape = None if settings.max_length is None else source_ids.shape[1:]
    key = (settings, greedy, source_shape, dtype)
    if key not in cache:
        search = _greedy if greedy else _beam
        # A weak reference, so that the cache does not keep the model alive.
        model_ref = weakref.ref(model)
        cache[key] = _compile(
            lambda ids: search(model_ref(), ids, settings), source_ids, settings
        )
    outputs = cache[key](ops.convert_to_tensor(source_ids))
    return SearchResult(**{k: ops.convert_to_numpy(v) for k, v in outputs.items()})


def _compile(function: Callable, source: np.ndarray, settings: _Settings) -> Callable:
    backend = keras.backend.backend()
    if backend == "tensorflow":
        import tensorflow as tf

        # One trace for every batch size and source length: the loop's buffers take
        # their sizes from the input at run time. Other sources (images, features)
        # keep their shape past the batch axis.
        shape = (
            [None, None] if settings.max_length is None else [None, *source.shape[1:]]
        )
        signature = [tf.TensorSpec(shape, source.dtype)]
        return tf.function(function, input_signature=signature)
    if backend == "jax":
        import jax

        return jax.jit(function)
    return function


def _length_limits(source_ids, settings: _Settings):
    """Per-sentence token limits `(batch,)` and the buffer length (their bound)."""
    if settings.max_length is not None:
        limits = ops.full((ops.shape(source_ids)[0],), settings.max_length, "int32")
        # The attention length of a model without `attention_length`: its tokens.
        source_length = source_ids.shape[1] if len(source_ids.shape) > 1 else None
        if source_length is None and len(source_ids.shape) > 1:
            source_length = ops.shape(source_ids)[1]
        return limits, settings.max_length, source_length
    is_token = ops.cast(ops.not_equal(source_ids, settings.pad_id), "float32")
    source_lengths = ops.sum(is_token, axis=1)  # (batch,)
    limits = ops.cast(ops.ceil(settings.max_length_ratio * source_lengths), "int32")
    limits = ops.maximum(limits + settings.max_length_offset, 1)  # (batch,)
    source_length = source_ids.shape[1]
    if source_length is None:  # a dynamic dimension under tf.function
        return limits, ops.max(limits), ops.shape(source_ids)[1]
    # A static bound, which jax.jit needs for the buffers; the extra step absorbs
    # float32 rounding in `limits`, which are clipped to it.
    max_steps = (
        math.ceil(settings.max_length_ratio * source_length)
        + settings.max_length_offset
        + 1
    )
    return ops.minimum(limits, max_steps), max_steps, source_length


def _attention_length(model, memory, source_length):
    """Positions the attention weights cover: the model's own count, or the source's."""
    if hasattr(model, "attention_length"):
        return model.attention_length(memory)
    return source_length


def _decoder_weights(model):
    """The model's per-search decoder weights (`decoder_weights()`), if it has them."""
    return model.decoder_weights() if hasattr(model, "decoder_weights") else None


def _next_token_log_probs(
    model, tokens, state, memory, settings: _Settings, decoder_weights=None
):
    if decoder_weights is None:
        logits, state, weights = model.decode_step(
            tokens, state, memory, training=False
        )
    else:
        logits, state, weights = model.decode_step(
            tokens, state, memory, training=False, weights=decoder_weights
        )
    log_probs = ops.log_softmax(ops.cast(logits, "float32"), axis=-1)
    if settings.suppress_ids:
        vocabulary_size = log_probs.shape[-1]
        suppressed = np.zeros((vocabulary_size,), "float32")
        suppressed[list(settings.suppress_ids)] = _IMPOSSIBLE
        log_probs = log_probs + suppressed  # (rows, vocabulary)
    return log_probs, state, ops.cast(weights, "float32")


def _time_slot(step, max_steps):
    """(max_steps,) float32 one-hot of `step`, for writing into a buffer."""
    return ops.cast(ops.equal(ops.arange(max_steps), step), "float32")


def _greedy(model, source_ids, settings: _Settings):
    batch_size = ops.shape(source_ids)[0]
    limits, max_steps, source_length = _length_limits(source_ids, settings)
    memory = model.encode(source_ids, training=False)
    source_length = _attention_length(model, memory, source_length)
    state = model.initial_decoder_state(memory)
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


def _beam(model, source_ids, settings: _Settings):
    beam_width = settings.beam_width
    batch_size = ops.shape(source_ids)[0]
    limits, max_steps, source_length = _length_limits(source_ids, settings)
    memory = model.encode(source_ids, training=False)
    source_length = _attention_length(model, memory, source_length)
    # Every sentence's memory repeated beam_width times: row b * beam_width + k.
    memory = tree.map_structure(lambda x: ops.repeat(x, beam_width, axis=0), memory)
    state = model.initial_decoder_state(memory)
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


# -- Sampling ------------------------------------------------------------------------


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
    if not prompt_ids:
        raise ValueError("prompt_ids must hold at least one id")
    if length < 0:
        raise ValueError(f"length must be >= 0; received {length}")
    rng = np.random.default_rng(seed)
    generated: list[int] = []
    ids = np.asarray([list(prompt_ids)], "int32")  # (1, prompt length)
    for _ in range(length):
        logits = np.asarray(next_logits(ids))
        if logits.ndim == 3:
            logits = logits[:, -1]  # (1, vocabulary)
        token = int(sample_next(logits, rng, temperature, top_k, top_p)[0])
        generated.append(token)
        if token == stop_id:
            break
        ids = np.asarray([[token]], "int32")
    return generated
