"""The configuration of the forecasting recipe (one dataclass per section)."""

from __future__ import annotations

import dataclasses

from rnnkit.recipe import (
    DataConfig,
    EvaluationConfig,
    ModelConfig,
    RecipeConfig,
    TrainConfig,
    field,
    section,
)
from rnnkit.registry import recurrent_names


@dataclasses.dataclass
class ForecastingDataConfig(DataConfig):
    layout: str = field(
        "auto",
        help="File layout: long (id, time, target rows), wide (M4: one row per "
        "series), columns (a time column and one column per series, as ETTh1) or "
        "auto (wide when the header is V1, V2, ..., else long).",
        choices=("auto", "long", "wide", "columns"),
    )
    columns: tuple[str, ...] = field(
        (),
        help="layout=columns: the columns that are series (empty: every column but "
        "the time column).",
    )
    steps: int = field(
        0,
        help="Use the first this many steps of every series (0: all), as the "
        "long-horizon literature cuts ETTh1 to 20 months.",
        at_least=0,
    )
    test_path: str | None = field(
        None,
        help="A wide file of each series' test values (M4's test file), appended "
        "after data.path's values as the test span.",
    )
    id_column: str = field("id", help="Long files: the series id column.")
    time_column: str = field("time", help="Long files: the time column.")
    target_column: str = field("target", help="Long files: the column forecast.")
    covariates: tuple[str, ...] = field(
        (), help="Long files: numeric columns observed in the past only."
    )
    frequency: str | None = field(
        None,
        help="Spacing of the times (pandas alias: h, 30min, D); None: the most "
        "common step between times.",
    )
    horizon: int = field(48, help="Steps forecast from each origin.", at_least=1)
    input_length: int = field(
        336, help="Past steps the model reads per forecast.", at_least=1
    )
    seasonality: int = field(
        48,
        help="Steps per season (24 for hourly data): seasonal naive, Naive2, MASE.",
        at_least=1,
    )
    test_windows: int = field(
        7,
        help="Forecast origins in the test span, each a horizon after the last "
        "(rolling origin; the model is not refitted).",
        at_least=1,
    )
    validation_windows: int = field(
        1, help="Forecast origins in the validation span before it.", at_least=1
    )
    test_steps: int | None = field(
        None,
        help="Length of the test span in steps (none: data.test_windows x "
        "data.horizon; with data.test_path, that file's length). With data.stride=1 "
        "every origin whose forecast lies in it is tested: the long-horizon "
        "literature's fixed spans, at any horizon.",
        at_least=1,
    )
    validation_steps: int | None = field(
        None,
        help="Length of the validation span in steps (none: "
        "data.validation_windows x data.horizon).",
        at_least=1,
    )
    stride: int = field(
        0,
        help="Steps between the validation and the test origins (0: the horizon, "
        "windows that do not overlap; 1: every origin, the long-horizon "
        "literature's protocol). The spans keep their lengths (data.test_steps, "
        "data.validation_steps).",
        at_least=0,
    )
    calendar: bool = field(
        True,
        help="Give the model Fourier terms of the time (a day and a week for "
        "sub-daily data), or of the season when the data has no times.",
    )


@dataclasses.dataclass
class ForecastingModelConfig(ModelConfig):
    architecture: str = field(
        "recurrent",
        help="recurrent: the segment GRU/LSTM encoder and its decoder; linear: one "
        "linear map from the scaled window to the quantiles (DLinear's class).",
        choices=("recurrent", "linear"),
    )
    cell_type: str = field("gru", help="Recurrent layer.", choices=recurrent_names())
    units: int = field(64, help="Units of the projection and recurrences.", at_least=1)
    layers: int = field(1, help="Stacked recurrent layers of the encoder.", at_least=1)
    segment_length: int = field(
        48,
        help="Steps per segment the recurrence reads at once (must divide "
        "data.input_length; 1: step by step).",
        at_least=1,
    )
    decoder: str = field(
        "direct",
        help="direct: every step at once from the last state; recurrent: a "
        "recurrent decoder over the horizon; segments: one recurrent step per "
        "segment of model.segment_length output steps, all from the last state "
        "(SegRNN's); autoregressive: a recurrent decoder "
        "that reads each step's previous value (the true one in training, its own "
        "median or sampled draw when forecasting; DeepAR's).",
        choices=("direct", "recurrent", "segments", "autoregressive"),
    )
    likelihood: str = field(
        "quantile",
        help="quantile: forecast model.quantiles, trained by the pinball loss; "
        "gaussian, student_t, negative_binomial (counts): forecast each step's "
        "distribution, trained by its negative log-likelihood, the quantiles those "
        "of model.samples sampled paths.",
        choices=("quantile", "gaussian", "student_t", "negative_binomial"),
    )
    samples: int = field(
        200,
        help="Paths sampled per forecast with a parametric model.likelihood.",
        at_least=1,
    )
    hidden_units: int = field(
        0,
        help="Width of the direct decoder's hidden layer (0: twice units).",
        at_least=0,
    )
    dropout: float = field(
        0.0, help="Dropout before the output layer.", at_least=0.0, below=1.0
    )
    scaling: str = field(
        "standard",
        help="Each window scaled by its own past: standard (mean, deviation), "
        "last (its last observed value, deviation), mean_abs, or none.",
        choices=("standard", "last", "mean_abs", "none"),
    )
    quantiles: tuple[float, ...] = field(
        (0.025, 0.1, 0.5, 0.9, 0.975),
        help="Quantiles forecast per step (the median is the point forecast).",
        above=0.0,
        below=1.0,
    )
    weighting: str = field(
        "scale",
        help="Each window's loss over: scale (its scaling's scale), "
        "seasonal_difference (its mean absolute seasonal difference, MASE's scale) "
        "or series (its series' standard deviation over the training span, the "
        "scale of the standardised measures).",
        choices=("scale", "seasonal_difference", "series"),
    )
    embedding_dim: int = field(
        4, help="Width of the series embedding (0: none).", at_least=0
    )


