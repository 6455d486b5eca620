"""rnnkit.testing.recipe: the recipe contract's named checks pass on sound recipes (the
example plugin, whose own test runs here, and the stock recipe) and name the check
that a broken recipe fails."""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util

import pytest

from rnnkit import config as config_lib
from rnnkit.errors import ConfigError
from rnnkit.testing.recipe import CHECK_NAMES, check_recipe, recipe_checks
from rnnkit.training import runner
from tests.markdown_examples import ROOT
from tests.stock_support import SMOKE_CONFIG, smoke_config

EXAMPLE = ROOT / "examples" / "rnnkit-recipe-example"
EXAMPLE_SMOKE = EXAMPLE / "rnnkit_recipe_example" / "configs" / "smoke.toml"


def failed(name: str, detail: str) -> str:
    """The pattern of the failure of check `name` (`detail` a regular expression)."""
    return rf"^check {name} failed: {detail}"


@pytest.fixture
def example(monkeypatch):
    """The example plugin's recipe module, imported from its folder (not installed)."""
    monkeypatch.syspath_prepend(str(EXAMPLE))
    return importlib.import_module("rnnkit_recipe_example.recipe")


@pytest.fixture
def runs(monkeypatch) -> list:
    """The calls of `runner.run` the test makes, recorded."""
    calls = []
    train = runner.run

    def recorded(*args, **kwargs):
        calls.append(args)
        return train(*args, **kwargs)

    monkeypatch.setattr(runner, "run", recorded)
    return calls


def test_the_example_plugins_own_test_passes(example, runs, tmp_path):
    path = EXAMPLE / "tests" / "test_recipe.py"
    spec = importlib.util.spec_from_file_location("example_test_recipe", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.test_recipe_contract(tmp_path)
    assert len(runs) == 1  # the checks after one_epoch read its run
    assert not (tmp_path / "export").exists()


def test_check_recipe_passes_on_the_stock_recipe_with_its_export(tmp_path):
    ran = check_recipe(
        "stock",
        smoke_config({"train.epochs": 1}),
        predict_inputs=[],  # the latest window of the default data
        work_dir=tmp_path,
    )
    assert ran == list(CHECK_NAMES)
    assert (tmp_path / "export" / "saved_model" / "export.json").is_file()


def test_a_missing_baseline_and_a_missing_export_name_their_checks(
    example, runs, tmp_path
):
    class NoBaseline(example.AirlineRecipe):
        def evaluate(self, model, data, config):
            return {"model": super().evaluate(model, data, config)["model"]}

    checks = dict(recipe_checks(NoBaseline(), EXAMPLE_SMOKE, work_dir=tmp_path))
    checks["one_epoch"]()
    with pytest.raises(AssertionError, match=failed("evaluate_table", ".*no baseline")):
        checks["evaluate_table"]()
    with pytest.raises(AssertionError, match=failed("export", "recipe 'airline' decl")):
        checks["export"]()
    assert len(runs) == 1


def test_a_lambda_layer_fails_the_safe_mode_reload(example, tmp_path):
    class WithLambda(example.AirlineRecipe):
        def build_model(self, config, data):
            import keras

            model = super().build_model(config, data)
            doubled = keras.layers.Lambda(lambda x: 2 * x)(model.outputs[0])
            model = keras.Model(model.inputs, doubled)
            model.compile(loss="mse")
            return model

    name = "model_reloads_in_safe_mode"
    with pytest.raises(AssertionError, match=failed(name, r".*safe_mode=True\) rais")):
        check_recipe(WithLambda(), EXAMPLE_SMOKE, work_dir=tmp_path, checks=[name])


def test_a_refused_config_fails_check_config(example):
    class Refusing(example.AirlineRecipe):
        def check_config(self, config):
            super().check_config(config)
            raise ConfigError(f"model.units={config.model.units}: give at least 64")

    refused = r".*ConfigError: model.units=8: give at least 64$"
    with pytest.raises(AssertionError, match=failed("check_config", refused)):
        check_recipe(Refusing(), EXAMPLE_SMOKE, checks=["check_config"])


def test_an_empty_split_fails_data_splits(example):
    class EmptyTest(example.AirlineRecipe):
        def load_data(self, config):
            data = super().load_data(config)
            inputs, targets = data.test
            return dataclasses.replace(data, test=(inputs[:0], targets[:0]))

    with pytest.raises(AssertionError, match=failed("data_splits", "test holds no")):
        check_recipe(EmptyTest(), EXAMPLE_SMOKE, checks=["data_splits"])


def test_an_optional_field_with_a_default_fails_the_toml_round_trip(example):
    # None is left out of a written file, so it reads back as the default.
    data_config = dataclasses.make_dataclass(
        "StartData",
        [("start", str | None, config_lib.field("1949-01", help="First month."))],
        bases=(example.AirlineData,),
    )
    recipe_config = dataclasses.make_dataclass(
        "StartConfig",
        [("data", data_config, config_lib.section(data_config))],
        bases=(example.AirlineConfig,),
    )

    class FromStart(example.AirlineRecipe):
        Config = recipe_config

    config = recipe_config().with_values({"data.start": None})
    changed = "data.start=None reads back as '1949-01'$"
    with pytest.raises(AssertionError, match=failed("toml_round_trip", changed)):
        check_recipe(FromStart(), config, checks=["toml_round_trip"])


def test_a_name_and_a_toml_path_give_the_recipe_and_its_config():
    checks = ["toml_round_trip", "check_config"]
    assert check_recipe("stock", SMOKE_CONFIG, checks=checks) == checks


def test_predict_without_inputs_fails_before_training(tmp_path):
    with pytest.raises(AssertionError, match=failed("predict", "pass predict_inputs")):
        check_recipe("stock", SMOKE_CONFIG, work_dir=tmp_path, checks=["predict"])
    assert not (tmp_path / "run").exists()


def test_an_unknown_check_name_is_a_value_error():
    with pytest.raises(ValueError, match=r"unknown check\(s\) evaluate; choose from"):
        check_recipe("stock", SMOKE_CONFIG, checks=["evaluate"])


def test_a_work_dir_with_files_is_a_value_error(tmp_path):
    (tmp_path / "run").mkdir()
    with pytest.raises(ValueError, match=r"^work_dir: .* holds files"):
        recipe_checks("stock", SMOKE_CONFIG, work_dir=tmp_path)
