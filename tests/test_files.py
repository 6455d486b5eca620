"""rnnkit.files: a file is complete under its name, or not there at all."""

from __future__ import annotations

import numpy as np
import pytest

from rnnkit.files import atomic_path, write_csv


def test_atomic_path_leaves_nothing_behind_on_failure(tmp_path):
    target = tmp_path / "model.keras"
    with pytest.raises(RuntimeError):
        with atomic_path(target) as temporary:
            assert temporary.name.endswith(".keras")
            temporary.write_text("half")
            raise RuntimeError("crash while writing")
    assert list(tmp_path.iterdir()) == []


def test_write_csv_keeps_numbers_exact_and_columns_in_first_seen_order(tmp_path):
    path = write_csv(
        tmp_path / "table.csv",
        [
            {"step": 1, "loss": 0.1 + 0.2, "cell": "lstm"},
            {"step": np.int64(2), "loss": np.float32(0.5), "clipped": True},
            {"step": 3.0, "loss": None},
        ],
    )
    assert path.read_text().splitlines() == [
        "step,loss,cell,clipped",
        "1,0.30000000000000004,lstm,",
        "2,0.5,,True",
        "3,,,",
    ]
    assert not list(tmp_path.glob("*.tmp*"))
