"""Runs exported artefacts in a fresh process, each with its own runtime.

    python -m tests.export.runtime_child JOBS.json

JOBS.json is a list of {"format", "path", "signature", "inputs" (an .npz file),
"outputs" (the .npz to write)}: a SavedModel signature through
`tf.saved_model.load`, a `.tflite` file through `ai_edge_litert`'s interpreter, an
`.onnx` file through onnxruntime. The process never imports rnnkit (nor any
custom layer), so what it computes comes from the artefact alone.
"""

from __future__ import annotations

import json
import sys

import numpy as np


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


def main() -> None:
    for job in json.loads(open(sys.argv[1], encoding="utf-8").read()):
        outputs = run(job)
        np.savez(job["outputs"], **{k: np.asarray(v) for k, v in outputs.items()})
    if any(name.split(".")[0] == "rnnkit" for name in sys.modules):
        raise SystemExit("the runtime process imported rnnkit")


if __name__ == "__main__":
    main()
