"""`rnnkit ensemble` of forecasting runs (recipes/forecasting/ensemble.py,
rnnkit/training/ensemble.py): the ensemble is the mean (or the median) of its
members, each on its own window; it reloads, is a run that `rnnkit evaluate`,
`predict` and `export` take, and bad combinations are one-line errors."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import keras
import numpy as np
import pytest
from rnnkit_recipes.forecasting.ensemble import ensemble_model
from rnnkit_recipes.forecasting.recipe import ForecastingRecipe

from rnnkit import config as config_lib
from rnnkit.errors import ConfigError
from rnnkit.models.forecaster import build_forecaster
from rnnkit.training.run_dir import load_model, save_model
from tests.cli_support import error_line, invoke

ROOT = Path(__file__).resolve().parents[2]
SMOKE = ROOT / "recipes" / "forecasting" / "configs" / "smoke.toml"
IDS = ["a", "b", "c"]
recipe = ForecastingRecipe()


def config_of(**values):
    return config_lib.resolve(
        recipe.Config, SMOKE, {"data.horizon": 4, "model.quantiles": (0.1, 0.5, 0.9)}
    ).with_values(values)


def window(length):
    rng = np.random.default_rng(4)
    return {
        "past_target": rng.uniform(50, 150, (5, length)).astype("float32"),
        "past_observed": (rng.uniform(size=(5, length)) > 0.1).astype("float32"),
        "past_time": rng.uniform(-1, 1, (5, length, 2)).astype("float32"),
        "future_time": rng.uniform(-1, 1, (5, 4, 2)).astype("float32"),
        "series": np.array(["a", "c", "b", "zz", "a"], dtype=object),
    }


def test_the_ensemble_is_the_mean_of_its_members_on_their_own_windows(tmp_path):
    keras.utils.set_random_seed(1)
    levels = (0.1, 0.5, 0.9)
    recurrent = build_forecaster(
        input_length=16, horizon=4, quantiles=levels, time_periods=(24.0,),
        series_ids=IDS, embedding_dim=2, units=4, segment_length=4,
    )  # fmt: skip
    linear = build_forecaster(
        input_length=8, horizon=4, quantiles=levels, architecture="linear"
    )
    configs = [
        config_of(**{"data.input_length": 16, "model.embedding_dim": 2}),
        # a linear model reads no series id, whatever its embedding_dim says
        config_of(**{"data.input_length": 8, "model.architecture": "linear"}),
    ]
    assert configs[1].model.embedding_dim > 2
    model, config = ensemble_model([recurrent, linear], configs)
    assert config.data.input_length == 16 and config.model.embedding_dim == 2
    assert {t.name for t in model.inputs} == set(window(16))
    x = window(16)
    short = {k: x[k][:, -8:] for k in ("past_target", "past_observed")}
    expected = (np.asarray(recurrent(x)) + np.asarray(linear(short))) / 2
    np.testing.assert_allclose(np.asarray(model(x)), expected, rtol=1e-6, atol=1e-5)
    again = load_model(save_model(model, tmp_path / "ensemble.keras"))
    np.testing.assert_allclose(np.asarray(again(x)), expected, rtol=1e-6, atol=1e-5)


@pytest.mark.parametrize(
    "values, message",
    [
        ({"data.horizon": 6}, "the runs differ in data.horizon \\(4, 6\\)"),
        ({"model.quantiles": (0.1, 0.9)}, "the runs differ in model.quantiles"),
        ({"data.path": "other.csv"}, "the runs differ in data.path"),
    ],
)
def test_members_that_forecast_other_windows_are_refused(values, message):
    model = build_forecaster(input_length=8, horizon=4, quantiles=(0.1, 0.5, 0.9))
    with pytest.raises(ConfigError, match=message) as error:
        ensemble_model([model, model], [config_of(), config_of(**values)])
    assert "\n" not in str(error.value)


@pytest.fixture
def runtimes():
    """The export tests' runtime processes, ended when the test ends."""
    from tests.export.support import stop_children

    yield
    stop_children()


def member_run(tmp_path_factory, length: int, scaling: str) -> Path:
    """A run of the default data through the launcher on a window of `length` steps
    with `scaling`, made once per test session (tests/shared_once.py): read-only."""
    from tests.shared_once import made_once

    def make(folder):
        made = invoke(
            "run", "forecasting", "--config", str(SMOKE), "--run-dir",
            str(folder / "run"), "--set", f"data.input_length={length}",
            "--set", f"model.scaling={scaling}", "--set", "model.embedding_dim=0",
            "--epochs", "1",
        )  # fmt: skip
        assert made.exit_code == 0, made.output

    name = f"forecasting-member-{length}-{scaling}"
    return made_once(tmp_path_factory, name, make) / "run"


