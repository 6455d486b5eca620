"""The forecasting recipe: the recipe contract (rnnkit.testing), honest splits, the
test table beside the M4 benchmarks, predictions per series and step, and bad
configurations."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from rnnkit_recipes.forecasting.evaluation import interval_ends, weighted_quantile_loss
from rnnkit_recipes.forecasting.recipe import ForecastingRecipe

from rnnkit import config as config_lib
from rnnkit.errors import ConfigError, DataError
from rnnkit.testing import recipe_checks
from tests.shared_data import SHARED_DATA, require

ROOT = Path(__file__).resolve().parents[2]
SMOKE = ROOT / "recipes" / "forecasting" / "configs" / "smoke.toml"
M4 = SHARED_DATA / "forecasting"
recipe = ForecastingRecipe()


def smoke(**values):
    return config_lib.resolve(recipe.Config, SMOKE).with_values(values)


def shipped_config_data(name: str, path: Path, **values):
    """The shipped config `configs/NAME` reading `path` (the shared data file), with
    `values` set, and the data it loads."""
    require(path)
    config = config_lib.resolve(
        recipe.Config,
        ROOT / "recipes" / "forecasting" / "configs" / name,
        {"data.path": str(path), **values},
    )
    return config, recipe.load_data(config)


@pytest.mark.slow
@pytest.mark.parametrize(
    "name, check",
    recipe_checks(
        recipe,
        SMOKE,
        predict_inputs=[],  # no file: the default data, as `rnnkit predict RUN`
    ),
)
def test_recipe_contract(name, check):
    check()


@pytest.fixture(scope="module")
def smoke_data():
    return recipe.load_data(smoke())


def test_spans_are_cut_from_the_end_of_every_series(smoke_data):
    grid, config = smoke_data.grid, smoke()
    horizon = config.data.horizon
    assert grid.test_steps == horizon * config.data.test_windows
    assert grid.validation_steps == horizon * config.data.validation_windows
    # test origins: one per horizon across the test span, the last ending the series
    origins = sorted(set(smoke_data.test_rows[:, 1]))
    assert origins[0] == grid.steps - grid.test_steps
    assert origins[-1] + horizon == grid.steps
    assert np.all(np.diff(origins) == horizon)
    # the training batches read input_length steps and forecast a horizon
    for x, y, w in smoke_data.train.take(1):
        assert x["past_target"].shape[1] == config.data.input_length
        assert y.shape[1] == w.shape[1] == horizon


def test_training_windows_never_reach_the_validation_span(smoke_data):
    from rnnkit_recipes.forecasting.data import window_origins

    config = smoke()
    grid = smoke_data.grid
    length = config.data.input_length
    rows = window_origins(
        grid, 1, grid.train_end - config.data.horizon, length, config.data.horizon,
        min_observed=length // 2,
    )  # fmt: skip
    assert len(rows) > 0
    assert (rows[:, 1] + config.data.horizon <= grid.train_end).all()
    # each reads at least half its input: none starts before half a window in
    assert rows[:, 1].min() >= length // 2
    total = sum(int(batch[1].shape[0]) for batch in smoke_data.train)
    assert total == len(rows)


def test_evaluate_scores_a_perfect_forecaster_as_perfect(smoke_data):
    """A model that knows the future: sMAPE and MASE 0, OWA 0, full coverage; the
    benchmarks' rows are those of rnnkit's M4 benchmarks on the same windows."""
    from rnnkit_recipes.forecasting.evaluation import (
        Forecasts,
        benchmark_forecasts,
        history_of,
        scores,
    )

    config = smoke()
    grid, rows = smoke_data.grid, smoke_data.test_rows
    horizon = config.data.horizon
    actual = grid.values[rows[:, 0][:, None], rows[:, 1][:, None] + np.arange(horizon)]
    levels = tuple(sorted(config.model.quantiles))
    quantiles = np.repeat(actual[..., None], len(levels), axis=-1)
    histories = [history_of(grid.values[s], o) for s, o in rows]
    forecasts = Forecasts(
        rows, actual, histories, quantiles, levels,
        benchmark_forecasts(histories, horizon, config.data.seasonality),
    )  # fmt: skip
    table = scores(forecasts, config.data.seasonality, 0.95)
    assert list(table)[:1] == ["model"]
    assert set(table) == {"model", "naive", "seasonal_naive", "naive2"}
    model = table["model"]
    assert model["smape"] == model["mase"] == model["owa"] == model["mean_wql"] == 0.0
    assert model["coverage_95"] == 1.0
    assert table["naive2"]["owa"] == pytest.approx(1.0)
    assert table["seasonal_naive"]["smape"] > 0


def test_evaluate_scores_the_validation_split_on_request(tmp_path_factory, tmp_path):
    """`rnnkit evaluate RUN --split validation` (how runs and ensembles are compared
    without the test split): the model's sMAPE there is its median's on the
    validation windows, computed here in numpy, and not the test windows'."""
    import json

    from rnnkit import registry
    from rnnkit.training import runner
    from tests.cli_support import invoke
    from tests.smoke_runs import smoke_run

    run = smoke_run(tmp_path_factory, "forecasting")
    assert run.exit_code == 0, run.output[-3000:]
    output = tmp_path / "validation.json"
    result = invoke(
        "evaluate", str(run.run_dir), "--split", "validation", "--output", str(output)
    )
    assert result.exit_code == 0, result.output
    assert "Validation metrics" in result.output and "Test metrics" not in result.output
    validation = json.loads(output.read_text())["validation"]
    assert {"model", "naive2", "seasonal_naive"} <= set(validation)

    _, config, model = runner.load_run(run.run_dir, registry.load)
    data = recipe.load_data(config)
    rows, horizon = data.validation_rows, config.data.horizon
    assert (rows[:, 1] + horizon <= data.grid.steps - data.grid.test_steps).all()
    inputs, _, _ = data.windows.arrays(rows)
    levels = sorted(config.model.quantiles)
    median = model.predict(inputs, verbose=0)[..., levels.index(0.5)]
    actual = data.grid.values[
        rows[:, 0][:, None], rows[:, 1][:, None] + np.arange(horizon)
    ]
    per_window = []  # the M4's sMAPE: each window's mean, then their mean
    for a, f in zip(actual, median.astype("float64"), strict=True):
        seen = np.isfinite(a)
        a, f = a[seen], f[seen]
        per_window.append(200 * np.mean(np.abs(a - f) / (np.abs(a) + np.abs(f))))
    assert validation["model"]["smape"] == pytest.approx(np.mean(per_window), rel=1e-4)
    test = json.loads((run.run_dir / "metrics.json").read_text())["test"]
    for system in ("model", "naive2"):  # the benchmarks too scored on validation
        assert validation[system]["smape"] != pytest.approx(test[system]["smape"])


