"""Exports run in a fresh process (tests/export/runtime_child.py) and compared.

One fresh process per kind of runtime serves the whole test session (TensorFlow
starts once, not once per test): "saved_model" for SavedModels, "portable" for LiteRT
and ONNX files, which runs without TensorFlow. Neither ever imports rnnkit.
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from tests.export.runtime_child import ANSWER

ROOT = Path(__file__).resolve().parents[2]
TOLERANCE = 1e-5
TIMEOUT_SECONDS = 300

_children: dict[str, tuple[subprocess.Popen, Path]] = {}


def _child(kind: str) -> tuple[subprocess.Popen, Path]:
    process, log = _children.get(kind, (None, None))
    if process is None or process.poll() is not None:
        log = Path(tempfile.mkstemp(prefix=f"runtime_child_{kind}_", suffix=".log")[1])
        with open(log, "w", encoding="utf-8") as stderr:
            process = subprocess.Popen(
                [sys.executable, "-m", "tests.export.runtime_child", "--serve", kind],
                cwd=ROOT,
                env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"},
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=stderr,
                text=True,
            )
        _children[kind] = (process, log)
    return process, log


def _answer(process: subprocess.Popen, log: Path) -> str:
    while True:
        ready, _, _ = select.select([process.stdout], [], [], TIMEOUT_SECONDS)
        line = process.stdout.readline() if ready else ""
        if not line:
            process.kill()
            process.wait()
            raise AssertionError(
                "the runtime process died or hung: "
                + log.read_text(encoding="utf-8")[-3000:]
            )
        if line.startswith(ANSWER):
            return line[len(ANSWER) :].strip()


def stop_children() -> None:
    """Ends the runtime processes (at the end of the tests/export session)."""
    while _children:
        _, (process, log) = _children.popitem()
        process.stdin.close()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        process.stdout.close()
        log.unlink(missing_ok=True)


def run_fresh(folder: Path, jobs: list[tuple[str, Path, str, dict]]) -> list[dict]:
    """Outputs of each (format, path, signature, inputs) job, computed in a fresh
    process (never importing rnnkit) by the artefact's own runtime."""
    specs = []
    for index, (kind, path, signature, inputs) in enumerate(jobs):
        np.savez(folder / f"in_{index}.npz", **inputs)
        specs.append(
            {
                "format": kind,
                "path": str(path),
                "signature": signature,
                "inputs": str(folder / f"in_{index}.npz"),
                "outputs": str(folder / f"out_{index}.npz"),
            }
        )
    for kind in ("saved_model", "portable"):
        mine = [
            s
            for s in specs
            if (s["format"] == "saved_model") == (kind == "saved_model")
        ]
        if not mine:
            continue
        jobs_file = folder / f"jobs_{kind}.json"
        jobs_file.write_text(json.dumps(mine))
        process, log = _child(kind)
        process.stdin.write(f"{jobs_file}\n")
        process.stdin.flush()
        answer = _answer(process, log)
        assert answer == "ok", json.loads(answer.removeprefix("error: "))
    # String outputs (labels, translations) come back as object arrays of bytes.
    return [dict(np.load(spec["outputs"], allow_pickle=True)) for spec in specs]


def assert_close(actual: dict, expected: dict, names=None) -> None:
    for name in names or expected:
        np.testing.assert_allclose(
            np.asarray(actual[name], np.float64),
            np.asarray(expected[name], np.float64),
            rtol=TOLERANCE,
            atol=TOLERANCE,
            err_msg=name,
        )
