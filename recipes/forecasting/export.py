"""What the exported forecaster takes and returns (`rnnkit export RUN_DIR`).

One signature in every format (SavedModel `forecast`, LiteRT / ONNX file `model`):
the model's own inputs, as `Windows.batch` (rnnkit_recipes.forecasting.data) makes
them for a window of L = data.input_length steps before a forecast origin:

    past_target      float32 (batch, L): the series' values, oldest first, 0 where
                     missing. Raw values: the model scales each window itself.
    past_observed    float32 (batch, L): 1 where the value was seen, 0 where missing.
    past_covariates  float32 (batch, L, C): data.covariates, in that order (a run
                     with covariates only), 0 where missing; unscaled.
    past_time        float32 (batch, L, 2P) and future_time (batch, H, 2P): the
                     calendar terms of the L past and the H forecast steps (a run
                     with data.calendar only): for each period p of notes.periods,
                     sin and cos of 2 pi (t mod p) / p, t counted in steps (sub-daily
                     and daily data: from 1970-01-01 00:00 UTC; see
                     `Windows._fourier`).
    series           string (batch,): the series id (SavedModel; a run with a series
                     embedding only). LiteRT and ONNX take no strings: they take
    series_index     int32 (batch,) instead: 1 + the line of the id in series.txt,
                     0 for an id the model never saw (its own embedding row).
 ->
    quantiles        float32 (batch, H, Q): the forecast of the next H =
                     data.horizon steps at each level of notes.quantiles (increasing),
                     in the data's units; the median is the point forecast.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import keras
    from rnnkit_recipes.forecasting.config import ForecastingConfig

    from rnnkit.export import ExportPlan

log = logging.getLogger("rnnkit")

SERIES_FILE = "series.txt"
LOOKUP_LAYER = "series_lookup"

_DOCS = {
    "past_target": "values of the last input_length steps, oldest first (0 where "
    "missing; unscaled)",
    "past_observed": "1 where the past value was seen, 0 where missing",
    "past_covariates": "data.covariates over the past steps (0 where missing)",
    "past_time": "sin, cos of each period's phase at the past steps",
    "future_time": "sin, cos of each period's phase at the forecast steps",
    "series": "the series id",
}


def export_plan(
    model: keras.Model, config: ForecastingConfig, format: str
) -> ExportPlan:
    from rnnkit.export import Artefact, Endpoint, ExportPlan, Tensor
    from rnnkit.export.signature import SignatureModel

    named = {tensor.name: tensor for tensor in model.inputs}
    inputs = [
        Tensor(name, str(tensor.dtype), tuple(tensor.shape), _DOCS.get(name, ""))
        for name, tensor in named.items()
    ]
    horizon, levels = model.output_shape[1], model.output_shape[2]
    quantiles = tuple(sorted(config.model.quantiles))
    outputs = [
        Tensor(
            "quantiles",
            "float32",
            (None, horizon, levels),
            "forecast of each step at each level of notes.quantiles, in the data's "
            "units",
        )
    ]

    doc = "the past window of a series in, the quantiles of its next steps out"
    plan = ExportPlan(
        recipe="forecasting",
        endpoints=[Endpoint("forecast", _forecast(model), inputs, outputs, doc)],
        track=[model],
        notes={
            "input_length": named["past_target"].shape[1],
            "horizon": horizon,
            "quantiles": list(quantiles),
            "covariates": list(config.data.covariates),
            "periods": _periods(model, config) if "past_time" in named else [],
        },
    )
    if format == "saved_model":
        return plan
    sampled = _sampling_likelihood(model)
    if sampled:
        from rnnkit.export import ExportError

        raise ExportError(
            f"model.likelihood={sampled} forecasts the quantiles of sampled paths, "
            f"drawn by TensorFlow random ops that {format} does not run; export "
            "--format saved_model, or train with model.likelihood=quantile"
        )
    artefact_model, artefact_inputs = model, inputs
    if "series" in named:
        ids = _vocabulary(model)
        plan.files[SERIES_FILE] = "\n".join(ids) + "\n"
        plan.notes["series_file"] = SERIES_FILE
        artefact_model = index_model(model)
        artefact_inputs = [
            Tensor(
                "series_index",
                "int32",
                (None,),
                f"1 + the line of the series id in {SERIES_FILE}; 0: an id not "
                "seen in training",
            )
            if tensor.name == "series"
            else tensor
            for tensor in inputs
        ]

    plan.artefacts.append(
        Artefact(
            "model",
            SignatureModel(_forecast(artefact_model), [model], name="forecaster"),
            artefact_inputs,
            outputs,
            doc,
        )
    )
    return plan


def _forecast(model: keras.Model):
    """The endpoint's function: the named inputs in, {"quantiles": ...} out; a
    `series_index` input (the files without strings) feeds the model's `series`."""

    def forecast(values: dict) -> dict:
        values = dict(values)
        if "series_index" in values:
            values["series"] = values.pop("series_index")
        return {"quantiles": model(values, training=False)}

    return forecast


