"""`rnnkit ensemble` of forecasting runs: one model whose quantiles are the mean (or the
median, `--combine median`) of its members' (the habit of the M4 competition's leaders:
models that differ in their scaling, input length or seed err differently, and their
mean errs less).

The members must forecast the same windows of the same data: the same data keys
(file, layout, spans, horizon, seasonality) and the same quantiles. They may differ
in everything else, the input length included: the ensemble reads the longest window,
and each member the last steps of it that it was trained on (`LastSteps`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from rnnkit.errors import ConfigError

if TYPE_CHECKING:
    import keras
    from rnnkit_recipes.forecasting.config import ForecastingConfig

# What every member must share beyond the recipe's split keys: the data it reads.
DATA_KEYS = (
    "data.path",
    "data.layout",
    "data.columns",
    "data.steps",
    "data.id_column",
    "data.time_column",
    "data.target_column",
    "data.covariates",
    "data.frequency",
    "data.seasonality",
    "data.stride",
)
# How the members' quantiles are combined, each level on its own (either keeps the
# quantiles in order when every member's are).
COMBINE = ("mean", "median")
# Inputs that hold the window's past steps (axis 1): cut to each member's length.
PAST_INPUTS = ("past_target", "past_observed", "past_covariates", "past_time")


def ensemble_model(
    models: Sequence[keras.Model],
    configs: Sequence[ForecastingConfig],
    combine: str = "mean",
) -> tuple[keras.Model, ForecastingConfig]:
    """The mean (or, `combine="median"`, the median) of `models`' quantiles as one
    model, and the config that feeds it: the first member's, with the longest input
    length and the inputs every member reads (calendar terms and the series id when
    any member reads them)."""
    import keras
    from rnnkit_recipes.forecasting.recipe import ForecastingRecipe

    from rnnkit.models.forecaster_layers import LastSteps, Median
    from rnnkit.training.ensemble import require_shared

    if combine not in COMBINE:
        raise ConfigError(
            f"combine={combine!r} is not a way to combine members; give one of "
            + ", ".join(COMBINE)
        )

    first = configs[0]
    require_shared(
        configs,
        (*ForecastingRecipe.split_keys, *DATA_KEYS, "model.quantiles"),
        "the members of an ensemble forecast the same windows of the same data: "
        "combine runs that share it",
        comparable=_comparable,
    )
    length = max(config.data.input_length for config in configs)
    recurrent = [c.model.architecture == "recurrent" for c in configs]
    config = first.with_values(
        {
            "data.input_length": length,
            "data.calendar": any(
                c.data.calendar and r for c, r in zip(configs, recurrent, strict=True)
            ),
            "model.architecture": "recurrent" if any(recurrent) else "linear",
            "model.embedding_dim": max(
                c.model.embedding_dim if r else 0
                for c, r in zip(configs, recurrent, strict=True)
            ),
            "model.segment_length": 1,  # the members have their own
        }
    )
    inputs: dict[str, keras.KerasTensor] = {}
    outputs = []
    for index, model in enumerate(models, start=1):
        own = {}
        for tensor in model.inputs:
            shape = tuple(tensor.shape[1:])
            past = tensor.name in PAST_INPUTS
            if past:
                shape = (length, *shape[1:])
            if tensor.name not in inputs:
                inputs[tensor.name] = keras.Input(
                    shape, dtype=tensor.dtype, name=tensor.name
                )
            given = inputs[tensor.name]
            if tuple(given.shape[1:]) != shape:
                raise ConfigError(
                    f"the runs' models read {tensor.name} of different shapes "
                    f"({tuple(given.shape[1:])} and {shape}); combine runs of the "
                    "same covariates and calendar"
                )
            own[tensor.name] = (
                LastSteps(tensor.shape[1], name=f"member_{index}_{tensor.name}")(given)
                if past and tensor.shape[1] != length
                else given
            )
        member = keras.Model(model.input, model.output, name=f"member_{index}")
        outputs.append(member(own))
    if combine == "median":
        joined = Median(name="quantiles", dtype="float32")(outputs)
    else:
        joined = keras.layers.Average(name="quantiles", dtype="float32")(outputs)
    return keras.Model(inputs, joined, name="forecast_ensemble"), config


def _comparable(value):
    if isinstance(value, list | tuple):
        return (
            tuple(sorted(value))
            if value and isinstance(value[0], float)
            else tuple(value)
        )
    return value
