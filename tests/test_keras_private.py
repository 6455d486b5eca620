"""The private Keras symbols rnnkit uses: gathered in one module, checked, pinned."""

from __future__ import annotations

import ast
import re
import types
from pathlib import Path

import keras
import numpy as np
import pytest

from rnnkit import _keras_private

ROOT = Path(__file__).resolve().parents[1]


def test_every_private_symbol_resolves_on_this_keras():
    for module_name, name in _keras_private.SYMBOLS:
        assert callable(_keras_private.resolve(module_name, name)), name
    assert _keras_private.backend.rnn is _keras_private.resolve(
        "keras.src.backend", "rnn"
    )


def test_a_moved_symbol_fails_with_a_message_naming_it(monkeypatch):
    monkeypatch.delattr(_keras_private.backend, "cudnn_ok")
    with pytest.raises(ImportError) as error:
        _keras_private.resolve("keras.src.backend", "cudnn_ok")
    message = str(error.value)
    assert "keras.src.backend.cudnn_ok" in message
    assert f"keras{_keras_private.TESTED_KERAS}" in message
    assert keras.__version__ in message
    with pytest.raises(ImportError, match="keras.src.no_such_module.rnn"):
        _keras_private.resolve("keras.src.no_such_module", "rnn")


def test_private_tensorflow_symbols_resolve_on_this_tensorflow():
    for module_name, name in _keras_private.TF_SYMBOLS:
        assert _keras_private.resolve(module_name, name) is not None, name


def test_private_keras_tuner_symbols_resolve_and_are_pinned():
    for module_name, name in _keras_private.TUNER_SYMBOLS:
        assert _keras_private.resolve(module_name, name) is not None, name
    pyproject = (ROOT / "pyproject.toml").read_text("utf-8")
    assert f'"keras-tuner{_keras_private.TESTED_KERAS_TUNER}"' in pyproject


def test_a_moved_keras_tuner_symbol_fails_with_a_message_naming_it(monkeypatch):
    from keras_tuner.src.distribute import oracle_client

    monkeypatch.delattr(oracle_client, "TIMEOUT")
    with pytest.raises(ImportError) as error:
        with _keras_private.tuner_request_timeout(5.0):
            pass
    message = str(error.value)
    assert "keras_tuner.src.distribute.oracle_client.TIMEOUT" in message
    assert f"keras-tuner{_keras_private.TESTED_KERAS_TUNER}" in message


def test_cluster_registration_is_best_effort_when_tensorflow_moved(monkeypatch):
    moved = (("tensorflow.python.no_such_module", "context"),)
    monkeypatch.setattr(_keras_private, "TF_SYMBOLS", moved)
    cluster = {"worker": ["localhost:1", "localhost:2"]}
    assert _keras_private.limit_cluster_registration(cluster, 5.0) is False


def test_optimizer_state_through_the_named_functions():
    variables = [keras.Variable(np.ones(2)), keras.Variable(np.zeros(3))]
    optimizer = keras.optimizers.Adam(0.1)
    optimizer.apply_gradients(
        [(np.full(2, 0.5), variables[0]), (np.full(3, 2.0), variables[1])]
    )
    index = _keras_private.variable_index(optimizer, variables[1])
    assert index == 1
    momentum, velocity = _keras_private.adam_moments(optimizer, index)
    np.testing.assert_allclose(momentum.numpy(), np.full(3, 0.2), rtol=1e-6)
    np.testing.assert_allclose(velocity.numpy(), np.full(3, 0.004), rtol=1e-5)
    keys = {_keras_private.variable_key(optimizer, v) for v in variables}
    assert len(keys) == 2
    with pytest.raises(ImportError, match="keras.src.optimizers.adam.Adam._momentums"):
        _keras_private.adam_moments(keras.optimizers.SGD(), 0)


