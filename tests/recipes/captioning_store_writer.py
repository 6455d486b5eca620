"""A process that writes rows into a captioning `RowStore` (for the test of several
writers filling one store): kept apart from the test modules, so that a spawned
child imports numpy and the store only."""

from __future__ import annotations

import numpy as np
from rnnkit_recipes.captioning import store

ROW_SHAPE = (2, 3)


def row_of(key: int) -> np.ndarray:
    """The row every writer stores under `key`."""
    return (np.arange(6, dtype=np.float16).reshape(ROW_SHAPE) + 10 * key).astype(
        np.float16
    )


def write(folder: str, keys: list[int], rows_per_shard: int, barrier) -> None:
    store.ROWS_PER_SHARD = rows_per_shard
    row_store = store.RowStore(folder, ROW_SHAPE, np.float16)
    barrier.wait()  # both writers start together
    with row_store.writer() as writer:
        for key in keys:  # keys the other writer also writes are stored twice
            writer.add(f"k{key}", row_of(key))