def test_rnnkit_ensemble_writes_a_run_like_any_other(
    tmp_path_factory, tmp_path, runtimes
):
    """Two runs of the default data (the shared smoke run, and one on a shorter
    window with another scaling) through the launcher, as a user runs them."""
    from tests.export.support import assert_close, run_fresh
    from tests.export.test_export_recipes import artefact_path, exported
    from tests.smoke_runs import smoke_run

    first = smoke_run(tmp_path_factory, "forecasting")
    assert first.exit_code == 0, first.output[-3000:]
    second, joined = member_run(tmp_path_factory, 48, "mean_abs"), tmp_path / "joined"
    result = invoke(
        "ensemble", str(first.run_dir), str(second), "--run-dir", str(joined)
    )
    assert result.exit_code == 0, result.output
    record = json.loads((joined / "run.json").read_text())
    assert record["ensemble_of"] == [str(first.run_dir), str(second)]
    metrics = json.loads((joined / "metrics.json").read_text())["test"]

    # Its forecasts are the members' mean on the test windows it is scored on.
    model, inputs, forecasts = member_forecasts(joined, [first.run_dir, second])
    np.testing.assert_allclose(
        model.predict(inputs, verbose=0), np.mean(forecasts, axis=0), rtol=1e-5
    )
    evaluated = invoke("evaluate", str(joined), "--output", str(tmp_path / "m.json"))
    assert evaluated.exit_code == 0, evaluated.output
    again = json.loads((tmp_path / "m.json").read_text())["test"]["model"]
    assert again == pytest.approx(metrics["model"], rel=1e-6)
    predicted = invoke("predict", str(joined))
    assert predicted.exit_code == 0 and predicted.output.startswith("id,step,time,")

    # ONNX, in onnxruntime in a fresh process, equals the Keras ensemble.
    exported_run = exported(joined, "onnx", tmp_path)
    # a day and a week of half-hours, as the members recorded them
    assert exported_run.description["notes"]["periods"] == [48.0, 336.0]
    ids = (exported_run.output / "series.txt").read_text().splitlines()
    row = {series: line + 1 for line, series in enumerate(ids)}
    given = {k: np.asarray(v) for k, v in inputs.items() if k != "series"}
    given["series_index"] = np.array([row[s] for s in inputs["series"]], "int32")
    (actual,) = run_fresh(
        tmp_path, [("onnx", artefact_path(exported_run), "forecast", given)]
    )
    assert_close(actual, {"quantiles": model.predict(inputs, verbose=0)})


def member_forecasts(joined, runs):
    """The ensemble run `joined`'s model, its test windows' inputs, and each member
    run's own forecasts of them (the last steps of the window it was trained on)."""
    _, config, model = recipe_config_model(joined)
    data = recipe.load_data(config)
    inputs, _, _ = data.windows.arrays(data.test_rows)
    forecasts = []
    for path in runs:
        member = load_model(path / "model.keras")
        own = {
            t.name: inputs[t.name][:, -t.shape[1] :]
            if t.name.startswith("past_")
            else inputs[t.name]
            for t in member.inputs
        }
        forecasts.append(member.predict(own, verbose=0))
    return model, inputs, forecasts


def recipe_config_model(run_dir):
    from rnnkit import registry
    from rnnkit.training import runner

    return runner.load_run(run_dir, registry.load)


def test_runs_that_cannot_be_combined_are_one_line_errors(tmp_path_factory, tmp_path):
    from tests.smoke_runs import smoke_run

    stock = smoke_run(tmp_path_factory, "stock").run_dir
    forecasting = smoke_run(tmp_path_factory, "forecasting").run_dir
    other_stock = shutil.copytree(stock, tmp_path / "stock-copy")
    # Two runs whose data file is gone: refused once the ensemble's folder is made.
    moved = []
    for name in ("moved-a", "moved-b"):
        copy = shutil.copytree(forecasting, tmp_path / name)
        config = copy / "config.toml"
        text = config.read_text()
        config.write_text(text.replace("[data]\n", '[data]\npath = "gone.csv"\n', 1))
        moved.append(copy)
    cases = [
        ([forecasting], "combines two runs or more, received 1"),
        ([forecasting, forecasting], "a run is given twice"),
        ([stock, forecasting], "different recipes \\(forecasting, stock\\)"),
        ([stock, other_stock], "recipe 'stock' does not combine runs"),
        (moved, "no data file at .*gone.csv"),
    ]
    for runs, message in cases:
        result = invoke("ensemble", *map(str, runs), "--run-dir", str(tmp_path / "e"))
        assert re.search(message, error_line(result)), result.output
        assert not (tmp_path / "e").exists()  # nothing half-made is left


