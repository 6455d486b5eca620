"""The config files a recipe ships (recipes/NAME/configs/*.toml), checked."""

from __future__ import annotations

import sys
from pathlib import Path

from rnnkit import config as config_lib
from rnnkit.recipe import Recipe

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]


def check_shipped_configs(recipe: Recipe) -> list[str]:
    """Loads every config file of `recipe`'s folder, asserts that the loaded config
    holds each value the file sets and passes `recipe.check_config`, and returns the
    file names."""
    paths = sorted((ROOT / "recipes" / recipe.name / "configs").glob("*.toml"))
    for path in paths:
        config = config_lib.load_toml(recipe.Config, path)
        recipe.check_config(config)
        document = tomllib.loads(path.read_text("utf-8"))
        document.pop(config_lib.EXTEND_KEY, None)  # the file it names is checked too
        for section_name, values in document.items():
            for name, value in values.items():
                key = f"{section_name}.{name}"
                written = tuple(value) if isinstance(value, list) else value
                assert config.get(key) == written, f"{path.name}: {key}"
    return [path.name for path in paths]
