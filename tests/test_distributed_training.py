"""`rnnkit run --strategy multiworker|mirrored`: training on several workers/devices.

Two worker processes on loopback ports, each on the CPU, train the stock and sentiment
recipes at small sizes; the chief's run directory must be complete, the workers' final
weights identical, and both equal (to float32 round-off) to one process trained on the
same global batch. A worker that dies stops the other with a one-line error, and the
chief's `--resume` continues the run on both. Every process has a hard deadline and is
killed with its process group in a `finally` (see tests/test_tuning_distributed.py).
"""

from __future__ import annotations

import json
import os
import re
import signal
import time
from pathlib import Path

import numpy as np
import pytest

from rnnkit.errors import ConfigError
from rnnkit.training import distributed
from tests.cli_support import error_line, invoke
from tests.sentiment_support import SENTIMENT_DATA
from tests.sentiment_support import SMOKE_CONFIG as SENTIMENT_SMOKE
from tests.shared_data import require
from tests.stock_support import SMOKE_CONFIG as STOCK_SMOKE
from tests.test_tuning_distributed import free_port, processes

RUN_FILES = {"config.toml", "history.csv", "metrics.json", "model.keras", "run.json"}
FINGERPRINT = re.compile(r"weights fingerprint: ([0-9a-f]{16})")


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


def sentiment_args() -> list[str]:
    return set_args(SENTIMENT_SMOKE, sentiment_values())


def train_two_workers(tmp_path: Path, recipe: str, args: list[str]) -> list[str]:
    """Runs `recipe` on two workers; returns their outputs (chief first)."""
    ports = [free_port(), free_port()]
    with processes(tmp_path) as started:
        chief = started.start(
            "chief", "run", recipe, *args, *cluster_args(ports, 0), "--run-dir", "run"
        )
        worker = started.start(
            "worker", "run", recipe, *args, *cluster_args(ports, 1),
            "--run-dir", "worker-run",
        )  # fmt: skip
        deadline = time.monotonic() + 240
        outputs = []
        for process in (chief, worker):
            status, output = started.finish(process, deadline)
            assert status == 0, output[-3000:]
            outputs.append(output)
    return outputs


def one_process(recipe_name: str, config_file: Path, values: dict, run_dir: Path):
    """The same recipe in this process, on one device, with `values` set."""
    from rnnkit import config as config_lib
    from rnnkit import registry
    from rnnkit.training import runner

    recipe = registry.load(recipe_name)
    config = config_lib.resolve(recipe.Config, config_file, values)
    return runner.run(recipe, config, run_dir, verbose=0)


def assert_same_weights(left: Path, right: Path, atol: float) -> None:
    import keras

    import rnnkit.layers  # noqa: F401 - registers the layers for loading

    a, b = keras.saving.load_model(left), keras.saving.load_model(right)
    assert [w.path for w in a.weights] == [w.path for w in b.weights]
    for x, y in zip(a.weights, b.weights, strict=True):
        np.testing.assert_allclose(x.numpy(), y.numpy(), atol=atol, err_msg=x.path)


