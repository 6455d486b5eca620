"""The launcher hides TensorFlow's native start-up lines unless --verbose is given."""

from __future__ import annotations

import os
import subprocess
import sys
import warnings

from rnnkit._native_logs import is_native_log_line, native_logs_filtered

NATIVE_LINES = (
    "WARNING: All log messages before absl::InitializeLog() is called are written to "
    "STDERR",
    "I0000 00:00:1795453771.613136   13498 port.cc:153] oneDNN custom operations",
    "E0000 00:00:1795453782.050313   13498 cuda_platform.cc:52] failed call to cuInit",
    "W0000 00:00:1795453782.050313   13498 node_def_util.cc:682] NodeDef mentions",
    "To enable the following instructions: AVX2 FMA, in other operations, rebuild "
    "TensorFlow with the appropriate compiler flags.",
)


def test_native_lines_are_recognised_and_ours_are_not():
    assert all(is_native_log_line(line) for line in NATIVE_LINES)
    for line in (
        "Error: train.epochs (command line): -3 is out of range; allowed: >= 1",
        "UserWarning: something that matters",
        "Epoch 1/3",
        "I0000 is not a log line without its time and source",
    ):
        assert not is_native_log_line(line), line


def test_filter_drops_native_lines_and_keeps_python_warnings(capfd):
    with native_logs_filtered():
        for line in NATIVE_LINES:
            os.write(2, (line + "\n").encode())
        os.write(2, b"a line of our own\n")
        # As in the launcher's process, Python's stderr writes to descriptor 2.
        with open(2, "w", closefd=False) as stream:
            stream.write(warnings.formatwarning("keep me", UserWarning, "module.py", 3))
    err = capfd.readouterr().err
    assert "a line of our own" in err
    assert "UserWarning: keep me" in err
    assert not any(is_native_log_line(line) for line in err.splitlines())


def _rnnkit(*args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    return subprocess.run(
        [sys.executable, "-c", "from rnnkit.cli import main; main()", *args],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )


def test_info_is_quiet_and_verbose_shows_the_native_lines():
    quiet = _rnnkit("info")
    assert quiet.returncode == 0, quiet.stderr
    assert "backend" in quiet.stdout
    assert not [line for line in quiet.stderr.splitlines() if is_native_log_line(line)]
    verbose = _rnnkit("--verbose", "info")
    assert verbose.returncode == 0, verbose.stderr
    # TensorFlow 2.21 announces oneDNN and a missing CUDA driver at import.
    assert any(is_native_log_line(line) for line in verbose.stderr.splitlines())
