"""Tests for rnnkit.data.token_stream on a hand-made token stream: ids 0, 1, 2, ...
so that every id names its own position in the text."""

import numpy as np
import pytest

from rnnkit.data.token_stream import stream_batches, stream_windows


def test_batches_continue_each_stream_in_order():
    ids = np.arange(103)  # 4 streams of 25 tokens (+ the last target), 5 windows of 5
    batches = stream_batches(ids, batch_size=4, bptt=5)
    assert len(batches) == 5
    for window, (inputs, targets) in enumerate(batches):
        assert inputs.shape == targets.shape == (4, 5)
        for stream in range(4):
            start = stream * 25 + window * 5
            np.testing.assert_array_equal(inputs[stream], np.arange(start, start + 5))
            np.testing.assert_array_equal(targets[stream], inputs[stream] + 1)
    # Row b of batch w + 1 starts where row b of batch w stopped.
    for (before, _), (after, _) in zip(batches[:-1], batches[1:], strict=True):
        np.testing.assert_array_equal(after[:, 0], before[:, -1] + 1)


def test_every_token_is_predicted_once_with_the_partial_window():
    ids = np.arange(50)  # 3 streams of 16, windows 5, 5, 5, 1
    batches = stream_batches(ids, batch_size=3, bptt=5, keep_partial=True)
    assert [x.shape[1] for x, _ in batches] == [5, 5, 5, 1]
    targets = np.concatenate([y for _, y in batches], axis=1)  # (3, 16)
    np.testing.assert_array_equal(np.sort(targets.ravel()), np.arange(1, 49))
    assert [x.shape[1] for x, _ in stream_batches(ids, 3, 5)] == [5, 5, 5]


def test_stream_windows_batched_in_order_give_the_batches_back():
    ids = np.arange(103)
    inputs, targets = stream_windows(ids, batch_size=4, bptt=5)
    assert inputs.shape == (20, 5)
    for window, (x, y) in enumerate(stream_batches(ids, 4, 5)):
        np.testing.assert_array_equal(inputs[window * 4 : window * 4 + 4], x)
        np.testing.assert_array_equal(targets[window * 4 : window * 4 + 4], y)


def test_too_short_and_bad_arguments():
    assert stream_batches(np.arange(3), batch_size=4, bptt=2) == []
    assert stream_windows(np.arange(3), 4, 2)[0].shape == (0, 2)
    with pytest.raises(ValueError, match="bptt"):
        stream_batches(np.arange(10), batch_size=2, bptt=0)
    with pytest.raises(ValueError, match="1-D"):
        stream_batches(np.zeros((2, 5)), batch_size=2, bptt=2)
