"""Every numeric config field of every registered recipe declares its range.

The launcher refuses each value just outside it with one line that names the key, the
value and the range."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest
from click.testing import CliRunner

from rnnkit import config as config_lib
from rnnkit import registry
from rnnkit.cli import main

RECIPES = sorted(registry.available())


def _numeric_fields(name: str) -> list[config_lib.FieldInfo]:
    return [
        info
        for info in config_lib.fields_of(registry.load(name).Config)
        if info.is_numeric
    ]


def _is_int(info: config_lib.FieldInfo) -> bool:
    return "int" in config_lib.type_name(info.type)


def _outside(info: config_lib.FieldInfo) -> list[float]:
    """Values just outside each declared limit (the limit itself for open ones)."""
    bounds, step = info.bounds, 1 if _is_int(info) else 1e-3
    values = []
    if bounds.at_least is not None:
        values.append(bounds.at_least - step)
    if bounds.above is not None:
        values.append(bounds.above)
    if bounds.at_most is not None:
        values.append(bounds.at_most + step)
    if bounds.below is not None:
        values.append(bounds.below)
    return [int(v) if _is_int(info) else v for v in values]


CASES = [
    pytest.param(name, info.key, value, id=f"{name}-{info.key}={value}")
    for name in RECIPES
    for info in _numeric_fields(name)
    for value in _outside(info)
]


def test_every_numeric_field_declares_a_range():
    unranged = [
        f"{name}: {info.key}"
        for name in RECIPES
        for info in _numeric_fields(name)
        if not info.bounds
    ]
    assert not unranged, f"numeric fields without a declared range: {unranged}"
    assert len(CASES) >= 3 * len(RECIPES)


def test_the_bad_values_of_the_issue_are_refused():
    keys = {case.values[1] for case in CASES}
    for key in (
        "train.epochs",
        "train.batch_size",
        "train.learning_rate",
        "model.dropout",
        "data.validation_fraction",
    ):
        assert key in keys


@pytest.mark.parametrize(("name", "key", "value"), CASES)
def test_out_of_range_values_are_one_line_errors(name, key, value, tmp_path):
    result = CliRunner().invoke(
        main,
        ["run", name, "--set", f"{key}={value}", "--run-dir", str(tmp_path / "r")],
    )
    assert result.exit_code != 0
    last = result.output.strip().splitlines()[-1]
    assert last.startswith(f"Error: {key} (command line): {value!r}"), result.output
    assert "out of range; allowed: " in last
    assert not (tmp_path / "r").exists(), "a refused config must not start a run"


def test_negative_epochs_shortcut_is_refused(tmp_path):
    result = CliRunner().invoke(
        main, ["run", "stock", "--epochs", "-3", "--run-dir", str(tmp_path / "r")]
    )
    assert result.exit_code != 0
    assert "train.epochs (command line): -3 is out of range; allowed: >= 1" in (
        result.output
    )
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize("name", RECIPES)
def test_shipped_configs_are_in_range(name):
    recipe = registry.load(name)
    folder = Path(inspect.getfile(type(recipe))).parent / "configs"
    files = sorted(folder.glob("*.toml"))
    assert files, f"{name} ships no configs in {folder}"
    for path in files:
        config_lib.load_toml(recipe.Config, path)
