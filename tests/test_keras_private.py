"""The private Keras symbols rnnkit uses: gathered in one module, checked, pinned."""

from __future__ import annotations

import re
import types
from pathlib import Path

import keras
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


def test_no_other_module_imports_private_keras():
    offenders = [
        str(path.relative_to(ROOT))
        for folder in ("rnnkit", "recipes")
        for path in (ROOT / folder).rglob("*.py")
        if path.name != "_keras_private.py"
        and re.search(r"^\s*(from|import) keras\.src", path.read_text("utf-8"), re.M)
    ]
    assert not offenders, (
        f"import private Keras through rnnkit._keras_private: {offenders}"
    )


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
