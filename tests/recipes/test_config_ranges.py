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


# Values each in range that cannot work together (or with the recipe): refused before
# anything is loaded or written, by the run and by its --dry-run alike.
UNWORKABLE = [
    *(
        pytest.param(
            name,
            ["evaluation.folds=2"],
            f"evaluation.folds=2: recipe {name!r} has no walk-forward backtest; "
            "set evaluation.folds=0",
            id=f"{name}-folds",
        )
        for name in RECIPES
        if not registry.load(name).backtests
    ),
    pytest.param(
        "language_model",
        ["data.vocabulary_size=1"],
        "data.vocabulary_size=1 keeps only <unk>, so every token is unknown; set it "
        "to 0 (all tokens) or at least 2",
        id="language_model-vocabulary",
    ),
    pytest.param(
        "translation",
        ["data.tokenizer=word", "data.vocabulary_size=4"],
        "data.vocabulary_size=4 holds no word besides the 4 special tokens, so every "
        "word is [UNK]; set it to 0 (all words) or at least 5",
        id="translation-vocabulary",
    ),
]


def _sets(assignments: list[str]) -> list[str]:
    return [arg for assignment in assignments for arg in ("--set", assignment)]


@pytest.mark.parametrize(("name", "assignments", "message"), UNWORKABLE)
def test_dry_run_refuses_values_that_cannot_work(name, assignments, message):
    result = CliRunner().invoke(main, ["run", name, *_sets(assignments), "--dry-run"])
    assert result.exit_code == 1, result.output
    assert result.output.strip().splitlines()[-1] == f"Error: {message}"


@pytest.mark.parametrize(("name", "assignments", "message"), UNWORKABLE)
def test_runs_refuse_values_that_cannot_work_before_writing(
    name, assignments, message, tmp_path
):
    result = CliRunner().invoke(
        main, ["run", name, *_sets(assignments), "--run-dir", str(tmp_path / "r")]
    )
    assert result.exit_code == 1, result.output
    assert result.output.strip().splitlines()[-1] == f"Error: {message}"
    assert not (tmp_path / "r").exists(), "a refused config must not start a run"


def test_only_a_recipe_with_backtest_folds_backtests():
    backtesting = {name for name in RECIPES if registry.load(name).backtests}
    assert backtesting == {"stock", "forecasting"}
