"""Imports of packages that a plain `pip install rnnkit` does not bring.

`optional_import("tf2onnx")` is `importlib.import_module("tf2onnx")`, except that a
missing package raises `MissingDependencyError`: one line that names the package,
what needs it, and the `pip install` command of the extra that brings it. The
launcher prints it as any other `RnnkitError` (status 1, no traceback), and turns a
`ModuleNotFoundError` of one of these packages raised anywhere else into the same
line (`missing_dependency`).
"""

from __future__ import annotations

import importlib
from types import ModuleType

from rnnkit.errors import RnnkitError

# Top-level module: (its pip distribution, the extra of rnnkit that declares it,
# what needs it).
OPTIONAL: dict[str, tuple[str, str, str]] = {
    "tf2onnx": ("tf2onnx", "export", "ONNX export"),
    "onnx": ("onnx", "export", "ONNX export"),
    "onnxruntime": ("onnxruntime", "export", "running an ONNX model"),
    "ai_edge_litert": ("ai-edge-litert", "export", "running a LiteRT model"),
    "fastapi": ("fastapi", "serve", "rnnkit serve"),
    "uvicorn": ("uvicorn", "serve", "rnnkit serve"),
    "starlette": ("starlette", "serve", "rnnkit serve"),
    "tensorflow_text": (
        "tensorflow-text",
        "export",
        "the translation SavedModel's text signatures",
    ),
}


class MissingDependencyError(RnnkitError, ImportError):
    """An optional package that the asked-for feature needs is not installed."""


def _message(module: str) -> str:
    package, extra, purpose = OPTIONAL[module]
    return (
        f"{purpose} needs the package {package}, which is not installed: "
        f'pip install "rnnkit[{extra}]" (or pip install {package}).'
    )


def optional_import(module: str) -> ModuleType:
    """`module` (a dotted name whose top level is a key of OPTIONAL), imported.

    Raises:
        MissingDependencyError: The package is not installed.
    """
    top = module.split(".")[0]
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as error:
        if error.name == top:  # the package itself, not a module it imports
            raise MissingDependencyError(_message(top)) from None
        raise


def missing_dependency(error: BaseException) -> MissingDependencyError | None:
    """The one-line error for `error` when it is a `ModuleNotFoundError` of a package
    in OPTIONAL, else None."""
    if isinstance(error, ModuleNotFoundError) and error.name in OPTIONAL:
        return MissingDependencyError(_message(error.name))
    return None