@pytest.mark.parametrize("count", [3, 4])
def test_the_median_layer_is_numpys_median_and_reloads(count, tmp_path):
    """Odd and even counts (of an even number, the mean of the two middle values),
    members that cross one another."""
    from rnnkit.models.forecaster_layers import Median

    rng = np.random.default_rng(count)
    values = [rng.normal(size=(5, 4, 3)).astype("float32") for _ in range(count)]
    inputs = [keras.Input((4, 3)) for _ in range(count)]
    model = keras.Model(inputs, Median(name="quantiles")(inputs))
    expected = np.median(np.stack(values), axis=0)
    np.testing.assert_allclose(np.asarray(model(values)), expected, atol=1e-6)
    again = load_model(save_model(model, tmp_path / "median.keras"))
    np.testing.assert_allclose(np.asarray(again(values)), expected, atol=1e-6)
    # A member that is NaN somewhere makes the median NaN there, as the mean; one
    # that is infinite is sorted like any value far out (the median of the rest's
    # middle).
    values[1][0, 0, 0], values[-1][2, 1, 2] = np.nan, np.inf
    combined = np.asarray(model(values))
    assert np.isnan(combined[0, 0, 0])
    assert np.isfinite(combined).sum() == combined.size - 1
    assert combined[2, 1, 2] == pytest.approx(
        np.median(np.stack(values)[:, 2, 1, 2]), abs=1e-6
    )


def test_the_median_layer_takes_a_list():
    from rnnkit.models.forecaster_layers import Median

    with pytest.raises(ValueError, match="Median takes a list of tensors"):
        Median()(np.zeros((2, 3), "float32"))


def test_a_median_ensemble_is_the_median_of_its_members_and_exports(
    tmp_path_factory, tmp_path, runtimes
):
    """`rnnkit ensemble --combine median` of three runs of the default data: its
    forecasts are the element-wise median of the members' on the test windows (not
    their mean), run.json and the config's header record the rule, and the LiteRT and
    ONNX files (which sort by top-k) equal Keras in their runtimes, fresh processes."""
    from tests.export.support import assert_close, run_fresh
    from tests.export.test_export_recipes import artefact_path, exported
    from tests.smoke_runs import smoke_run

    first = smoke_run(tmp_path_factory, "forecasting")
    assert first.exit_code == 0, first.output[-3000:]
    runs = [
        first.run_dir,
        member_run(tmp_path_factory, 48, "mean_abs"),
        member_run(tmp_path_factory, 72, "last"),
    ]
    joined = tmp_path / "joined"
    result = invoke(
        "ensemble", *map(str, runs), "--combine", "median", "--run-dir", str(joined)
    )
    assert result.exit_code == 0, result.output
    assert json.loads((joined / "run.json").read_text())["combine"] == "median"
    assert "--combine median" in (joined / "config.toml").read_text()

    model, inputs, forecasts = member_forecasts(joined, runs)
    combined = model.predict(inputs, verbose=0)
    np.testing.assert_allclose(combined, np.median(forecasts, axis=0), rtol=1e-5)
    assert not np.allclose(combined, np.mean(forecasts, axis=0), rtol=1e-3)

    jobs = []
    for format in ("tflite", "onnx"):
        exported_run = exported(joined, format, tmp_path)
        ids = (exported_run.output / "series.txt").read_text().splitlines()
        row = {series: line + 1 for line, series in enumerate(ids)}
        given = {k: np.asarray(v) for k, v in inputs.items() if k != "series"}
        given["series_index"] = np.array([row[s] for s in inputs["series"]], "int32")
        jobs.append((format, artefact_path(exported_run), "forecast", given))
    for actual in run_fresh(tmp_path, jobs):
        assert_close(actual, {"quantiles": combined})


def test_an_unknown_way_to_combine_is_refused():
    with pytest.raises(ConfigError, match="combine='vote' is not a way to combine"):
        ensemble_model([], [config_of()], "vote")


def test_combines_names_the_ways_each_recipe_combines_runs():
    from rnnkit import registry

    assert ForecastingRecipe().combines == ("mean", "median")
    assert registry.load("stock").combines == ()


def test_a_recipe_written_to_the_two_argument_hook_still_combines(
    tmp_path_factory, tmp_path
):
    """A recipe whose `ensemble(models, configs)` predates `combine` makes the mean
    (its `combines`, the base's, names the mean only)."""
    from rnnkit.recipe import Recipe
    from rnnkit.training.ensemble import combine
    from tests.smoke_runs import smoke_run

    class Legacy(ForecastingRecipe):
        combines = Recipe.combines

        def ensemble(self, models, configs):
            return super().ensemble(models, configs)

    first = smoke_run(tmp_path_factory, "forecasting").run_dir
    copy = shutil.copytree(first, tmp_path / "copy")
    run_dir, metrics = combine([first, copy], lambda name: Legacy(), tmp_path / "e")
    assert json.loads((run_dir / "run.json").read_text())["combine"] == "mean"
    recorded = json.loads((first / "metrics.json").read_text())["test"]["model"]
    assert metrics["test"]["model"] == pytest.approx(recorded, rel=1e-5)
    # It cannot take the median: one line, and nothing written.
    with pytest.raises(ConfigError, match="by their mean only .* drop --combine med"):
        combine([first, copy], lambda name: Legacy(), tmp_path / "m", how="median")
    assert not (tmp_path / "m").exists()
