"""Command-line arguments for a cluster of training processes on loopback."""

from __future__ import annotations

from pathlib import Path

from tests.sentiment_support import SENTIMENT_DATA
from tests.shared_data import require


def cluster_args(ports: list[int], index: int) -> list[str]:
    workers = ",".join(f"127.0.0.1:{port}" for port in ports)
    return ["--workers", workers, "--worker-index", str(index)]


def sentiment_values() -> dict[str, object]:
    train, test = (
        SENTIMENT_DATA / "imdb_train.csv.gz",
        SENTIMENT_DATA / "imdb_test.csv.gz",
    )
    require(train)
    # No dropout: its masks are drawn per replica, so they differ from one process's.
    return {
        "data.path": str(train), "data.test_path": str(test), "data.limit": 300,
        "model.embedding_dropout": 0.0, "model.dropout": 0.0, "train.epochs": 1,
    }  # fmt: skip


def set_args(config: Path, values: dict[str, object]) -> list[str]:
    args = ["--config", str(config)]
    for key, value in values.items():
        args += [
            "--set",
            f"{key}={str(value).lower() if isinstance(value, bool) else value}",
        ]
    return args