def test_weighted_quantile_loss_and_interval_ends():
    actual = np.array([[2.0, 4.0]])
    quantiles = np.array([[[1.0, 2.0], [4.0, 6.0]]])  # levels 0.1 and 0.9
    # pinball: q=0.1: (0.1*1 + 0) ; q=0.9: (0 + 0.1*2) -> 2 * sum / sum|y| = 2 * x / 6
    expected = np.mean([2 * 0.1 / 6.0, 2 * 0.2 / 6.0])
    assert weighted_quantile_loss(actual, quantiles, (0.1, 0.9)) == pytest.approx(
        expected
    )
    assert interval_ends((0.025, 0.5, 0.975), 0.95) == (0, 2)
    assert interval_ends((0.1, 0.5, 0.9), 0.95) is None


@pytest.mark.parametrize(
    "values, message",
    [
        (
            {"model.segment_length": 7},
            "model.segment_length=7 must divide data.input_length=96",
        ),
        (
            {"model.decoder": "segments", "data.horizon": 36},
            "model.segment_length=24 must divide data.horizon=36 with model.decoder=s",
        ),
        ({"model.quantiles": (0.5, 0.5)}, "repeats a level"),
        ({"data.test_path": "test.csv"}, "set data.path too"),
        (
            {"data.test_steps": 40},
            "data.test_steps=40 is shorter than data.horizon=48, so no window fits",
        ),
        (
            {"data.path": "a.csv", "data.test_path": "b.csv", "data.test_steps": 48},
            "data.test_path's file sets already; drop data.test_steps",
        ),
        ({"model.quantiles": (0.1, 0.5, 0.9)}, "lacks 0.025 or 0.975, the ends of"),
        (
            {"evaluation.benchmarks": ("naive", "arima")},
            "evaluation.benchmarks names 'arima', not a benchmark; choose from naive,",
        ),
    ],
)
def test_bad_configurations_are_refused_in_one_line(values, message):
    with pytest.raises(ConfigError, match=message):
        recipe.check_config(smoke(**values))


