"""Every package rnnkit imports is declared in pyproject.toml, and one that only an
extra brings is imported through `rnnkit._optional.optional_import`, so that its
absence is a one-line error naming the extra (issue 57, points 1 and 2)."""

from __future__ import annotations

import ast
import functools
import importlib.metadata
import sys
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from rnnkit._optional import OPTIONAL, MissingDependencyError, optional_import

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]
SOURCES = [ROOT / "rnnkit", ROOT / "recipes"]
# Imported only under the Keras backend a user chose (rnnkit/training/runtime.py):
# whoever sets KERAS_BACKEND=jax or torch installs it, as Keras itself asks.
BACKENDS = {"jax", "torch"}
FIRST_PARTY = {"rnnkit", "rnnkit_recipes", "__future__"}


def _declared() -> tuple[set[str], dict[str, set[str]]]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text("utf-8"))["project"]
    core = {
        canonicalize_name(Requirement(line).name) for line in project["dependencies"]
    }
    extras = {
        extra: {canonicalize_name(Requirement(line).name) for line in lines}
        for extra, lines in project["optional-dependencies"].items()
    }
    return core, extras


@functools.cache
def _import_sites() -> tuple[tuple[str, str, bool], ...]:
    """(top-level module, "file:line", through `optional_import`) of every import
    statement and `optional_import("...")` call in rnnkit/ and recipes/ but
    rnnkit/_optional.py, third-party only: the source is read once for every test."""
    found = []
    for folder in SOURCES:
        for path in sorted(folder.rglob("*.py")):
            if path.name == "_optional.py" and path.parent.name == "rnnkit":
                continue
            for node in ast.walk(ast.parse(path.read_text("utf-8"))):
                optional = False
                if isinstance(node, ast.Import):
                    names = [alias.name for alias in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0:
                    names = [node.module]
                elif (
                    isinstance(node, ast.Call)
                    and getattr(node.func, "id", None) == "optional_import"
                    and isinstance(node.args[0], ast.Constant)
                ):
                    names, optional = [node.args[0].value], True
                else:
                    continue
                for name in names:
                    top = name.split(".")[0]
                    if top in sys.stdlib_module_names or top in FIRST_PARTY:
                        continue
                    where = f"{path.relative_to(ROOT)}:{node.lineno}"
                    found.append((top, where, optional))
    return tuple(found)


def _imports() -> dict[str, list[str]]:
    """{top-level module: ["file:line", ...]} of `_import_sites`."""
    found: dict[str, list[str]] = {}
    for top, where, _ in _import_sites():
        found.setdefault(top, []).append(where)
    return found


@functools.cache
def _distributions() -> dict[str, list[str]]:
    return importlib.metadata.packages_distributions()


def _distribution(module: str) -> str:
    """The distribution that provides `module`; one not installed here (tomli, the
    Python 3.10 fallback of tomllib) under the module's own name."""
    names = _distributions().get(module) or [module]
    # protobuf and googleapis share `google`; the first is enough to name it.
    return canonicalize_name(names[0])


def test_every_imported_package_is_declared():
    core, extras = _declared()
    everything = core.union(*extras.values())
    undeclared = {
        module: places[:3]
        for module, places in _imports().items()
        if module not in BACKENDS and _distribution(module) not in everything
    }
    assert not undeclared, f"imported but declared nowhere in pyproject: {undeclared}"


def test_packages_of_an_extra_are_imported_through_optional_import():
    core, extras = _declared()
    plain: dict[str, list[str]] = {}
    for top, where, optional in _import_sites():
        if top in OPTIONAL and not optional:
            plain.setdefault(top, []).append(where)
    assert not plain, f"import these with rnnkit._optional.optional_import: {plain}"
    for module, (package, extra, _) in OPTIONAL.items():
        assert canonicalize_name(package) in extras[extra], (module, extra)
        assert canonicalize_name(package) not in core, f"{package} is a core dependency"
    for module in _imports():
        if module in BACKENDS:
            continue
        distribution = _distribution(module)
        if distribution not in core:
            assert module in OPTIONAL, (
                f"{module} ({distribution}) comes only from an extra: add it to "
                "rnnkit._optional.OPTIONAL and import it with optional_import"
            )


class _NotInstalled:
    """A meta-path finder for which `module` is not installed: importing it (or a
    submodule) raises Python's own ModuleNotFoundError for the package."""

    def __init__(self, module: str):
        self.module = module

    def find_spec(self, name, path=None, target=None):
        if name == self.module:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


def not_installed(monkeypatch, module: str) -> None:
    """`module` as on a machine without it, until the test ends."""
    for name in [key for key in sys.modules if key.split(".")[0] == module]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setattr(sys, "meta_path", [_NotInstalled(module), *sys.meta_path])


def test_a_missing_optional_package_is_one_line_naming_the_extra(monkeypatch):
    not_installed(monkeypatch, "tf2onnx")
    with pytest.raises(MissingDependencyError) as caught:
        optional_import("tf2onnx")
    message = str(caught.value)
    assert "\n" not in message
    assert "ONNX export" in message and 'pip install "rnnkit[export]"' in message
    # Another missing module inside the package is not its absence: it propagates.
    monkeypatch.setitem(sys.modules, "tf2onnx", __import__("json"))
    monkeypatch.setitem(sys.modules, "tf2onnx.no_such", None)
    with pytest.raises(ModuleNotFoundError):
        optional_import("tf2onnx.no_such")


@pytest.mark.parametrize(
    ("form", "module"), [("onnx", "tf2onnx"), ("tflite", "ai_edge_litert")]
)
def test_export_without_the_extra_says_which_to_install(form, module, monkeypatch):
    """ONNX conversion without tf2onnx, a LiteRT run without its interpreter (what
    `rnnkit export --format onnx|tflite` calls): one line naming the extra, raised
    before any work is done (issue 57, point 2)."""
    from rnnkit.export import convert, runtimes

    not_installed(monkeypatch, module)
    with pytest.raises(MissingDependencyError, match=r"rnnkit\[export\]"):
        if form == "onnx":
            convert.to_onnx(object())
        else:
            runtimes.run_tflite(b"not a model", {})


def test_the_launcher_prints_a_missing_package_as_one_line(monkeypatch, tmp_path):
    """A ModuleNotFoundError of an optional package raised anywhere under a command
    is the same one line (exit status 1), whichever command it came from."""
    import rnnkit.export
    from tests.cli_support import invoke

    def missing(*args, **kwargs):
        raise ModuleNotFoundError("No module named 'onnxruntime'", name="onnxruntime")

    monkeypatch.setattr(rnnkit.export, "export", missing)
    result = invoke("export", str(tmp_path), "--format", "onnx")
    assert result.exit_code == 1, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and 'pip install "rnnkit[export]"' in lines[0], lines
    assert "unexpected" not in lines[0]
