"""rnnkit.training.strategies: the strategy `train.strategy` asks for, and the bounded
waits of a multi-worker cluster. Every process has a hard deadline and is killed with
its process group when its test ends (tests/process_support.py)."""

from __future__ import annotations

import time

import pytest

from tests.cli_support import error_line, invoke
from tests.process_support import free_port, processes
from tests.stock_support import SMOKE_CONFIG as STOCK_SMOKE
from tests.training.cluster_support import cluster_args, set_args


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["--workers", "127.0.0.1:1,127.0.0.1:2"],
            "--workers and --worker-index go together",
        ),
        (["--worker-index", "0"], "--workers and --worker-index go together"),
        (
            ["--strategy", "mirrored", "--set", "train.devices=tpu:0"],
            "'tpu:0' is not a GPU",
        ),
        (
            ["--strategy", "one", "--set", "train.devices=gpu:0"],
            "use --strategy mirrored",
        ),
        (["--strategy", "mirrored"], "TensorFlow sees none; use --strategy one"),
        (["--strategy", "multiworker"], "needs the cluster"),
    ],
)
def test_bad_strategy_options_are_one_line_errors(tmp_path, monkeypatch, args, message):
    monkeypatch.setenv("TF_CONFIG", "")
    result = invoke(
        "run", "stock", "--config", str(STOCK_SMOKE), "--run-dir", str(tmp_path / "r"),
        *args,
    )  # fmt: skip
    assert result.exit_code == 1, result.output
    assert message in error_line(result)


@pytest.mark.parametrize("index", [0, 1], ids=["chief", "worker"])
def test_a_worker_alone_stops_within_its_timeout(tmp_path, index):
    """The chief waits for the others to listen, a worker for the chief to answer;
    neither waits longer than train.worker_timeout (TensorFlow's chief would wait
    for ever)."""
    ports = [free_port(), free_port()]
    args = set_args(STOCK_SMOKE, {"train.worker_timeout": 8})
    with processes(tmp_path) as started:
        began = time.monotonic()
        alone = started.start(
            "alone", "run", "stock", *args, *cluster_args(ports, index)
        )
        status, output = started.finish(alone, began + 90)
    assert status == 1, output[-3000:]
    assert "Error: not every worker of TF_CONFIG joined within 8 s" in output
    assert f"this is worker {index} of 2" in output
    if index == 0:  # the chief names the worker that never listened
        assert f"(no answer from 127.0.0.1:{ports[1]})" in output, output[-3000:]
    assert "Traceback" not in output