def test_a_horizon_longer_than_the_test_file_is_refused():
    require(M4 / "m4_hourly_train.csv.gz")
    config = smoke(**{
        "data.path": str(M4 / "m4_hourly_train.csv.gz"),
        "data.test_path": str(M4 / "m4_hourly_test.csv.gz"),
        "data.horizon": 49, "data.test_windows": 1,
    })  # fmt: skip
    with pytest.raises(
        DataError, match="49 test steps, but m4_hourly_test.csv.gz holds 48"
    ):
        recipe.load_data(config)


def test_series_too_short_for_the_spans_are_left_out_or_refused(tmp_path):
    import pandas as pd

    rows = [{"id": "long", "target": float(i % 5)} for i in range(300)]
    rows += [{"id": "short", "target": 1.0} for _ in range(20)]
    path = tmp_path / "panel.csv"
    pd.DataFrame(rows).to_csv(path, index=False)
    data = recipe.load_data(smoke(**{"data.path": str(path), "data.horizon": 12,
                                     "data.seasonality": 5}))  # fmt: skip
    assert data.grid.ids == ["long"]
    with pytest.raises(DataError, match="too short for a test span of 600 steps"):
        recipe.load_data(smoke(**{"data.path": str(path), "data.horizon": 300}))


def test_predict_writes_every_series_and_step_after_its_end(tmp_path):
    """`rnnkit predict RUN file.csv`: a CSV row per series and step, its time the next
    ones on the series' grid, one column per quantile in increasing order."""
    import pandas as pd

    rows = []
    for series, end in (("a", "2024-01-05 23:00"), ("b", "2024-01-06 05:00")):
        for index, time in enumerate(pd.date_range(end=end, periods=200, freq="h")):
            rows.append({"id": series, "time": time, "target": 10 + index % 24})
    path = tmp_path / "panel.csv"
    pd.DataFrame(rows).to_csv(path, index=False)
    config = smoke(**{"data.path": str(path), "data.horizon": 6,
                      "data.seasonality": 24, "data.test_windows": 1})  # fmt: skip
    model = recipe.build_model(config, recipe.load_data(config))
    lines = recipe.predict(model, [str(path)], config)
    assert lines[0] == "id,step,time,q0.025,q0.1,q0.5,q0.9,q0.975"
    table = pd.read_csv(pd.io.common.StringIO("\n".join(lines)))
    assert len(table) == 2 * 6
    first_b = table[table["id"] == "b"].iloc[0]
    assert first_b["step"] == 1 and first_b["time"] == "2024-01-06 06:00:00"
    quantiles = table[[c for c in table.columns if c.startswith("q")]].to_numpy()
    assert (np.diff(quantiles, axis=1) >= 0).all()
    shorter = smoke(**{"data.path": str(path), "data.horizon": 5,
                       "data.seasonality": 24, "data.test_windows": 1})  # fmt: skip
    with pytest.raises(ConfigError, match="forecasts data.horizon=6"):
        recipe.predict(model, [str(path)], shorter)
    # The model keeps the calendar it trained on (a day and a week of hours), so a
    # daily file, whose two periods (a week and a year of days) would fit the same
    # inputs, is refused, not forecast with the wrong phases.
    assert model.get_layer("calendar").periods == (24.0, 168.0)
    days = pd.DataFrame(rows).assign(time=lambda f: f["time"].dt.floor("D"))
    days = days.groupby(["id", "time"], as_index=False)["target"].mean()
    daily = tmp_path / "daily.csv"
    days.to_csv(daily, index=False)
    with pytest.raises(DataError, match=r"periods \(24, 168\), and this file's times"):
        recipe.predict(model, [str(daily)], config)


