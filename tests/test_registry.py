"""rnnkit.registry: recipes are entry points, listed without importing them."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from rnnkit import registry
from rnnkit.errors import RecipeNotFoundError
from rnnkit.recipe import Recipe
from tests.stock_support import run_rnnkit


def test_stock_is_registered():
    assert "stock" in registry.available()
    recipe = registry.load("stock")
    assert isinstance(recipe, Recipe)
    assert recipe.name == "stock"


def test_unknown_recipe_suggests_the_nearest():
    with pytest.raises(RecipeNotFoundError, match="did you mean 'stock'"):
        registry.load("stok")


def test_listing_imports_neither_tensorflow_nor_keras():
    code = (
        "import sys; from rnnkit.cli import main\n"
        "try:\n    main(['list'])\nexcept SystemExit:\n    pass\n"
        "heavy = [m for m in ('tensorflow', 'keras', 'jax') if m in sys.modules]\n"
        "print('HEAVY', heavy)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert "stock" in result.stdout
    assert "HEAVY []" in result.stdout


DUMMY_RECIPE = """
from rnnkit.recipe import Recipe


class DummyRecipe(Recipe):
    name = "dummy"
    summary = "A third-party recipe found through its entry point"
"""

DUMMY_PYPROJECT = """
[build-system]
requires = ["setuptools>=61"]
build-backend = "setuptools.build_meta"

[project]
name = "rnnkit-dummy-recipe"
version = "0.0.1"

[project.entry-points."rnnkit.recipes"]
dummy = "rnnkit_dummy_recipe:DummyRecipe"

[tool.setuptools]
py-modules = ["rnnkit_dummy_recipe"]
"""


@pytest.fixture(scope="module")
def dummy_site(tmp_path_factory):
    """A tiny distribution that declares a recipe, pip-installed into its own folder."""
    source = tmp_path_factory.mktemp("dummy_source")
    (source / "pyproject.toml").write_text(textwrap.dedent(DUMMY_PYPROJECT))
    (source / "rnnkit_dummy_recipe.py").write_text(textwrap.dedent(DUMMY_RECIPE))
    target = tmp_path_factory.mktemp("dummy_site")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-deps",
            "--no-build-isolation",
            "--no-index",
            "--target",
            str(target),
            str(source),
        ],
        check=True,
        capture_output=True,
        timeout=300,
    )
    return target


def test_installed_third_party_recipe_shows_up_in_list(dummy_site):
    path = os.pathsep.join(
        filter(None, [str(dummy_site), os.environ.get("PYTHONPATH")])
    )
    result = run_rnnkit("list", env={"PYTHONPATH": path})
    assert result.returncode == 0, result.stderr
    lines = {line.split()[0]: line for line in result.stdout.splitlines()}
    assert "A third-party recipe found through its entry point" in lines["dummy"]
    assert "stock" in lines
    # Without the folder on the path, it is gone: discovery is by metadata only.
    assert "dummy" not in run_rnnkit("list").stdout


def test_broken_plugin_is_listed_as_unavailable(tmp_path, monkeypatch):
    dist = tmp_path / "broken_plugin-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: broken-plugin\nVersion: 0.1\n"
    )
    (dist / "entry_points.txt").write_text(
        "[rnnkit.recipes]\nbroken = no_such_module_here:Recipe\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    rows = dict(registry.summaries())
    assert rows["broken"].startswith("(unavailable: recipe 'broken'")
    assert "ModuleNotFoundError" in rows["broken"]
    assert rows["stock"]
