"""Exports run in a fresh process (tests/export/runtime_child.py) and compared.

One fresh process per kind of runtime serves the whole test session (TensorFlow
starts once, not once per test): "saved_model" for SavedModels, "portable" for LiteRT
and ONNX files, which runs without TensorFlow. Neither ever imports rnnkit.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from rnnkit.testing._served_process import ServedProcess, ServedProcesses
from tests.export.runtime_child import ANSWER

ROOT = Path(__file__).resolve().parents[2]

TOLERANCE = 1e-5

_SERVED = ServedProcesses()


def _child(kind: str) -> ServedProcess:
    return _SERVED.get(
        kind,
        lambda: ServedProcess(
            f"runtime_child_{kind}",
            "tests.export.runtime_child",
            "--serve",
            kind,
            answer=ANSWER,
            env={"TF_CPP_MIN_LOG_LEVEL": "3"},
            cwd=ROOT,
        ),
    )


def stop_children() -> None:
    """Ends the runtime processes (at the end of the tests/export session)."""
    _SERVED.stop_all()


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
        answer = _child(kind).ask(str(jobs_file))
        assert answer == "ok", json.loads(answer.removeprefix("error: "))
    # String outputs (labels, translations) come back as object arrays of bytes.
    return [dict(np.load(spec["outputs"], allow_pickle=True)) for spec in specs]


def exported_token_ids(result, texts: list[str]) -> np.ndarray:
    """The token ids a client of an exported sentiment model sends for `texts`, from
    what the export holds: its vocabulary.txt and the text settings its description
    notes (as `rnnkit.export.clients` reads them)."""
    from rnnkit.export.clients import sentiment_token_ids

    notes = result.description["notes"]
    vocabulary = (result.output / "vocabulary.txt").read_text("utf-8").split("\n")
    return sentiment_token_ids(
        texts,
        vocabulary[:-1],
        notes["sequence_length"],
        notes["keep"],
        notes["lowercase"],
    )


def assert_close(actual: dict, expected: dict, names=None) -> None:
    for name in names or expected:
        np.testing.assert_allclose(
            np.asarray(actual[name], np.float64),
            np.asarray(expected[name], np.float64),
            rtol=TOLERANCE,
            atol=TOLERANCE,
            err_msg=name,
        )