@pytest.mark.parametrize(
    ("recipe", "config_file", "values", "per_replica"),
    [
        ("stock", STOCK_SMOKE, {"train.shuffle": False}, 32),
        ("sentiment", SENTIMENT_SMOKE, None, 64),
    ],
    ids=["stock", "sentiment"],
)
def test_two_workers_train_like_one_process_on_the_global_batch(
    tmp_path, recipe, config_file, values, per_replica
):
    values = values if values is not None else sentiment_values()
    args = set_args(config_file, values)
    chief, worker = train_two_workers(tmp_path, recipe, args)
    run_dir = tmp_path / "run"
    assert RUN_FILES <= {p.name for p in run_dir.iterdir()}
    assert not (tmp_path / "worker-run").exists()  # workers write nothing
    assert "worker 1 of 2" in worker and "Trained as a worker" in worker
    record = json.loads((run_dir / "run.json").read_text())
    assert record["replicas"] == 2
    assert record["global_batch_size"] == 2 * per_replica
    assert "MultiWorkerMirroredStrategy" in record["device"]
    # The config records the per-replica batch, so it re-runs as it ran.
    assert f"batch_size = {per_replica}\n" in (run_dir / "config.toml").read_text()
    fingerprints = [FINGERPRINT.search(out).group(1) for out in (chief, worker)]
    assert fingerprints[0] == fingerprints[1] == record["weights_fingerprint"]
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert "model" in metrics["test"]

    values = {**values, "train.batch_size": 2 * per_replica}
    single = one_process(recipe, config_file, values, tmp_path / "single")
    assert_same_weights(run_dir / "model.keras", single.run_dir / "model.keras", 1e-5)
    header, *chief_rows = (run_dir / "history.csv").read_text().splitlines()
    names = header.split(",")
    # The loop logs what `fit` logs: the losses and the compiled metrics.
    assert set(names) == {"epoch", *single.history[0]}, names
    assert len(names) > 3  # e.g. mae / accuracy and their val_ twins
    for row, expected in zip(chief_rows, single.history, strict=True):
        logged = dict(zip(names, (float(v) for v in row.split(",")), strict=True))
        for name, value in expected.items():
            # Summed over both workers' replicas: the losses (and mean errors) to
            # float round-off, accuracy to one example's flip at the 0.5 threshold.
            slack = 4e-3 if "accuracy" in name else 0.0
            assert logged[name] == pytest.approx(value, rel=1e-4, abs=slack), name


def test_a_dead_worker_stops_the_chief_and_resume_continues_on_both(tmp_path):
    args = set_args(
        STOCK_SMOKE,
        {"train.epochs": 40, "data.start": "2008-01-01", "train.worker_timeout": 60},
    )
    ports = [free_port(), free_port()]
    history = tmp_path / "run" / "history.csv"
    with processes(tmp_path) as started:
        chief = started.start(
            "chief", "run", "stock", *args, *cluster_args(ports, 0), "--run-dir", "run"
        )
        worker = started.start("worker", "run", "stock", *args, *cluster_args(ports, 1))
        deadline = time.monotonic() + 120
        while not (history.exists() and len(history.read_text().splitlines()) > 3):
            assert chief.poll() is None and worker.poll() is None
            assert time.monotonic() < deadline, "no epoch finished in 120 s"
            time.sleep(0.2)
        os.killpg(worker.pid, signal.SIGKILL)
        killed = time.monotonic()
        status, output = started.finish(chief, killed + 150)
        assert status == 1, output[-3000:]
        assert "Error: lost a worker of the cluster" in output
        assert "--resume" in output
        assert not (tmp_path / "run" / "run.json").exists()
        done = len(history.read_text().splitlines()) - 1
        assert 3 <= done < 40

        resumed = started.start(
            "resumed", "run", "stock", "--resume", "run", *cluster_args(ports, 0)
        )
        rejoined = started.start(
            "rejoined", "run", "stock", *args, *cluster_args(ports, 1)
        )
        deadline = time.monotonic() + 240
        for process in (resumed, rejoined):
            status, output = started.finish(process, deadline)
            assert status == 0, output[-3000:]
        assert "resuming after epoch" in started.finish(resumed, deadline)[1]
    record = json.loads((tmp_path / "run" / "run.json").read_text())
    assert record["resumed"] is True
    epochs = [int(float(r.split(",")[0])) for r in history.read_text().splitlines()[1:]]
    assert epochs == list(range(1, 41))


@pytest.mark.parametrize(
    ("workers", "index", "message"),
    [
        ("", 0, "--workers expects HOST:PORT"),
        ("127.0.0.1:1,nonsense", 0, "'nonsense' is not HOST:PORT"),
        ("127.0.0.1:1,127.0.0.1:1", 0, "lists an address twice"),
        ("127.0.0.1:1,127.0.0.1:2", 2, "--worker-index 2 is not one of 0..1"),
    ],
)
def test_bad_cluster_descriptions_are_config_errors(
    monkeypatch, workers, index, message
):
    monkeypatch.setenv("TF_CONFIG", "")
    with pytest.raises(ConfigError, match=re.escape(message)):
        distributed.write_tf_config(workers, index)
    assert os.environ["TF_CONFIG"] == ""  # unchanged