def test_nested_layers_and_the_restored_epoch():
    inner = keras.Sequential([keras.layers.Dense(2), keras.layers.Dense(1)])
    model = keras.Sequential([keras.Input((3,)), inner])
    found = _keras_private.nested_layers(model)
    assert model not in found
    assert all(layer in found for layer in [inner, *inner.layers])
    assert _keras_private.initial_epoch(model) == 0
    model._initial_epoch = 4  # what BackupAndRestore does on a resumed run
    assert _keras_private.initial_epoch(model) == 4
    _keras_private.clear_initial_epoch(model)
    assert _keras_private.initial_epoch(model) == 0
    assert callable(_keras_private.symbolic_build(model))
    assert _keras_private.symbolic_build(object()) is None


# -- The guard: private Keras and TensorFlow only through rnnkit/_keras_private.py ----

# Private attributes of Keras objects that rnnkit has used: always an offence outside
# rnnkit/_keras_private.py, even where rnnkit happens to define the same name.
KERAS_PRIVATE_ATTRIBUTES = {
    "_flatten_layers",
    "_get_variable_index",
    "_initial_epoch",
    "_momentums",
    "_symbolic_build",
    "_var_key",
    "_velocities",
}
PRIVATE_MODULES = (
    "keras.src",
    "keras_tuner.src",
    "tensorflow.compiler",
    "tensorflow.core",
    "tensorflow.python",
    "tensorflow.tsl",
)
# The code people run: the package, the recipes, and the scripts beside them (tests
# reach into Keras on purpose, to patch it).
GUARDED = ("rnnkit", "recipes", "benchmarks", "examples", "docs")
ATTRIBUTE_FUNCTIONS = {"getattr", "hasattr", "setattr", "delattr"}


def _is_private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _names_private_module(text: str) -> bool:
    return any(text == m or text.startswith(m + ".") for m in PRIVATE_MODULES)


