"""Exports run in a fresh process (tests/export/runtime_child.py) and compared."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
TOLERANCE = 1e-5


def run_fresh(folder: Path, jobs: list[tuple[str, Path, str, dict]]) -> list[dict]:
    """Outputs of each (format, path, signature, inputs) job, computed in one fresh
    process by the artefact's own runtime."""
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
    (folder / "jobs.json").write_text(json.dumps(specs))
    result = subprocess.run(
        [sys.executable, "-m", "tests.export.runtime_child", str(folder / "jobs.json")],
        cwd=ROOT,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
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