@dataclasses.dataclass
class ForecastingEvaluationConfig(EvaluationConfig):
    interval: float = field(
        0.95,
        help="Coverage of the interval scored by MSIS and coverage; the quantiles "
        "must hold its two ends.",
        above=0.0,
        below=1.0,
    )
    standardized: bool = field(
        False,
        help="Also score std_mse and std_mae: the errors of the values standardised "
        "by each series' mean and deviation over its training span (the "
        "long-horizon literature's MSE and MAE, as on ETTh1).",
    )
    plot_series: int = field(
        4, help="Series drawn in the fan chart of the last test window.", at_least=0
    )
    benchmarks: tuple[str, ...] = field(
        ("naive", "seasonal_naive", "naive2", "ses", "theta"),
        help="The M4's benchmarks scored beside the model: naive, seasonal_naive, "
        "naive2 (OWA's yardstick, always scored), ses, holt, damped, comb, theta.",
    )


@dataclasses.dataclass
class ForecastingConfig(RecipeConfig):
    data: ForecastingDataConfig = section(ForecastingDataConfig, "Series and windows.")
    model: ForecastingModelConfig = section(
        ForecastingModelConfig, "The global forecaster."
    )
    train: TrainConfig = section(
        TrainConfig,
        "The training loop.",
        epochs=30,
        batch_size=256,
        patience=5,
        learning_rate=3e-3,
    )
    evaluation: ForecastingEvaluationConfig = section(
        ForecastingEvaluationConfig, "Test windows, intervals and plots."
    )


def check_values(config: ForecastingConfig) -> None:
    """What the config's types and ranges cannot say: values that must agree with
    each other (`ForecastingRecipe.check_config`)."""
    from rnnkit.errors import ConfigError

    d, m = config.data, config.model
    if d.input_length % m.segment_length:
        raise ConfigError(
            f"model.segment_length={m.segment_length} must divide "
            f"data.input_length={d.input_length}; pick a divisor (1 reads step by step)"
        )
    if m.decoder == "segments" and d.horizon % m.segment_length:
        raise ConfigError(
            f"model.segment_length={m.segment_length} must divide "
            f"data.horizon={d.horizon} with model.decoder=segments; pick a common "
            "divisor of the input length and the horizon, or another decoder"
        )
    quantiles = tuple(m.quantiles)
    if not quantiles:
        raise ConfigError("model.quantiles is empty; give at least one, such as 0.5")
    if len(set(quantiles)) != len(quantiles):
        raise ConfigError(
            f"model.quantiles={quantiles} repeats a level; give each once"
        )
    from rnnkit_recipes.forecasting.evaluation import interval_ends

    interval = config.evaluation.interval
    if interval_ends(tuple(sorted(quantiles)), interval) is None:
        low, high = (1 - interval) / 2, (1 + interval) / 2
        raise ConfigError(
            f"model.quantiles={quantiles} lacks {low:g} or {high:g}, the ends of "
            f"evaluation.interval={interval:g} (scored by MSIS and coverage); add "
            "them, or set evaluation.interval to the span of two of the quantiles"
        )
    from rnnkit_recipes.forecasting.baselines import BASELINES

    unknown = [name for name in config.evaluation.benchmarks if name not in BASELINES]
    if unknown:
        raise ConfigError(
            f"evaluation.benchmarks names {', '.join(map(repr, unknown))}, not a "
            f"benchmark; choose from {', '.join(BASELINES)}"
        )
    if m.likelihood == "negative_binomial" and m.scaling in ("standard", "last"):
        raise ConfigError(
            "model.likelihood=negative_binomial scales each window by a pure scale "
            "(its mean is that scale times a positive number); set "
            "model.scaling=mean_abs"
        )
    if m.likelihood != "quantile" and m.weighting != "scale":
        raise ConfigError(
            f"model.weighting={m.weighting} weights the pinball loss; "
            f"model.likelihood={m.likelihood} already scores each window in its own "
            "units; drop model.weighting or set model.likelihood=quantile"
        )
    if m.decoder == "autoregressive" and m.architecture == "linear":
        raise ConfigError(
            "model.decoder=autoregressive is a recurrent decoder; set "
            "model.architecture=recurrent or model.decoder=direct"
        )
    if m.decoder == "autoregressive" and m.dropout:
        raise ConfigError(
            f"model.dropout={m.dropout} drops inputs of the direct and recurrent "
            "decoders' output layer, which the autoregressive decoder does not have; "
            "set model.dropout=0"
        )
    if m.architecture == "linear" and d.covariates:
        raise ConfigError(
            "model.architecture=linear reads the target alone; drop data.covariates "
            "or use model.architecture=recurrent"
        )
    for name in ("test_steps", "validation_steps"):
        steps = getattr(d, name)
        if steps is not None and steps < d.horizon:
            raise ConfigError(
                f"data.{name}={steps} is shorter than data.horizon={d.horizon}, so "
                f"no window fits in it; lengthen data.{name} or shorten the horizon"
            )
    if d.test_path is not None and d.test_steps is not None:
        raise ConfigError(
            f"data.test_steps={d.test_steps} sets the test span's length, which "
            "data.test_path's file sets already; drop data.test_steps"
        )
    if d.test_path is not None and d.path is None:
        raise ConfigError(
            "data.test_path gives the test values of data.path's series; set "
            "data.path too"
        )