def test_a_model_saved_before_it_kept_its_periods_is_checked_by_their_count(tmp_path):
    """A model without a calendar layer (saved before the periods were kept) takes a
    file whose times give as many periods as it reads, and refuses one that gives
    fewer: a wide file (no times) gives the season alone."""
    from rnnkit.models.forecaster import build_forecaster

    config = smoke(**{"data.horizon": 6, "data.seasonality": 24})
    model = build_forecaster(
        input_length=96, horizon=6, quantiles=sorted(config.model.quantiles),
        time_features=4, units=4, segment_length=24,
    )  # fmt: skip
    wide = tmp_path / "wide.csv"
    header = ",".join(f'"V{i + 1}"' for i in range(121))
    values = ",".join(str(10 + i % 24) for i in range(120))
    wide.write_text(f'{header}\n"H1",{values}\n')
    with pytest.raises(DataError, match=r"calendar terms of 2 period\(s\), and this "):
        recipe.predict(model, [str(wide)], config)


def test_shipped_configs_load_and_default_toml_is_the_defaults():
    import tomllib

    from tests.config_support import check_shipped_configs

    names = check_shipped_configs(recipe)
    assert {"default.toml", "smoke.toml", "m4_hourly.toml"} <= set(names)
    defaults = recipe.Config()
    written = tomllib.loads(
        (ROOT / "recipes" / "forecasting" / "configs" / "default.toml").read_text()
    )
    for section, values in written.items():
        for key, value in values.items():
            value = tuple(value) if isinstance(value, list) else value
            assert defaults.get(f"{section}.{key}") == value, f"{section}.{key}"


def test_the_m4_figures_come_from_the_shipped_m4_config():
    """The README's M4 command is configs/m4_hourly.toml with only the data files and
    the seed given, so the file is the configuration the figures came from."""
    import shlex

    from tests.markdown_examples import shell_commands

    readme = (ROOT / "recipes" / "forecasting" / "README.md").read_text("utf-8")
    measured = readme[readme.index("## Measured") :]
    commands = [c for c in shell_commands(measured.split("```bash")[1].split("```")[0])]
    assert len(commands) == 1, commands
    words = shlex.split(commands[0])
    assert words[:5] == [
        "rnnkit", "run", "forecasting", "--config",
        "recipes/forecasting/configs/m4_hourly.toml",
    ]  # fmt: skip
    settings = [words[i + 1].split("=")[0] for i, w in enumerate(words) if w == "--set"]
    assert settings == ["data.path", "data.test_path"]
    assert "--seed" in words and len(words) == 5 + 2 * len(settings) + 2


def ensemble_block(heading, next_heading):
    """The words of each command of the second bash block between the README's
    `heading` and `next_heading`: the member runs, then `rnnkit ensemble`."""
    import shlex

    from tests.markdown_examples import shell_commands

    readme = (ROOT / "recipes" / "forecasting" / "README.md").read_text("utf-8")
    section = readme[readme.index(heading) : readme.index(next_heading)]
    block = section.split("```bash")[2].split("```")[0]
    *runs, joined = map(shlex.split, shell_commands(block))
    return runs, joined


