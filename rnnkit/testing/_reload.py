"""Reloading a saved model in a fresh process (`rnnkit/testing/_reload_child.py`)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import keras
import numpy as np

from rnnkit.testing._numerics import assert_close
from rnnkit.testing._served_process import ServedProcess, ServedProcesses

_SERVED = ServedProcesses()


def check_reloads_in_fresh_process(
    model,
    inputs,
    path,
    policy="float32",
    modules: Sequence[str] = (),
    package: str = "rnnkit",
):
    """`model` saved to `path` (.keras) reloads in a fresh process that imports only
    keras, rnnkit and `modules` (those that register your own layers), and whose
    global dtype policy is `policy`, holds layers of `package` (the top-level package
    of the layer under test) and gives the same outputs on `inputs` (an array or a
    dict of arrays).

    One process per set of `modules` is started in this Python process and serves
    every reload that names the same modules (`stop_reload_child()` ends them); it
    never imports the code that asked."""
    path = Path(path)
    expected = keras.ops.convert_to_numpy(keras.ops.cast(model(inputs), "float32"))
    model.save(path)
    named = inputs if isinstance(inputs, dict) else {"": inputs}
    np.savez(path.with_suffix(".inputs.npz"), **named)
    request = {
        "path": str(path),
        "policy": policy,
        "inputs": str(path.with_suffix(".inputs.npz")),
        "outputs": str(path.with_suffix(".outputs.npz")),
        "modules": list(modules),
    }
    answer = _reload_child(_own_modules(modules)).ask(json.dumps(request))
    assert answer == "ok", "the model did not reload in a fresh process: " + json.loads(
        answer.removeprefix("error: ")
    )
    with np.load(request["outputs"]) as reloaded:
        assert_close(reloaded["outputs"], expected, what="reloaded model")
        packages = reloaded["packages"].tolist()
        assert package in packages, f"no layer of {package} in the reloaded model"


def _own_modules(modules: Sequence[str]) -> tuple[str, ...]:
    """`modules` less rnnkit's layer modules, which every reload process imports
    at its start (`import rnnkit.layers`): rnnkit's own layers share one process
    instead of starting the framework once per layer module."""
    return tuple(
        module
        for module in modules
        if module != "rnnkit.layers" and not module.startswith("rnnkit.layers.")
    )


def _reload_child(modules: tuple[str, ...]) -> ServedProcess:
    """The reload process of these `modules`: one per set, so that a module imported
    for one check never registers a layer for another."""
    from rnnkit.testing._reload_child import ANSWER

    return _SERVED.get(
        "reload:" + ",".join(modules),
        lambda: ServedProcess(
            "reload_child", "rnnkit.testing._reload_child", answer=ANSWER
        ),
    )


def stop_reload_child() -> None:
    """Ends this process's reload process (tests call it at the end of a session)."""
    _SERVED.stop_all()
