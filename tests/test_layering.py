"""Dependencies point one way: down the layers listed below.

The list is explained in docs/guides/architecture.md.

Every `import` of rnnkit or of a recipe, at module level or inside a function, is read
from the source (AST), so an import that runs upward fails here by name wherever it is.
A module may import its own package, anything on a lower layer, and nothing on its own
layer or above; a recipe may import any of rnnkit but the command line, and no other
recipe.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# rnnkit's packages and modules, lowest first. The floor imports nothing of rnnkit.
LAYERS: list[set[str]] = [
    {"rnnkit", "errors", "_keras_private", "files", "_native_logs", "_recurrent_names"},
    # Imports of an extra's packages (rnnkit/_optional.py) rank with the layers.
    {"layers", "_optional"},
    {"config", "data", "losses", "optimizers", "metrics", "plots", "decoding"},
    # Config sections shared by recipes (the Transformer's) stand on rnnkit.config.
    {"models", "shared_sections"},
    {"diagnostics"},
    {"recipe"},
    {"registry"},
    {"training"},
    {"tuning"},
    {"export"},
    # `rnnkit serve`: runs behind an HTTP API, from any export runtime.
    {"serving"},
    {"cli"},
    # Public checks for people who extend rnnkit; nothing in rnnkit imports them.
    {"testing"},
]
RANK = {name: rank for rank, names in enumerate(LAYERS) for name in names}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[0] == "recipes":
        parts[0] = "rnnkit_recipes"
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports(path: Path) -> list[tuple[int, str]]:
    """(line, module) for every rnnkit or recipe import in `path`, wherever it is."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            # `from rnnkit import training` imports the package `rnnkit.training`.
            found += [(node.lineno, f"{node.module}.{a.name}") for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level:
            raise AssertionError(f"{path}:{node.lineno}: use absolute imports")
    return [(line, name) for line, name in found if name.split(".")[0] in PACKAGES]


PACKAGES = {"rnnkit", "rnnkit_recipes"}


def group(module: str) -> str:
    """The layer entry a module belongs to (`rnnkit.layers.lstm` -> `layers`)."""
    parts = module.split(".")
    if parts[0] == "rnnkit_recipes":
        return "recipe:" + (parts[1] if len(parts) > 1 else "")
    return parts[1] if len(parts) > 1 and parts[1] in RANK else "rnnkit"


def violation(importer: str, imported: str) -> str | None:
    """Why `importer` may not import `imported`, or None when it may."""
    source, target = group(importer), group(imported)
    if source == target:
        return None
    if source.startswith("recipe:"):
        if target.startswith("recipe:"):
            return "a recipe imports another recipe (share through rnnkit)"
        return "a recipe imports the command line" if target == "cli" else None
    if target.startswith("recipe:"):
        return "rnnkit imports a recipe (recipes are plugins: load them by name)"
    if source not in RANK:
        return f"{source} is on no layer of tests/test_layering.py: add it there"
    if RANK[target] >= RANK[source]:
        return (
            f"{source} (layer {RANK[source]}) imports {target} (layer {RANK[target]})"
        )
    return None


def sources() -> list[Path]:
    return sorted([*(ROOT / "rnnkit").rglob("*.py"), *(ROOT / "recipes").rglob("*.py")])


def upward_imports(paths: list[Path]) -> list[str]:
    problems = []
    for path in paths:
        importer = module_name(path)
        for line, imported in imports(path):
            reason = violation(importer, imported)
            if reason:
                where = path.relative_to(ROOT)
                problems.append(f"{where}:{line} imports {imported}: {reason}")
    return problems


def test_no_import_runs_upward():
    problems = upward_imports(sources())
    assert not problems, "\n".join(problems)


def test_every_rnnkit_package_is_on_a_layer():
    names = {
        path.stem if path.is_file() else path.name
        for path in (ROOT / "rnnkit").iterdir()
        if (path.suffix == ".py" or (path / "__init__.py").is_file())
    }
    names.discard("__init__")
    assert names - set(RANK) == set()


@pytest.mark.parametrize(
    ("importer", "imported", "expected"),
    [
        ("rnnkit.layers.lstm", "rnnkit.training.runner", "layers (layer 1)"),
        ("rnnkit.layers.lstm", "rnnkit.files.write_json", None),
        ("rnnkit.models.language_model", "rnnkit.layers.LSTM", None),
        ("rnnkit.training.runner", "rnnkit.tuning.cluster", "training (layer 7)"),
        ("rnnkit.data.text", "rnnkit.metrics", "data (layer 2)"),
        ("rnnkit_recipes.sentiment.recipe", "rnnkit_recipes.language_model", "another"),
        ("rnnkit_recipes.sentiment.recipe", "rnnkit.training.runner", None),
        ("rnnkit.cli.run", "rnnkit_recipes.stock", "recipes are plugins"),
    ],
)
def test_the_rule_itself(importer, imported, expected):
    reason = violation(importer, imported)
    assert (reason is None) if expected is None else (expected in reason)


def test_a_planted_upward_import_inside_a_function_fails(tmp_path):
    planted = tmp_path / "rnnkit" / "layers" / "planted.py"
    planted.parent.mkdir(parents=True)
    planted.write_text("def f():\n    from rnnkit.training import runner\n")
    problems = [
        (module_name_in(planted, tmp_path), imported)
        for _, imported in imports(planted)
        if violation(module_name_in(planted, tmp_path), imported)
    ]
    assert problems == [("rnnkit.layers.planted", "rnnkit.training.runner")]


def module_name_in(path: Path, root: Path) -> str:
    return ".".join(path.relative_to(root).with_suffix("").parts)


# A module may run past this many lines only with its reason in its docstring ("Over
# 500 lines: ..."): one idea per module, as the review asked (issue 57, point 11).
MAX_LINES = 500


def test_no_module_runs_past_500_lines_without_a_stated_reason():
    long = []
    for folder in ("rnnkit", "recipes"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            text = path.read_text(encoding="utf-8")
            if text.count("\n") <= MAX_LINES:
                continue
            docstring = ast.get_docstring(ast.parse(text)) or ""
            if "over 500 lines" not in docstring.lower():
                long.append(f"{path.relative_to(ROOT)} ({text.count(chr(10))} lines)")
    assert not long, f"split these or state why they are one module: {long}"
