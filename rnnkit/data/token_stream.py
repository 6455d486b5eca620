"""A running token stream cut into windows for language-model training.

Truncated backpropagation through time (Williams & Peng 1990; the layout of Zaremba et
al. 2014) lays the stream out as `batch_size` contiguous streams side by side,

    stream b = ids[b * n : (b + 1) * n],   n = (len(ids) - 1) // batch_size

and cuts them into windows of `bptt` steps. Batch w holds window w of every stream, so
row b of batch w + 1 continues row b of batch w exactly where it stopped: a stateful
recurrent layer that keeps its final state from batch w as the initial state of batch
w + 1 reads each stream from start to end, while gradients stop at the window boundary.
The targets are the inputs shifted by one token along each stream.

`stream_windows` returns those batches in that order, as one array of rows that must be
batched by `batch_size` in order (no shuffling). Training without carried state (every
window starts from a zero state) uses the same rows, and may shuffle them.
"""

from __future__ import annotations

import numpy as np

__all__ = ["stream_batches", "stream_windows"]


def stream_batches(
    ids: np.ndarray, batch_size: int, bptt: int, keep_partial: bool = False
) -> list[tuple[np.ndarray, np.ndarray]]:
    """The (inputs, targets) batches of truncated BPTT over `ids`, in reading order.

    Args:
        ids: 1-D integer token ids of the whole split.
        batch_size: number of contiguous streams (rows of every batch).
        bptt: steps per window (columns of every batch).
        keep_partial: also return the last, shorter window (evaluation); otherwise
            every batch is exactly (batch_size, bptt) and the tail is dropped.

    Returns:
        A list of `(inputs, targets)` pairs, each (batch_size, steps) int32.
    """
    ids = np.asarray(ids)
    if ids.ndim != 1:
        raise ValueError(f"ids must be 1-D; received shape {ids.shape}")
    if batch_size < 1 or bptt < 1:
        raise ValueError(
            f"batch_size and bptt must be >= 1; received {batch_size} and {bptt}"
        )
    per_stream = (len(ids) - 1) // batch_size
    if per_stream < 1:
        return []
    inputs = ids[: batch_size * per_stream].reshape(batch_size, per_stream)
    targets = ids[1 : batch_size * per_stream + 1].reshape(batch_size, per_stream)
    stop = per_stream if keep_partial else per_stream - per_stream % bptt
    return [
        (
            inputs[:, start : start + bptt].astype("int32"),  # (batch, steps)
            targets[:, start : start + bptt].astype("int32"),
        )
        for start in range(0, stop, bptt)
    ]


def stream_windows(
    ids: np.ndarray, batch_size: int, bptt: int
) -> tuple[np.ndarray, np.ndarray]:
    """The full windows of `stream_batches` stacked as rows: (windows * batch, bptt).

    Rows `w * batch_size ... (w + 1) * batch_size - 1` are batch w, so batching the
    rows by `batch_size` in order (e.g. `tf.data.Dataset.from_tensor_slices(...)
    .batch(batch_size)`) gives back the batches of truncated BPTT.
    """
    batches = stream_batches(ids, batch_size, bptt)
    if not batches:
        empty = np.zeros((0, bptt), "int32")
        return empty, empty
    inputs = np.concatenate([x for x, _ in batches])  # (windows * batch, bptt)
    targets = np.concatenate([y for _, y in batches])
    return inputs, targets