def test_tf_config_is_written_and_read_back(monkeypatch):
    monkeypatch.setenv("TF_CONFIG", "")
    distributed.write_tf_config("10.0.0.5:12345, 10.0.0.6:12345", 1)
    assert json.loads(os.environ["TF_CONFIG"]) == {
        "cluster": {"worker": ["10.0.0.5:12345", "10.0.0.6:12345"]},
        "task": {"type": "worker", "index": 1},
    }
    assert distributed.cluster_from_environment() == (2, 1)
    monkeypatch.setenv("TF_CONFIG", json.dumps({
        "cluster": {"chief": ["a:1"], "worker": ["b:1", "c:1"]},
        "task": {"type": "worker", "index": 0},
    }))  # fmt: skip
    assert distributed.cluster_from_environment() == (3, 1)
    monkeypatch.setenv("TF_CONFIG", "{not json")
    with pytest.raises(ConfigError, match="TF_CONFIG is not a cluster description"):
        distributed.cluster_from_environment()
    monkeypatch.delenv("TF_CONFIG")
    with pytest.raises(ConfigError, match="needs the cluster: give every machine"):
        distributed.cluster_from_environment()


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


def test_dry_run_names_the_worker_and_the_strategy(monkeypatch):
    monkeypatch.setenv("TF_CONFIG", "")
    result = invoke("run", "stock", "--dry-run", *cluster_args([2222, 2223], 1))
    assert result.exit_code == 0, result.output
    assert "Dry run: worker 1 of 2 (a worker) in TF_CONFIG" in result.output
    assert 'strategy = "multiworker"' in result.output


def test_the_training_commands_of_the_distributed_guide_are_valid(monkeypatch):
    """docs/guides/distributed.md shows them as text (they run at the same time)."""
    import shlex

    from tests.markdown_examples import ROOT, blocks

    monkeypatch.setenv("TF_CONFIG", "")
    commands = []
    for page in ("docs/guides/distributed.md", "README.md"):
        text = (ROOT / page).read_text("utf-8")
        found = [
            line.split("  #")[0]
            for block in blocks(text, "text")
            for line in block.splitlines()
            if line.startswith("rnnkit run ")
        ]
        assert len(found) == 2, (page, found)
        commands += found
    monkeypatch.chdir(ROOT)
    for index, command in enumerate(commands):
        index %= 2
        result = invoke(*shlex.split(command)[1:], "--dry-run")
        assert result.exit_code == 0, (command, result.output[-2000:])
        assert f"Dry run: worker {index} of 2" in result.output
        assert 'strategy = "multiworker"' in result.output


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


@pytest.mark.parametrize("strategy", ["mirrored", "multiworker"])
def test_tuning_refuses_a_strategy_of_several_devices(strategy):
    result = invoke(
        "tune", "stock", "--config", str(STOCK_SMOKE), "--max-trials", "1",
        "--set", f"train.strategy={strategy}",
    )  # fmt: skip
    assert f"train.strategy={strategy}: tuning trains each trial on one device" in (
        error_line(result)
    )


class _TwoReplicas:
    """Stands in for a MirroredStrategy of two replicas (refusals need no devices)."""

    num_replicas_in_sync = 2


def test_a_text_model_that_cannot_be_cut_is_a_one_line_error():
    import keras

    texts = keras.Input(shape=(), dtype="string", name="text")
    short = keras.layers.StringLookup(vocabulary=["a", "b"], name="short")(texts)
    other = keras.layers.StringLookup(vocabulary=["c"], name="other")(texts)
    model = keras.Model(
        texts, keras.layers.Concatenate()([short[:, None], other[:, None]])
    )
    with pytest.raises(
        ConfigError, match=r"cannot be moved into the input pipeline.*--strategy one"
    ):
        distributed.split_text_model(model, _TwoReplicas())
    # Numbers in, or one replica: nothing to cut.
    numbers = keras.Input(shape=(3,))
    assert (
        distributed.split_text_model(keras.Model(numbers, numbers * 2), _TwoReplicas())
        is None
    )
    assert distributed.split_text_model(model, None) is None
