"""rnnkit.data.buckets: length-bucketed batches with the epoch length asserted."""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from rnnkit.data.buckets import bucket_by_length


def test_batches_stay_in_their_bucket_and_the_epoch_length_is_exact():
    lengths = np.random.default_rng(0).integers(1, 120, size=333).astype("int32")
    dataset = tf.data.Dataset.from_tensor_slices(lengths).shuffle(
        len(lengths), seed=1, reshuffle_each_iteration=True
    )
    boundaries = [20, 40, 80]
    batches = bucket_by_length(dataset, lambda length: length, lengths, boundaries, 16)
    expected = int(batches.cardinality())
    bucket_of = np.searchsorted(boundaries, lengths, side="right")
    assert expected == sum(-(-np.sum(bucket_of == k) // 16) for k in range(4))
    for _ in range(2):  # a reshuffled epoch has as many batches
        epoch = [batch.numpy() for batch in batches]
        assert len(epoch) == expected
        assert sorted(np.concatenate(epoch).tolist()) == sorted(lengths.tolist())
        for batch in epoch:
            assert len(set(np.searchsorted(boundaries, batch, side="right"))) == 1