def _dotted(node: ast.AST) -> str | None:
    """`a.b.c` for a chain of names and attributes, else None."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    return ".".join([node.id, *reversed(parts)])


def _docstrings(tree: ast.AST) -> set[int]:
    return {
        id(body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef)
        and (body := node.body)
        and isinstance(body[0], ast.Expr)
        and isinstance(body[0].value, ast.Constant)
    }


def own_private_names(trees: list[ast.AST], paths: list[Path]) -> set[str]:
    """The private names rnnkit defines: its `_module.py` files and `_package/`
    folders, functions and classes, names assigned at any level, and attributes
    assigned on `self` or `cls`."""
    names = {part for path in paths for part in path.with_suffix("").parts}
    for tree in trees:
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                names.add(node.name)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                names.add(node.id)
            elif (
                isinstance(node, ast.Attribute)
                and isinstance(node.ctx, ast.Store)
                and isinstance(node.value, ast.Name)
                and node.value.id in ("self", "cls")
            ):
                names.add(node.attr)
    return {name for name in names if _is_private(name)} - KERAS_PRIVATE_ATTRIBUTES


def private_uses(tree: ast.AST, own: set[str]) -> list[tuple[int, str]]:
    """(line, symbol) of every private Keras/TensorFlow use in `tree`."""
    found = []
    docstrings = _docstrings(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [
                (node.lineno, alias.name)
                for alias in node.names
                if _names_private_module(alias.name)
            ]
        elif isinstance(node, ast.ImportFrom) and node.module:
            if _names_private_module(node.module):
                found.append((node.lineno, node.module))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            if id(node) not in docstrings and _names_private_module(node.value):
                found.append((node.lineno, node.value))
        elif isinstance(node, ast.Attribute):
            dotted = _dotted(node)
            if dotted and _names_private_module(
                dotted.replace("tf.", "tensorflow.", 1)
            ):
                found.append((node.lineno, dotted))
            elif _is_private(node.attr) and node.attr not in own:
                found.append((node.lineno, node.attr))
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ATTRIBUTE_FUNCTIONS
            and len(node.args) > 1
            and isinstance(node.args[1], ast.Constant)
            and isinstance(node.args[1].value, str)
            and _is_private(node.args[1].value)
            and node.args[1].value not in own
        ):
            found.append((node.lineno, node.args[1].value))
    return sorted(set(found))


def offences(paths: list[Path], root: Path = ROOT) -> list[str]:
    """`file:line: symbol` of every private use in `paths` (files under `root`)."""
    trees = [ast.parse(path.read_text("utf-8")) for path in paths]
    own = own_private_names(trees, [path.relative_to(root) for path in paths])
    return [
        f"{path.relative_to(root)}:{line}: {symbol}"
        for path, tree in zip(paths, trees, strict=True)
        if path.name != "_keras_private.py"
        for line, symbol in private_uses(tree, own)
    ]


def test_private_keras_and_tensorflow_only_through_keras_private():
    """Every private Keras or TensorFlow symbol goes through rnnkit/_keras_private.py,
    where it is named, checked against the tested versions, and explained.

    Read from the source (AST) of the folders in `GUARDED`; outside
    _keras_private.py an offence is:

    1. a module path under `keras.src`, `keras_tuner.src`, `tensorflow.python`,
       `tensorflow.compiler`, `tensorflow.core` or `tensorflow.tsl` (`tf.` counts as
       `tensorflow.`): in an
       import, in an attribute chain, or in a string (`importlib.import_module(...)`),
       docstrings excepted;
    2. a private attribute (one leading underscore: `obj._name`, or
       `getattr(obj, "_name")` and its siblings) that rnnkit does not define. rnnkit's
       own private names are what its source defines: `_module.py` files, functions,
       classes, assigned names and attributes assigned on `self` or `cls`, so
       `self._cache` in an rnnkit class and `layer._run_cudnn` between rnnkit modules
       pass, and `model._initial_epoch` (assigned on a Keras model, never on `self`)
       or `self._momentums` (inherited from Keras' Adam) fail;
    3. the Keras private attributes rnnkit has used (`KERAS_PRIVATE_ATTRIBUTES`), even
       where rnnkit defines a name that is the same.

    Each offence is reported as `file:line: symbol`.
    """
    paths = sorted(path for folder in GUARDED for path in (ROOT / folder).rglob("*.py"))
    found = offences(paths)
    assert not found, (
        "use private Keras/TensorFlow through rnnkit._keras_private:\n"
        + "\n".join(found)
    )


def test_the_guard_names_file_line_and_symbol(tmp_path):
    module = tmp_path / "rnnkit" / "example.py"
    module.parent.mkdir()
    module.write_text(
        "import importlib\n"
        "from tensorflow.python.eager import context\n"
        "class Mine:\n"
        "    def __init__(self, model):\n"
        "        self._cache = {}\n"
        "        self._cache.clear()\n"
        "        self.steps = model._initial_epoch\n"
        "        self.other = model._not_rnnkit_at_all\n"
        "        importlib.import_module('keras.src.backend')\n"
        "        getattr(model, '_symbolic_build', None)\n",
        encoding="utf-8",
    )
    allowed = tmp_path / "rnnkit" / "_keras_private.py"
    allowed.write_text("from keras.src import backend\n", encoding="utf-8")
    assert offences([module, allowed], root=tmp_path) == [
        "rnnkit/example.py:2: tensorflow.python.eager",
        "rnnkit/example.py:7: _initial_epoch",
        "rnnkit/example.py:8: _not_rnnkit_at_all",
        "rnnkit/example.py:9: keras.src.backend",
        "rnnkit/example.py:10: _symbolic_build",
    ]


def test_keras_is_pinned_to_the_tested_versions():
    pyproject = (ROOT / "pyproject.toml").read_text("utf-8")
    assert f'"keras{_keras_private.TESTED_KERAS}"' in pyproject
    low, high = re.fullmatch(r">=(\S+),<(\S+)", _keras_private.TESTED_KERAS).groups()
    version = tuple(int(part) for part in keras.__version__.split(".")[:2])
    assert (
        tuple(map(int, low.split(".")[:2]))
        <= version
        < tuple(map(int, high.split(".")))
    )
    assert isinstance(_keras_private.backend, types.ModuleType)