def _periods(model: keras.Model, config: ForecastingConfig) -> list[float] | None:
    """The calendar terms' periods, in steps, as the model records them; for a model
    saved before it recorded them, as the run's training read them: from
    data.frequency, or the spacing of the configured data's times when it is None;
    None (unknown) when that data cannot be read here."""
    from rnnkit_recipes.forecasting.data import time_periods
    from rnnkit_recipes.forecasting.predict import trained_periods
    from rnnkit_recipes.forecasting.recipe import panel_of

    from rnnkit.errors import DataError

    recorded = trained_periods(model)
    if recorded is not None:
        return recorded
    frequency = config.data.frequency
    if frequency is None:
        try:
            frequency = panel_of(config, config.data.path).frequency
        except DataError as error:
            log.warning("export.json gives no calendar periods: %s", error)
            return None
    return list(time_periods(frequency, config.data.seasonality))


def _sampling_likelihood(model: keras.Model) -> str | None:
    """The likelihood of a layer of `model` (or of a member's) that samples paths;
    None when nothing in it draws random numbers."""
    from rnnkit.models.forecaster import layers_where
    from rnnkit.models.likelihoods import AutoregressiveDecoder, SamplePaths

    def samples(layer) -> bool:
        if isinstance(layer, AutoregressiveDecoder):
            return layer.likelihood != "quantile"  # feeds back its median otherwise
        return isinstance(layer, SamplePaths)

    sampling = layers_where(model, samples)
    return sampling[0].likelihood if sampling else None


def _vocabulary(model: keras.Model) -> list[str]:
    """The series ids of the model's lookups (one list: an ensemble's members all
    read the ids of the same data)."""
    from rnnkit.export import ExportError
    from rnnkit.models.forecaster import layers_named

    vocabularies = {
        tuple(lookup.get_vocabulary()[1:])
        for lookup in layers_named(model, LOOKUP_LAYER)
    }
    if len(vocabularies) != 1:
        raise ExportError(
            "the model's series lookups list different ids, so no one series.txt "
            "serves them; export the members one by one"
        )
    return list(vocabularies.pop())


def index_model(model: keras.Model) -> keras.Model:
    """`model` with its `series` input the row its `StringLookup` would give (int32)
    instead of the id: the same layers and weights after the lookup (shared, not
    copied), for runtimes without string tensors; an ensemble's members alike."""
    import keras

    from rnnkit.models.forecaster import layers_named

    lookups = layers_named(model, LOOKUP_LAYER)

    def replace(layer):
        if any(layer is lookup for lookup in lookups):
            return keras.layers.Identity(name="series_index")
        if isinstance(layer, keras.Model) and any(
            t.name == "series" for t in layer.inputs
        ):
            return index_model(layer)
        return layer

    inputs = {
        tensor.name: keras.Input(
            batch_shape=tensor.shape,
            dtype="int32" if tensor.name == "series" else tensor.dtype,
            name=tensor.name,
        )
        for tensor in model.inputs
    }
    return keras.models.clone_model(
        model,
        input_tensors=inputs,
        clone_function=replace,
    )
