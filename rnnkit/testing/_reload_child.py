"""Reloads saved `.keras` models in a process that imports only keras, rnnkit and
the modules a request names.

    python -m rnnkit.testing._reload_child    # one JSON request per line on stdin

A request is {"path": the .keras file, "policy": the global dtype policy to load it
under, "inputs": an .npz file, "outputs": the .npz file to write, "modules": the
modules to import first (those that register a user's own layers)}. For each the
process imports the modules, sets the policy, loads the model, calls it on the inputs
(an array saved as "", or a dict of arrays) and writes its outputs as float32 with
the top-level packages of its layers; it answers `ok` or `error: ...` on a line of
its own. It imports nothing else (never the tests that asked), so a model whose
layers neither rnnkit nor the named modules register on import fails to load here.

One such process serves every reload of a test process
(`rnnkit.testing.recurrent.check_reloads_in_fresh_process`): the framework starts
once, not once per check.
"""

from __future__ import annotations

import importlib
import json
import sys
import traceback

import keras
import numpy as np

import rnnkit.layers  # noqa: F401 - registers rnnkit's layers, as a user's import would

ANSWER = "reload_child: "  # prefixes the answers, apart from anything else printed


def reload(request: dict) -> None:
    for module in request.get("modules", ()):
        importlib.import_module(module)
    keras.config.set_dtype_policy(request["policy"])
    try:
        model = keras.saving.load_model(request["path"])
        arrays = dict(np.load(request["inputs"]))
        inputs = arrays[""] if list(arrays) == [""] else arrays
        outputs = keras.ops.convert_to_numpy(keras.ops.cast(model(inputs), "float32"))
    finally:
        keras.config.set_dtype_policy("float32")
    np.savez(request["outputs"], outputs=outputs, packages=np.array(packages(model)))


def packages(model) -> list[str]:
    """The top-level packages of the classes the loaded model is made of, nested
    layers and cells included, read from its serialization (each object's
    "module")."""
    found = set()
    pending = [keras.saving.serialize_keras_object(model)]
    while pending:
        item = pending.pop()
        if isinstance(item, dict):
            if isinstance(item.get("module"), str) and "class_name" in item:
                found.add(item["module"].split(".")[0])
            pending.extend(item.values())
        elif isinstance(item, (list, tuple)):
            pending.extend(item)
    return sorted(found)


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
