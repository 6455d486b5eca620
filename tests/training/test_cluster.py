"""rnnkit.training.cluster: `TF_CONFIG` from `--workers`/`--worker-index`, and back."""

from __future__ import annotations

import json
import os
import re

import pytest

from rnnkit.errors import ConfigError
from rnnkit.training.cluster import (
    cluster_from_environment,
    parse_address,
    write_tf_config,
)
from tests.cli_support import invoke
from tests.training.cluster_support import cluster_args


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
        write_tf_config(workers, index)
    assert os.environ["TF_CONFIG"] == ""  # unchanged


def test_tf_config_is_written_and_read_back(monkeypatch):
    monkeypatch.setenv("TF_CONFIG", "")
    write_tf_config("10.0.0.5:12345, 10.0.0.6:12345", 1)
    assert json.loads(os.environ["TF_CONFIG"]) == {
        "cluster": {"worker": ["10.0.0.5:12345", "10.0.0.6:12345"]},
        "task": {"type": "worker", "index": 1},
    }
    assert cluster_from_environment() == (2, 1)
    monkeypatch.setenv("TF_CONFIG", json.dumps({
        "cluster": {"chief": ["a:1"], "worker": ["b:1", "c:1"]},
        "task": {"type": "worker", "index": 0},
    }))  # fmt: skip
    assert cluster_from_environment() == (3, 1)
    monkeypatch.setenv("TF_CONFIG", "{not json")
    with pytest.raises(ConfigError, match="TF_CONFIG is not a cluster description"):
        cluster_from_environment()
    monkeypatch.delenv("TF_CONFIG")
    with pytest.raises(ConfigError, match="needs the cluster: give every machine"):
        cluster_from_environment()


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


@pytest.mark.parametrize(
    ("text", "address"),
    [
        ("10.0.0.5:8470", "10.0.0.5:8470"),
        (" [::1]:1 ", "[::1]:1"),
        ("a-b.c:65535", "a-b.c:65535"),
    ],
)
def test_an_address_is_host_and_port(text, address):
    assert str(parse_address(text, "--workers")) == address


@pytest.mark.parametrize("text", ["localhost", "a:0", "a:65536", "http://a:1", ":1"])
def test_a_bad_address_names_the_option(text):
    with pytest.raises(
        ConfigError, match=rf"^--workers: '{re.escape(text)}' is not HOST:PORT"
    ):
        parse_address(text, "--workers")
