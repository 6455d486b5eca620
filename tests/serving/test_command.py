"""`rnnkit serve` as a user starts it: a process that answers on loopback, and
one-line errors for what it cannot serve."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.cli_support import error_line, invoke

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import serve as serve_benchmark  # noqa: E402


def test_the_command_serves_a_run_until_it_is_stopped(smoke_runs, tmp_path):
    import urllib.request

    log = tmp_path / "serve.log"
    with serve_benchmark.server([str(smoke_runs["sentiment"])], "keras", log) as url:
        with urllib.request.urlopen(url + "/") as page:
            assert "<title>rnnkit serve</title>" in page.read().decode()
        status, answer = serve_benchmark.post(url + "/predict", {"inputs": ["Great."]})
        assert status == 200 and answer["model"] == "sentiment"
        assert url.startswith("http://127.0.0.1:")  # loopback unless told otherwise
    assert "serving sentiment (sentiment, keras)" in log.read_text()


@pytest.mark.parametrize(
    "args, says",
    [
        (["no/such/run"], "no run directory at no/such/run"),
        (["--runtime", "tensorrt", "x"], "Invalid value for '--runtime'"),
    ],
)
def test_what_cannot_be_served_is_one_line(args, says, tmp_path):
    result = invoke("serve", *args)
    if result.exit_code == 2:  # click's usage error
        assert says in result.output and "Traceback" not in result.output
    else:
        assert says in error_line(result)