def test_the_m4_ensemble_is_the_five_shipped_m4_configs():
    """The README's M4 ensemble: a run of configs/m4_hourly.toml, one of
    configs/m4_hourly_mean_abs.toml, one of configs/m4_hourly_student_t.toml, one of
    configs/m4_hourly_segments.toml and one of configs/m4_hourly_linear.toml, each with
    only the data files, the seed (1) and its run directory given, then `rnnkit
    ensemble --combine median` of those five directories for seeds 1 to N (the five
    commands once per seed); each config is the first or another with one change."""
    runs, joined = ensemble_block("### M4 Hourly", "### ETTh1")
    names = [
        "m4_hourly.toml", "m4_hourly_mean_abs.toml", "m4_hourly_student_t.toml",
        "m4_hourly_segments.toml", "m4_hourly_linear.toml",
    ]  # fmt: skip
    assert len(runs) == len(names)
    run_dirs = []
    for words, name in zip(runs, names, strict=True):
        assert words[:5] == [
            "rnnkit", "run", "forecasting", "--config",
            f"recipes/forecasting/configs/{name}",
        ]  # fmt: skip
        options = dict(zip(words[5::2], words[6::2], strict=True))
        sets = [w.split("=")[0] for i, w in enumerate(words) if words[i - 1] == "--set"]
        assert sets == ["data.path", "data.test_path"]
        assert set(options) == {"--set", "--seed", "--run-dir"}
        assert options["--seed"] == "1" and options["--run-dir"].endswith("-1")
        run_dirs.append(options["--run-dir"][: -len("-1")])
    assert joined[:2] == ["rnnkit", "ensemble"]
    members = joined[2 : joined.index("--combine")]
    assert joined[joined.index("--combine") + 1] == "median"
    seeds = len(members) // len(run_dirs)
    assert seeds == 6 and members == [  # the text's "seeds 1 to 6", 30 runs
        f"{run_dir}-{seed}" for seed in range(1, seeds + 1) for run_dir in run_dirs
    ]
    standard, mean_abs, student_t, segments, linear = (
        config_lib.resolve(recipe.Config, ROOT / "recipes/forecasting/configs" / name)
        for name in names
    )
    assert mean_abs == standard.with_values({"model.scaling": "mean_abs"})
    assert student_t == mean_abs.with_values(
        {"model.likelihood": "student_t", "model.samples": 200}
    )
    assert segments == standard.with_values(
        {"model.decoder": "segments", "model.scaling": "last"}
    )
    assert linear == standard.with_values({"model.architecture": "linear"})


def test_the_etth1_ensemble_is_three_seeds_of_the_shipped_etth1_config():
    """The README's ETTh1 ensemble: three runs of configs/etth1.toml that differ in
    their seed and run directory only, then `rnnkit ensemble` of those directories."""
    runs, joined = ensemble_block("### ETTh1", "### S&P 500")
    assert len(runs) == 3
    run_dirs, seeds = [], set()
    for words in runs:
        assert words[:5] == [
            "rnnkit", "run", "forecasting", "--config",
            "recipes/forecasting/configs/etth1.toml",
        ]  # fmt: skip
        options = dict(zip(words[5::2], words[6::2], strict=True))
        assert len(words) == 9 and set(options) == {"--seed", "--run-dir"}
        run_dirs.append(options["--run-dir"])
        seeds.add(options["--seed"])
    assert len(seeds) == 3 and len(set(run_dirs)) == 3
    assert joined[:2] == ["rnnkit", "ensemble"] and joined[2:5] == run_dirs
    assert joined[5:] == ["--run-dir", joined[-1]] and joined[-1] not in run_dirs


@pytest.mark.parametrize(
    "heading, config", [("### ETTh1", "etth1.toml"), ("### S&P 500", "sp500.toml")]
)
def test_a_readme_figure_comes_from_its_shipped_config(heading, config):
    """The README's ETTh1 and S&P 500 commands are their shipped configs with only
    the seed given, so each file is the configuration its figures came from."""
    import shlex

    from tests.markdown_examples import shell_commands

    readme = (ROOT / "recipes" / "forecasting" / "README.md").read_text("utf-8")
    section = readme[readme.index(heading) :]
    block = section.split("```bash")[1].split("```")[0]
    (command,) = shell_commands(block)
    assert shlex.split(command) == [
        "rnnkit", "run", "forecasting", "--config",
        f"recipes/forecasting/configs/{config}", "--seed", "1337",
    ]  # fmt: skip


