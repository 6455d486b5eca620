"""Reloads saved `.keras` models in a process that imports only keras and rnnkit.

    python -m tests.layers.reload_child    # one JSON request per line on stdin

A request is {"path": the .keras file, "policy": the global dtype policy to load it
under, "inputs": an .npz file, "outputs": the .npz file to write}. For each the process
sets the policy, loads the model, calls it on the inputs (an array saved as "", or a
dict of arrays) and writes its outputs as float32 with the top-level packages of its
layers; it answers `ok` or `error: ...` on a line of its own. It never imports the
tests, so a model whose layers rnnkit does not register on import fails to load here.

One such process serves each test worker (tests/layers/recurrent_checks.py): the
framework starts once per worker, not once per test. Every layer class a model can
name is registered when `rnnkit.layers` is imported, before the first request.
"""

from __future__ import annotations

import json
import sys
import traceback

import keras
import numpy as np

import rnnkit.layers  # noqa: F401 - registers rnnkit's layers, as a user's import would

ANSWER = "reload_child: "  # prefixes the answers, apart from anything else printed


def reload(request: dict) -> None:
    keras.config.set_dtype_policy(request["policy"])
    try:
        model = keras.saving.load_model(request["path"])
        arrays = dict(np.load(request["inputs"]))
        inputs = arrays[""] if list(arrays) == [""] else arrays
        outputs = keras.ops.convert_to_numpy(keras.ops.cast(model(inputs), "float32"))
    finally:
        keras.config.set_dtype_policy("float32")
    packages = sorted(
        {type(layer).__module__.split(".")[0] for layer in model._flatten_layers()}
    )
    np.savez(request["outputs"], outputs=outputs, packages=np.array(packages))


def main() -> None:
    for line in sys.stdin:
        try:
            reload(json.loads(line))
            answer = "ok"
        except Exception:  # every failure goes back to the test that asked
            answer = "error: " + json.dumps(traceback.format_exc()[-3000:])
        print(ANSWER + answer, flush=True)


if __name__ == "__main__":
    main()
