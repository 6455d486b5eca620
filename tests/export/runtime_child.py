"""Runs exported artefacts in a fresh process, each with its own runtime.

    python -m tests.export.runtime_child JOBS.json
    python -m tests.export.runtime_child --serve KIND   # JOBS.json paths on stdin

JOBS.json is a list of {"format", "path", "signature", "inputs" (an .npz file),
"outputs" (the .npz to write)}: a SavedModel signature through
`tf.saved_model.load`, a `.tflite` file through `ai_edge_litert`'s interpreter, an
`.onnx` file through onnxruntime. The process never imports rnnkit (nor any
custom layer), so what it computes comes from the artefact alone.

`--serve` keeps one such process for a whole test session (tests/export/support.py):
it reads one JOBS.json path per line and answers `ok` or `error: ...` on a line of
its own. KIND "saved_model" serves SavedModels only; KIND "portable" serves LiteRT
and ONNX files and checks after every job that TensorFlow was never imported, so
those files run without it, as on a device.
"""

from __future__ import annotations

import json
import sys
import traceback

import numpy as np

ANSWER = "runtime_child: "  # prefixes the answers, apart from anything else printed


def run(job: dict) -> dict:
    inputs = dict(np.load(job["inputs"]))
    if job["format"] == "saved_model":
        import tensorflow as tf

        try:
            import tensorflow_text  # noqa: F401 - registers its ops, if needed
        except ImportError:
            pass
        function = tf.saved_model.load(job["path"]).signatures[job["signature"]]
        outputs = function(**{k: tf.constant(v) for k, v in inputs.items()})
        return {k: np.asarray(v) for k, v in outputs.items()}
    if job["format"] == "tflite":
        from ai_edge_litert.interpreter import Interpreter

        runner = Interpreter(model_path=job["path"]).get_signature_runner()
        return {k: np.asarray(v) for k, v in runner(**inputs).items()}
    import onnxruntime

    session = onnxruntime.InferenceSession(
        job["path"], providers=["CPUExecutionProvider"]
    )
    names = [output.name for output in session.get_outputs()]
    return dict(zip(names, session.run(names, inputs), strict=True))


def run_jobs(jobs_file: str, kind: str | None = None) -> None:
    for job in json.loads(open(jobs_file, encoding="utf-8").read()):
        if kind is not None and (job["format"] == "saved_model") != (
            kind == "saved_model"
        ):
            raise SystemExit(f"a {job['format']} job sent to the {kind} process")
        outputs = run(job)
        np.savez(job["outputs"], **{k: np.asarray(v) for k, v in outputs.items()})
    if any(name.split(".")[0] == "rnnkit" for name in sys.modules):
        raise SystemExit("the runtime process imported rnnkit")
    if kind == "portable" and "tensorflow" in sys.modules:
        raise SystemExit("the LiteRT / ONNX process imported TensorFlow")


def serve(kind: str) -> None:
    for line in sys.stdin:
        try:
            run_jobs(line.strip(), kind)
        except BaseException as error:  # noqa: BLE001 - answered, not raised
            detail = "".join(traceback.format_exception(error))[-3000:]
            print(ANSWER + "error: " + json.dumps(detail), flush=True)
            if isinstance(error, SystemExit):
                return
        else:
            print(ANSWER + "ok", flush=True)


def main() -> None:
    if sys.argv[1] == "--serve":
        serve(sys.argv[2])
    else:
        run_jobs(sys.argv[1])


if __name__ == "__main__":
    main()
