"""What greedy and beam search share: the model interface they drive, the result,
the length limits and the compiled time loop.

Greedy and beam search for encoder-decoder models, and sampling for language models.

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

A model whose decoder state grows with the output, such as the key/value cache of
`rnnkit.models.TransformerEncoderDecoder`, takes the number of steps the search may
run as `initial_decoder_state(memory, max_length)`, so that the state keeps its
shape through the time loop; beam search reorders it with the beams like any state.

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
"""

from __future__ import annotations

import dataclasses
import inspect
import math
import weakref
from collections.abc import Callable, Sequence
from typing import Any

import keras
import numpy as np
from keras import ops

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


def _settings(
    *,
    start_id: int,
    end_id: int,
    pad_id: int = 0,
    suppress_ids: Sequence[int] = (),
    max_length_ratio: float = 1.5,
    max_length_offset: int = 10,
    length_penalty_alpha: float = 0.0,
    beam_width: int = 1,
    n_best: int = 1,
    max_length: int | None = None,
) -> _Settings:
    """The `_Settings` of the searches' keyword arguments (their names and defaults):
    one place for `greedy_search`, `greedy_loop` and `beam_search`."""
    return _Settings(
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


def _run(model, source_ids, settings: _Settings, loop: Callable) -> SearchResult:
    """Runs the compiled `loop` (the greedy or the beam loop) on `source_ids`."""
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
    key = (settings, loop, source_shape, dtype)
    if key not in cache:
        # A weak reference, so that the cache does not keep the model alive.
        model_ref = weakref.ref(model)
        cache[key] = _compile(
            lambda ids: loop(model_ref(), ids, settings), source_ids, settings
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
        # autograph=False: the loops are keras.ops written for jax.jit too, with no
        # Python branch on a tensor to convert; converting them cost a first search
        # seconds of Python for nothing.
        return tf.function(function, input_signature=signature, autograph=False)
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


def _initial_state(model, memory, max_steps):
    """`initial_decoder_state(memory)`, with `max_length=max_steps` for a model whose
    state holds one slot per generated token."""
    parameters = inspect.signature(model.initial_decoder_state).parameters
    if "max_length" in parameters:
        return model.initial_decoder_state(memory, max_length=max_steps)
    return model.initial_decoder_state(memory)


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
