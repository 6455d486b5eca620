"""Pieces shared by the attention layers: masks, masked softmax, single-step queries.

The attention layers all follow `keras.layers.MultiHeadAttention`'s mask contract:
boolean masks where `True` means "may attend", combined with a logical AND into one
mask of shape (batch, Tq, Tv):

- `query_mask` (batch, Tq) -> (batch, Tq, 1): a padded query attends to nothing;
- `value_mask` and `key_mask` (batch, Tv) -> (batch, 1, Tv): nobody attends to a
  padded key;
- `attention_mask` (batch, Tq, Tv), given by the caller;
- `use_causal_mask` -> (1, Tq, Tv), lower triangular: query i sees keys j <= i.

A row with no key left to attend to (a padded query, or a source that is all
padding) gets all-zero weights, so its context vector is exactly zero.
"""

import keras
from keras import initializers, ops

_WEIGHT_OPTIONS = {
    "kernel_initializer": keras.initializers,
    "bias_initializer": keras.initializers,
    "kernel_regularizer": keras.regularizers,
    "bias_regularizer": keras.regularizers,
    "kernel_constraint": keras.constraints,
    "bias_constraint": keras.constraints,
}


def set_weight_options(layer, **options) -> None:
    """Resolves and stores the kernel/bias initializers, regularizers, constraints."""
    for name, module in _WEIGHT_OPTIONS.items():
        setattr(layer, name, module.get(options[name]))


def weight_options_config(layer) -> dict:
    """The serialized kernel/bias initializers, regularizers and constraints."""
    return {
        name: module.serialize(getattr(layer, name))
        for name, module in _WEIGHT_OPTIONS.items()
    }


def clone_initializer(initializer):
    """A fresh copy of `initializer`.

    An unseeded Keras initializer draws one default seed when it is created and
    reuses it, so sharing one instance between two weights of the same shape would
    give them identical values (Keras' MultiHeadAttention clones for this reason).
    """
    initializer = initializers.get(initializer)
    return initializer.__class__.from_config(initializer.get_config())


def large_negative(dtype):
    """A score that softmax turns into an exact zero, representable in `dtype`."""
    return -3e4 if keras.backend.standardize_dtype(dtype) == "float16" else -1e9


def causal_mask(query_length, value_length):
    """Boolean (1, Tq, Tv) mask, True where key position j <= query position i."""
    query_positions = ops.arange(query_length)[:, None]  # (Tq, 1)
    key_positions = ops.arange(value_length)[None, :]  # (1, Tv)
    return ops.expand_dims(key_positions <= query_positions, 0)  # (1, Tq, Tv)


def combine_masks(
    query,
    value,
    query_mask=None,
    value_mask=None,
    key_mask=None,
    attention_mask=None,
    use_causal_mask=False,
):
    """AND of every mask given, broadcastable to (batch, Tq, Tv); None if none."""
    masks = []
    if query_mask is not None:
        query_mask = ops.cast(query_mask, "bool")
        masks.append(ops.expand_dims(query_mask, -1))  # (batch, Tq, 1)
    for padding_mask in (value_mask, key_mask):
        if padding_mask is not None:
            padding_mask = ops.cast(padding_mask, "bool")
            masks.append(ops.expand_dims(padding_mask, -2))  # (batch, 1, Tv)
    if attention_mask is not None:
        masks.append(ops.cast(attention_mask, "bool"))  # (batch, Tq, Tv)
    if use_causal_mask:
        masks.append(causal_mask(ops.shape(query)[1], ops.shape(value)[1]))
    if not masks:
        return None
    combined = masks[0]
    for mask in masks[1:]:
        combined = ops.logical_and(combined, mask)
    return combined


def masked_softmax(scores, mask=None):
    """Softmax over the last axis in which masked-out positions get exactly zero.

    A large negative score (not -inf, which turns a fully masked row into NaN)
    underflows to zero in `exp`; rows with nothing left to attend to would then be
    uniform, so the weights are zeroed where the mask is False afterwards.
    """
    if mask is None:
        return ops.softmax(scores, axis=-1)
    scores = ops.where(mask, scores, large_negative(scores.dtype))
    weights = ops.softmax(scores, axis=-1)
    return ops.where(mask, weights, ops.zeros((), weights.dtype))


def as_query_sequence(query, query_mask, attention_mask, use_causal_mask):
    """Turns a single-step query (batch, dim) into a sequence of one query.

    Returns the query, its masks and whether it was a single step, so the caller can
    drop the length-1 query axis from its results again.
    """
    if len(query.shape) != 2:
        return query, query_mask, attention_mask, False
    if use_causal_mask:
        raise ValueError(
            "`use_causal_mask=True` needs a sequence of queries (batch, Tq, dim); "
            f"received a single-step query of shape {query.shape}."
        )
    query = ops.expand_dims(query, 1)  # (batch, 1, dim)
    if query_mask is not None:
        query_mask = ops.expand_dims(query_mask, 1)  # (batch, 1)
    if attention_mask is not None:
        attention_mask = ops.expand_dims(attention_mask, 1)  # (batch, 1, Tv)
    return query, query_mask, attention_mask, True


def check_value_and_key(layer_name, value_shape, key_shape):
    """Raises a ValueError unless value and key are (batch, Tv, ...) alike."""
    if len(value_shape) != 3 or len(key_shape) != 3:
        raise ValueError(
            f"{layer_name} expects `value` and `key` of shape (batch, Tv, dim). "
            f"Received: value_shape={value_shape}, key_shape={key_shape}"
        )
    if value_shape[1] is not None and key_shape[1] is not None:
        if value_shape[1] != key_shape[1]:
            raise ValueError(
                f"{layer_name} needs one key per value: `value` and `key` must "
                f"have the same length. Received: value_shape={value_shape}, "
                f"key_shape={key_shape}"
            )