def test_the_sp500_config_tests_the_last_year_of_every_ticker_by_the_week():
    """Calendar days 2013-02-08 to 2018-02-07 (weekends and holidays missing), the
    tickers listed for less than two years left out, 52 test weeks ending on the
    file's last day and 52 validation weeks before them, every input 12 weeks back."""
    import pandas as pd

    _, data = shipped_config_data(
        "sp500.toml", SHARED_DATA / "stocks" / "sp500_all_stocks_5yr.csv.gz"
    )
    grid = data.grid
    days = pd.date_range("2013-02-08", "2018-02-07", freq="D")
    assert grid.steps == len(days) and len(grid.ids) == 496
    assert (grid.test_steps, grid.validation_steps) == (364, 364)
    assert set(grid.last_times) == {pd.Timestamp("2018-02-07")}
    weekend = days.day_of_week.to_numpy() >= 5
    assert np.isnan(grid.values[:, weekend]).all()
    assert np.isfinite(grid.values[:, ~weekend]).mean() > 0.9
    for rows, first in (
        (data.validation_rows, grid.train_end),
        (data.test_rows, grid.steps - 364),
    ):
        origins = np.unique(rows[:, 1])
        assert len(origins) == 52 and np.all(np.diff(origins) == 7)
        assert origins[0] == first
    assert days[grid.steps - 364] == pd.Timestamp("2017-02-09")
    apple = grid.ids.index("AAPL")
    inputs, targets, weights = data.windows.arrays(
        data.test_rows[data.test_rows[:, 0] == apple][:1]
    )
    values = grid.values[apple]
    start = grid.steps - 364
    past, future = values[start - 84 : start], values[start : start + 7]
    np.testing.assert_allclose(inputs["past_target"][0], np.nan_to_num(past))
    np.testing.assert_array_equal(inputs["past_observed"][0], np.isfinite(past))
    # the weekend's targets count for nothing
    np.testing.assert_allclose(targets[0], np.nan_to_num(future), rtol=1e-6)
    assert np.all((weights[0] > 0) == np.isfinite(future))


def test_the_search_space_offers_only_segment_lengths_that_divide_the_input():
    """And the segments decoder only where each of them divides the horizon too."""
    import keras_tuner

    for length, offered in ((96, [1, 12, 24, 48]), (100, [1])):
        hp = keras_tuner.HyperParameters()
        drawn = recipe.search_space(hp, smoke(**{"data.input_length": length}))
        recipe.check_config(drawn)
        assert hp.get("segment_length") in offered
        choice = next(p for p in hp.space if p.name == "segment_length")
        assert list(choice.values) == offered
    names = {p.name for p in hp.space}
    assert {"cell_type", "units", "segment_length", "decoder", "learning_rate"} <= names
    for horizon, decoders in ((48, ["direct", "recurrent", "segments"]), (7, None)):
        hp = keras_tuner.HyperParameters()
        recipe.search_space(hp, smoke(**{"data.horizon": horizon}))
        choice = next(p for p in hp.space if p.name == "decoder")
        assert list(choice.values) == (decoders or ["direct", "recurrent"])
    for decoder in ("segments", "direct"):  # every draw is a valid config
        hp = keras_tuner.HyperParameters()
        hp.Fixed("decoder", decoder)
        recipe.check_config(recipe.search_space(hp, smoke()))


def test_backtest_folds_hold_out_the_spans_before_the_test_span(smoke_data):
    config = smoke(**{"evaluation.folds": 2})
    grid, horizon = smoke_data.grid, config.data.horizon
    span = grid.test_steps
    folds = recipe.backtest_folds(smoke_data, config)
    assert len(folds) == 2
    for back, fold in zip((2, 1), folds, strict=True):
        end = grid.steps - back * span  # the fold's data ends with its test span
        np.testing.assert_array_equal(fold.grid.values, grid.values[:, :end])
        origins = sorted(set(fold.test_rows[:, 1]))
        assert origins[0] == end - span and origins[-1] + horizon == end
        assert (fold.validation_rows[:, 1] + horizon <= end - span).all()
        assert fold.grid.train_end == end - span - grid.validation_steps
        total = sum(int(batch[1].shape[0]) for batch in fold.train)
        assert 0 < total < sum(int(batch[1].shape[0]) for batch in smoke_data.train)
    with pytest.raises(DataError, match="lower evaluation.folds"):
        recipe.backtest_folds(smoke_data, smoke(**{"evaluation.folds": 40}))


