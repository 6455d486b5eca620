"""Forecasting a panel of series with one global model, with quantiles.

One rnnkit GRU/LSTM forecaster (`rnnkit.models.forecaster`) is trained on windows of
every series of the panel: each window scaled by its own past, the calendar as
known-future input, the series as an embedding, the loss the pinball loss of several
quantiles. The test figures put it beside naive, seasonal naive and the M4
competition's Naive2 on the same rolling-origin test windows: sMAPE, MASE and OWA as
the M4 defines them, the weighted quantile loss, and the MSIS and coverage of its
interval. The default data is Taylor's half-hourly electricity demand (offline, from
pmdarima); `configs/m4_hourly.toml` is the M4 competition's Hourly set.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rnnkit_recipes.forecasting.config import ForecastingConfig, check_values

from rnnkit.recipe import Metrics, Recipe, RecipeData, RnnkitError, csv_files_of

if TYPE_CHECKING:
    import keras
    import keras_tuner

log = logging.getLogger("rnnkit")

FORECASTER_ATTRIBUTE = "_rnnkit_forecaster"


@dataclasses.dataclass
class ForecastingData(RecipeData):
    """The splits (batched datasets of (inputs, targets, weights)) and what the
    evaluation needs: the grid, the window reader, the test rows."""

    grid: Any = None
    windows: Any = None
    test_rows: Any = None
    validation_rows: Any = None
    periods: tuple[float, ...] = ()
    source: str = ""
    # {split: (histories, benchmark forecasts)}: they depend on the data alone, so
    # evaluate and write_plots compute them (Naive2's decompositions) once.
    benchmarks: dict = dataclasses.field(default_factory=dict)


class ForecastingRecipe(Recipe):
    """A global quantile forecaster of many series."""

    name = "forecasting"
    summary = (
        "Forecast many series at once with one global GRU/LSTM: quantiles, "
        "calendar inputs, rolling-origin test, M4 benchmarks"
    )
    Config = ForecastingConfig
    split_keys = (
        "data.horizon",
        "data.test_windows",
        "data.validation_windows",
        "data.test_steps",
        "data.validation_steps",
        "data.test_path",
    )

    def check_config(self, config: ForecastingConfig) -> None:
        super().check_config(config)
        check_values(config)

    def load_data(self, config: ForecastingConfig) -> ForecastingData:
        check_values(config)
        return load(config)

    def build_model(self, config: ForecastingConfig, data: ForecastingData):
        import keras
        import numpy as np

        from rnnkit.losses import NegativeLogLikelihood, QuantileLoss
        from rnnkit.models.forecaster import build_forecaster

        grid = data.grid
        covariates = grid.covariates
        mean = variance = None
        if covariates is not None:
            span = covariates[:, : grid.train_end]
            mean = np.nan_to_num(np.nanmean(span, axis=(0, 1)))
            variance = np.nan_to_num(np.nanvar(span, axis=(0, 1)), nan=1.0)
        m = config.model
        training, forecaster = build_forecaster(
            input_length=config.data.input_length,
            horizon=config.data.horizon,
            quantiles=tuple(sorted(m.quantiles)),
            past_covariates=0 if covariates is None else covariates.shape[2],
            covariate_mean=mean,
            covariate_variance=variance,
            time_periods=data.periods,
            series_ids=grid.ids if m.embedding_dim else None,
            embedding_dim=m.embedding_dim,
            cell_type=m.cell_type,
            units=m.units,
            num_layers=m.layers,
            segment_length=m.segment_length,
            decoder=m.decoder,
            hidden_units=m.hidden_units,
            dropout=m.dropout,
            scaling=m.scaling,
            architecture=m.architecture,
            likelihood=m.likelihood,
            samples=m.samples,
            seed=config.train.seed,
            return_training_model=True,
        )
        loss = (
            QuantileLoss(tuple(sorted(m.quantiles)))
            if m.likelihood == "quantile"
            else NegativeLogLikelihood(m.likelihood)
        )
        training.compile(
            optimizer=keras.optimizers.Adam(config.train.learning_rate), loss=loss
        )
        # Not a tracked attribute: the forecaster shares the training model's
        # weights, and its own file is what the run writes (`inference_model`).
        object.__setattr__(training, FORECASTER_ATTRIBUTE, forecaster)
        return training

    def inference_model(self, model: keras.Model) -> keras.Model:
        """The forecaster of a training model that reads the true future or outputs
        distribution parameters (`build_model`); the model itself otherwise."""
        return getattr(model, FORECASTER_ATTRIBUTE, model)

    def search_space(
        self, hp: keras_tuner.HyperParameters, config: ForecastingConfig
    ) -> ForecastingConfig:
        length = config.data.input_length
        segments = [s for s in (1, 12, 24, 48) if length % s == 0 and s <= length]
        decoders = ["direct", "recurrent"]
        if all(config.data.horizon % s == 0 for s in segments):
            decoders.append("segments")  # its segments cut the horizon too
        return config.with_values(
            {
                "model.cell_type": hp.Choice("cell_type", ["gru", "lstm"]),
                "model.units": hp.Choice("units", [32, 64, 128]),
                "model.segment_length": hp.Choice("segment_length", segments),
                "model.decoder": hp.Choice("decoder", decoders),
                "model.dropout": hp.Choice("dropout", [0.0, 0.1, 0.2]),
                "train.learning_rate": hp.Float(
                    "learning_rate", 3e-4, 1e-2, sampling="log"
                ),
            }
        )

    def backtest_folds(
        self, data: ForecastingData, config: ForecastingConfig
    ) -> list[ForecastingData]:
        """`evaluation.folds` = F earlier cut-offs, a fresh model each: fold k
        (k = 1..F, earliest first) holds out the span of `data.test_windows` x
        `data.horizon` steps that lies F - k + 1 spans before the test span, the
        validation windows before it, and trains on everything earlier, as the
        main run does before its test span (the data is cut at the fold's end)."""
        from rnnkit.errors import DataError

        grid = data.grid
        span = grid.test_steps
        folds = []
        for back in range(config.evaluation.folds, 0, -1):
            end = grid.steps - back * span
            if end - span - grid.validation_steps - config.data.horizon < 1:
                raise DataError(
                    f"evaluation.folds={config.evaluation.folds} backtest spans of "
                    f"{span} steps reach back before the data has room to train; "
                    "lower evaluation.folds or data.test_windows"
                )
            folds.append(splits(truncated(grid, end), config, data.source))
        return folds

    def evaluate(
        self, model: keras.Model, data: ForecastingData, config: ForecastingConfig
    ) -> Metrics:
        return _scores(model, data, config, "test")

    def evaluate_validation(
        self, model: keras.Model, data: ForecastingData, config: ForecastingConfig
    ) -> Metrics:
        return _scores(model, data, config, "validation")

    def predict(
        self, model: keras.Model, inputs: Sequence[str], config: ForecastingConfig
    ) -> list[str]:
        _check_model_shape(model, config)
        from rnnkit_recipes.forecasting.predict import forecast_lines

        paths = list(inputs) or [config.data.path]
        lines: list[str] = []
        for path in paths:
            lines += forecast_lines(model, path, config, header=not lines)
        return lines

    def predict_records(
        self,
        model: keras.Model,
        inputs: Sequence[Any],
        config: ForecastingConfig,
        calls: dict | None = None,
    ) -> list[dict[str, Any]]:
        """Per input (a CSV text in the training file's layout, or its columns as
        a JSON object): `{"series": [record, ...]}`, each series' history and
        forecast quantiles."""
        from rnnkit_recipes.forecasting.predict import forecast_records

        if calls is not None:
            raise RnnkitError(
                "the forecasting recipe answers /predict from the Keras runtime; "
                "/v1/models/NAME:predict takes the exported model's inputs"
            )
        _check_model_shape(model, config)
        what = "series in the training file's layout"
        with csv_files_of(inputs, what, "series.csv") as paths:
            return [{"series": forecast_records(model, p, config)} for p in paths]

    @property
    def combines(self) -> tuple[str, ...]:
        return ("mean", "median")

    def ensemble(self, models, configs, combine="mean"):
        from rnnkit_recipes.forecasting.ensemble import ensemble_model

        return ensemble_model(models, configs, combine)

    def export_plan(self, model: keras.Model, config: ForecastingConfig, format: str):
        from rnnkit_recipes.forecasting.export import export_plan

        return export_plan(model, config, format)

    def write_plots(
        self,
        model: keras.Model,
        data: ForecastingData,
        config: ForecastingConfig,
        plot_dir: Path,
    ) -> None:
        from rnnkit_recipes.forecasting.evaluation import error_by_step
        from rnnkit_recipes.forecasting.plots import error_by_step_plot, fan_chart

        from rnnkit.files import write_csv

        forecasts = split_forecasts(model, data, config)
        fan_chart(forecasts, data, config, plot_dir / "fan_chart.png")
        error_by_step_plot(forecasts, data, plot_dir / "error_by_step.png")
        errors = error_by_step(forecasts)  # {system: sMAPE per step}
        write_csv(
            plot_dir / "error_by_step.csv",
            [
                {
                    "step": step + 1,
                    **{name: float(e[step]) for name, e in errors.items()},
                }
                for step in range(config.data.horizon)
            ],
        )


# -- Checks ---------------------------------------------------------------------------


def _check_model_shape(model, config: ForecastingConfig) -> None:
    from rnnkit.errors import ConfigError

    (length,) = [t.shape[1] for t in model.inputs if t.name == "past_target"]
    horizon = model.output_shape[1]
    if (config.data.input_length, config.data.horizon) != (length, horizon):
        raise ConfigError(
            f"this run's model reads data.input_length={length} steps and forecasts "
            f"data.horizon={horizon}; use those (got {config.data.input_length} and "
            f"{config.data.horizon})"
        )


# -- Data -----------------------------------------------------------------------------


def panel_of(config: ForecastingConfig, path: str | None):
    """The panel in `path` (the configured data when None), read as the config says."""
    from rnnkit_recipes.forecasting.panel import load_panel

    d = config.data
    return load_panel(
        path,
        layout=d.layout,
        id_column=d.id_column,
        time_column=d.time_column,
        target_column=d.target_column,
        covariates=tuple(d.covariates),
        frequency=d.frequency,
        columns=tuple(d.columns),
    )


def load(config: ForecastingConfig) -> ForecastingData:
    """The grid of the configured panel and its three splits."""
    import numpy as np
    from rnnkit_recipes.forecasting.data import to_grid
    from rnnkit_recipes.forecasting.wide import append_test

    from rnnkit.errors import DataError

    d = config.data
    panel = panel_of(config, d.path)
    if d.steps:
        panel = panel.first_steps(d.steps)
    test_steps = d.test_steps or d.horizon * d.test_windows
    if d.test_path is not None:
        panel, given = append_test(panel, d.test_path)
        if test_steps > given:
            raise DataError(
                f"data.horizon={d.horizon} x data.test_windows={d.test_windows} = "
                f"{test_steps} test steps, but {Path(d.test_path).name} holds {given} "
                "per series; lower data.horizon or data.test_windows"
            )
        test_steps = given
    validation_steps = d.validation_steps or d.horizon * d.validation_windows
    lengths = np.array([len(v) for v in panel.values])
    needed = test_steps + validation_steps + 1
    short = lengths < needed
    if short.all() or short.any() and d.test_path is not None:
        first = panel.ids[int(np.flatnonzero(short)[0])]
        raise DataError(
            f"{int(short.sum())} of {len(lengths)} series (the first {first}, "
            f"{int(lengths[short][0])} steps) are too short for a test span of "
            f"{test_steps} steps, a validation span of {validation_steps} and a step "
            "to learn from; lower data.horizon, data.test_windows or "
            "data.validation_windows, or drop the short series"
        )
    if short.any():
        log.warning(
            "%d of %d series are shorter than the test and validation spans (%d "
            "steps); they are left out", int(short.sum()), len(lengths), needed,
        )  # fmt: skip
        panel = panel.select(np.flatnonzero(~short))
    grid = to_grid(panel, test_steps, validation_steps)
    if config.model.likelihood == "negative_binomial" and np.nanmin(grid.values) < 0:
        raise DataError(
            f"{panel.source} holds negative values (the least "
            f"{np.nanmin(grid.values):g}) and model.likelihood=negative_binomial is "
            "a distribution of counts; use model.likelihood=gaussian or student_t"
        )
    if grid.last_times is not None and len(set(grid.last_times)) > 1:
        log.warning(
            "the series end at different times (%s to %s): each one's test span is "
            "its own last %d steps, not one common date", min(grid.last_times),
            max(grid.last_times), test_steps,
        )  # fmt: skip
    return splits(grid, config, panel.source)


def truncated(grid, end: int):
    """The grid as if every series ended at step `end` (a backtest fold's data)."""
    return dataclasses.replace(
        grid,
        values=grid.values[:, :end],
        covariates=None if grid.covariates is None else grid.covariates[:, :end],
        last_times=None,
    )


def splits(grid, config: ForecastingConfig, source: str) -> ForecastingData:
    """Training, validation and test windows of `grid`: the test span its last
    `grid.test_steps` steps, validation the `grid.validation_steps` before them,
    training everything before (a window's forecast span ends by the validation's
    first step)."""
    from rnnkit_recipes.forecasting.data import Windows, time_periods, window_origins

    from rnnkit.errors import DataError

    d = config.data
    test_steps = grid.test_steps
    recurrent = config.model.architecture == "recurrent"  # linear: the target only
    calendar = d.calendar and recurrent
    periods = time_periods(grid.frequency, d.seasonality) if calendar else ()
    windows = Windows(
        grid,
        d.input_length,
        d.horizon,
        periods,
        grid.ids if config.model.embedding_dim and recurrent else None,
        config.model.scaling,
        config.model.weighting,
        d.seasonality,
        likelihood=config.model.likelihood,
        teacher=config.model.decoder == "autoregressive" and recurrent,
    )
    # A training window reads at least half its input: one that begins a series
    # would be scaled by the statistics of a handful of values.
    train_rows = window_origins(
        grid, 1, grid.train_end - d.horizon, d.input_length, d.horizon,
        min_observed=max(1, d.input_length // 2),
    )  # fmt: skip
    if len(train_rows) == 0:
        raise DataError(
            f"no training window: every series' training span is shorter than "
            f"data.horizon={d.horizon} plus one step; lower data.horizon or the "
            "test and validation windows"
        )
    stride = d.stride or d.horizon
    validation_rows = window_origins(
        grid, grid.train_end, grid.steps - test_steps - d.horizon,
        d.input_length, d.horizon, stride=stride,
    )  # fmt: skip
    test_first = grid.steps - test_steps
    test_rows = window_origins(
        grid, test_first, grid.steps - d.horizon, d.input_length, d.horizon,
        stride=stride,
    )  # fmt: skip
    batch = config.train.batch_size
    return ForecastingData(
        train=windows.dataset(
            train_rows, batch, seed=config.train.seed if config.train.shuffle else None
        ),
        validation=windows.dataset(validation_rows, batch),
        test=windows.dataset(test_rows, batch, teacher=False),
        grid=grid,
        windows=windows,
        test_rows=test_rows,
        validation_rows=validation_rows,
        periods=periods,
        source=source,
    )


def _scores(
    model: keras.Model,
    data: ForecastingData,
    config: ForecastingConfig,
    split: str,
) -> Metrics:
    """The model's and the benchmarks' figures on the windows of `split`."""
    from rnnkit_recipes.forecasting.evaluation import scores, standardized_errors

    _check_model_shape(model, config)
    forecasts = split_forecasts(model, data, config, split)
    table = scores(forecasts, config.data.seasonality, config.evaluation.interval)
    if config.evaluation.standardized:
        train = data.grid.values[:, : data.grid.train_end]
        for name, row in standardized_errors(forecasts, train).items():
            table[name].update(row)
    return table


def split_forecasts(
    model, data: ForecastingData, config: ForecastingConfig, split: str = "test"
):
    """The model's and the benchmarks' forecasts of every window of `split` ("test",
    or "validation" to compare configurations)."""
    import numpy as np
    from rnnkit_recipes.forecasting.evaluation import (
        Forecasts,
        benchmark_forecasts,
        history_of,
    )

    grid = data.grid
    rows = data.test_rows if split == "test" else data.validation_rows
    inputs, _, _ = data.windows.arrays(rows)
    quantiles = model.predict(inputs, batch_size=config.train.batch_size, verbose=0)
    horizon = config.data.horizon
    steps = rows[:, 1][:, None] + np.arange(horizon)
    actual = grid.values[rows[:, 0][:, None], steps]
    if split not in data.benchmarks:
        histories = [history_of(grid.values[s], o) for s, o in rows]
        data.benchmarks[split] = (
            histories,
            benchmark_forecasts(
                histories,
                horizon,
                config.data.seasonality,
                config.evaluation.benchmarks,
            ),
        )
    histories, baselines = data.benchmarks[split]
    return Forecasts(
        rows=rows,
        actual=actual,
        histories=histories,
        quantiles=quantiles.astype("float64"),
        levels=tuple(sorted(config.model.quantiles)),
        baselines=baselines,
    )
