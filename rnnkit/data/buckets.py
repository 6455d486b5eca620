"""Length bucketing for `tf.data`: batches of similar length, with a known epoch length.

Recurrent layers run one step per time step of the padded batch, so batching examples of
similar length together saves the steps that padding to the longest example of a random
batch would cost. `tf.data.Dataset.bucket_by_sequence_length` does the grouping but
leaves the number of batches unknown, so Keras guesses the epoch length and warns that
the input "ran out of data"; the number is known in advance, and is asserted here.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import tensorflow as tf


def bucket_by_length(
    dataset: tf.data.Dataset,
    length_of: Callable[..., tf.Tensor],
    lengths: np.ndarray,
    boundaries: Sequence[int],
    batch_size: int,
) -> tf.data.Dataset:
    """Batches `dataset` by length, with the epoch length (in batches) asserted.

    Args:
        dataset: unbatched elements, usually shuffled first.
        length_of: maps an element's components to its length (an int32 scalar).
        lengths: the value `length_of` gives for every element, in any order.
        boundaries: increasing bucket boundaries; bucket k holds the lengths in
            [boundaries[k - 1], boundaries[k]), the last one everything longer.
        batch_size: examples per batch in every bucket.

    Returns:
        Batches of up to `batch_size` examples from one bucket each. Every bucket
        yields ceil(size / batch_size) batches whatever the order of the elements,
        which is the cardinality asserted.
    """
    batched = dataset.bucket_by_sequence_length(
        length_of,
        bucket_boundaries=list(boundaries),
        bucket_batch_sizes=[batch_size] * (len(boundaries) + 1),
    )
    bucket_sizes = np.bincount(
        np.searchsorted(boundaries, lengths, side="right"),
        minlength=len(boundaries) + 1,
    )
    batches = int(np.sum(-(-bucket_sizes // batch_size)))  # ceil, bucket by bucket
    return batched.apply(tf.data.experimental.assert_cardinality(batches))