def test_error_by_step_is_written_beside_its_plot(tmp_path, smoke_data):
    import csv

    config = smoke()
    model = recipe.build_model(config, smoke_data)
    recipe.write_plots(model, smoke_data, config, tmp_path)
    assert (tmp_path / "error_by_step.png").is_file()
    with (tmp_path / "error_by_step.csv").open() as handle:
        rows = list(csv.DictReader(handle))
    assert [int(r["step"]) for r in rows] == list(range(1, config.data.horizon + 1))
    assert {"model", "seasonal_naive", "naive2"} <= set(rows[0])
    # seasonal naive's step errors, by hand from the test windows
    from rnnkit_recipes.forecasting.recipe import split_forecasts

    forecasts = split_forecasts(model, smoke_data, config)
    naive = forecasts.baselines["seasonal_naive"]
    actual = forecasts.actual
    expected = np.nanmean(
        200 * np.abs(actual - naive) / (np.abs(actual) + np.abs(naive)), axis=0
    )
    np.testing.assert_allclose(
        [float(r["seasonal_naive"]) for r in rows], expected, rtol=1e-6
    )


@pytest.mark.parametrize("horizon", [96, 336])
def test_the_etth1_config_follows_the_long_horizon_literatures_protocol(horizon):
    """12, 4 and 4 months of the first 20 (8,640, 2,880 and 2,880 hours), every
    origin of the validation and test spans, inputs reaching back before a span, at
    the shipped horizon and at one that does not divide the spans."""
    config, data = shipped_config_data(
        "etth1.toml", M4 / "ETTh1.csv.gz", **{"data.horizon": horizon}
    )
    grid, horizon = data.grid, config.data.horizon
    assert (grid.steps, grid.train_end, grid.steps - grid.test_steps) == (
        14_400,
        8_640,
        11_520,
    )
    for rows, first in ((data.validation_rows, 8_640), (data.test_rows, 11_520)):
        assert len(rows) == 7 * (2_880 - horizon + 1)
        origins = np.unique(rows[:, 1])
        assert origins[0] == first and np.all(np.diff(origins) == 1)
        assert origins[-1] + horizon == first + 2_880
    inputs, targets, _ = data.windows.arrays(data.test_rows[:1])
    values = grid.values[data.test_rows[0, 0]]
    np.testing.assert_allclose(inputs["past_target"][0], values[11_520 - 96 : 11_520])
    np.testing.assert_allclose(targets[0], values[11_520 : 11_520 + horizon])


def test_standardized_errors_are_the_literatures_mse_and_mae():
    """std_mse and std_mae against scikit-learn's StandardScaler fitted on the
    training rows (the literature's scaling), on real ETTh1 values: the seasonal
    naive forecast of a day of every channel from three origins."""
    import pandas as pd
    from rnnkit_recipes.forecasting.evaluation import Forecasts, standardized_errors
    from sklearn.preprocessing import StandardScaler

    path = M4 / "ETTh1.csv.gz"
    require(path)
    values = pd.read_csv(path).drop(columns="date").to_numpy()[:600].T  # (7, 600)
    train = values[:, :400]
    rows = np.array([(s, o) for o in (400, 450, 520) for s in range(7)])
    actual = np.stack([values[s, o : o + 24] for s, o in rows])
    forecast = np.stack([values[s, o - 24 : o] for s, o in rows])
    forecasts = Forecasts(
        rows=rows, actual=actual, histories=[], quantiles=forecast[..., None],
        levels=(0.5,), baselines={"seasonal_naive": forecast},
    )  # fmt: skip
    table = standardized_errors(forecasts, train)
    scaler = StandardScaler().fit(train.T)
    mean, deviation = scaler.mean_[rows[:, 0], None], scaler.scale_[rows[:, 0], None]
    error = (forecast - mean) / deviation - (actual - mean) / deviation
    for name in ("model", "seasonal_naive"):
        row = table[name]
        assert row["std_mse"] == pytest.approx(np.mean(error**2), rel=1e-12)
        assert row["std_mae"] == pytest.approx(np.mean(np.abs(error)), rel=1e-12)
