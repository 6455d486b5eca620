"""A global forecaster for panels of series: quantiles of the next `horizon` values.

One model is trained on windows of every series at once (a "global" model, as DeepAR,
MQ-RNN and the M4 winner's ES-RNN are). Per window:

    past_target (batch, L), past_observed (batch, L)       1 where a value was seen
        -> WindowScaler: each window scaled by its own observed values only
           (standard: minus its mean, over its standard deviation; last: minus its
           last observed value, over its standard deviation; mean_abs: over its
           mean absolute value), so no statistic comes from the span forecast
    [scaled target, observed, past covariates (normalised), past time features]
        -> segments of `segment_length` steps, each projected to `units` (SegRNN,
           Lin et al. 2023: a recurrence over L / segment_length steps, not L)
        -> rnnkit LSTM/GRU stack -> the last state
    decoder "direct": [state, future time features, series embedding] -> MLP
        -> (horizon, quantiles), all steps at once (MQ-CNN's "direct" head)
    decoder "recurrent": a second recurrent layer over the horizon, started from the
        encoder's state, reading each future step's time features and the series
        embedding, one (quantiles) output per step (the MQ-RNN decoder, Wen et al. 2017)
    decoder "segments": the horizon cut into segments of `segment_length` steps, each
        one recurrent step from the encoder's state reading an embedding of its
        position, its steps' time features and the series embedding, all segments at
        once (SegRNN's parallel multi-step decoder, `SegmentDecoder`)
    decoder "autoregressive": a recurrent layer that also reads the previous step's
        value: the true one in training (teacher forcing), its own median or sampled
        draw when forecasting (DeepAR, `rnnkit.models.likelihoods`)
        -> QuantileOutput: back to the series' scale, quantiles sorted

With a parametric `likelihood` the outputs are each step's distribution parameters
(trained by their negative log-likelihood) and the forecast's quantiles are those of
sampled paths (`rnnkit.models.likelihoods`).

`architecture="linear"` replaces all of it by one linear map from the scaled window to
every step's quantiles: the function class of DLinear and NLinear (Zeng et al. 2023),
whose trend-seasonal split is itself linear in the window, the cheap strong baseline
of long-horizon forecasting.

The scaling and its inverse live inside the model, so `model.keras` alone turns a raw
window into a forecast in the data's units and reloads in safe mode.
"""

from __future__ import annotations

from collections.abc import Sequence

import keras
import numpy as np

from rnnkit.losses import LIKELIHOODS, PARAMETERS, check_likelihood
from rnnkit.models._recurrent import recurrent_layer_class
from rnnkit.models.forecaster_layers import (  # noqa: F401 - importable from here
    SCALINGS,
    CalendarTerms,
    LastSteps,
    SegmentDecoder,
    WindowScaler,
    _positive,
    window_statistics,
)
from rnnkit.models.likelihoods import (
    AutoregressiveDecoder,
    OutputHeads,
    QuantileOutput,  # noqa: F401 - importable from here, where it was first
)

CALENDAR_LAYER = "calendar"
DECODERS = ("direct", "recurrent", "segments", "autoregressive")
ARCHITECTURES = ("recurrent", "linear")


def layers_where(model: keras.Model, wanted) -> list[keras.layers.Layer]:
    """The layers of `model` and of the models inside it (an ensemble's members)
    for which `wanted(layer)` is true, in order."""
    found = []
    for layer in model.layers:
        if wanted(layer):
            found.append(layer)
        elif isinstance(layer, keras.Model):
            found += layers_where(layer, wanted)
    return found


def layers_named(model: keras.Model, name: str) -> list[keras.layers.Layer]:
    """The layers called `name` in `model` and in the models inside it."""
    return layers_where(model, lambda layer: layer.name == name)


def build_forecaster(
    *,
    input_length: int,
    horizon: int,
    quantiles: Sequence[float] = (0.1, 0.5, 0.9),
    past_covariates: int = 0,
    covariate_mean: Sequence[float] | None = None,
    covariate_variance: Sequence[float] | None = None,
    time_features: int = 0,
    time_periods: Sequence[float] | None = None,
    series_ids: Sequence[str] | None = None,
    embedding_dim: int = 0,
    cell_type: str = "gru",
    units: int = 64,
    num_layers: int = 1,
    segment_length: int = 1,
    decoder: str = "direct",
    hidden_units: int = 0,
    dropout: float = 0.0,
    scaling: str = "standard",
    architecture: str = "recurrent",
    likelihood: str = "quantile",
    samples: int = 100,
    seed: int | None = None,
    return_training_model: bool = False,
) -> keras.Model | tuple[keras.Model, keras.Model]:
    """The forecaster as a functional `keras.Model` (not compiled).

    Args:
        input_length: L, past steps read per forecast.
        horizon: H, steps forecast at once.
        quantiles: levels in (0, 1) forecast per step (the last output axis, in
            increasing order).
        past_covariates: C, numeric inputs observed in the past only (input
            `past_covariates`, (batch, L, C)); 0: none.
        covariate_mean, covariate_variance: per-covariate statistics of the training
            span (a `Normalization` layer holds them); required when C > 0.
        time_features: T, known-future features per step (calendar terms: inputs
            `past_time` (batch, L, T) and `future_time` (batch, H, T)); 0: none.
        time_periods: the periods (in steps) of those features when they are
            `CalendarTerms`' sin and cos terms: T is then 2 x len(time_periods), and
            the model records the periods (layer "calendar").
        series_ids: the ids of the series known to the embedding (input `series`,
            (batch,) strings; a `StringLookup` inside the model maps an id not seen
            in training to a row of its own); None: no series input.
        embedding_dim: width of the series embedding (a static covariate); 0: none.
        cell_type: a registered recurrent layer ("lstm", "gru", ...).
        units: width of the segment projection and of every recurrent layer.
        num_layers: stacked recurrent layers of the encoder.
        segment_length: steps per segment; must divide `input_length` (and the
            horizon, with the "segments" decoder).
        decoder: "direct", "recurrent", "segments" or "autoregressive" (see the
            module docstring).
        hidden_units: width of the direct decoder's hidden layer (0: `2 * units`).
        dropout: dropout rate before the decoder's output layer.
        scaling: `WindowScaler` mode: "standard", "last", "mean_abs" or "none".
        architecture: "recurrent" (the encoder and decoder above) or "linear" (one
            `Dense` from the scaled window to the quantiles; the other inputs and
            the recurrent arguments are not used).
        likelihood: "quantile" (the pinball loss of `quantiles`), or "gaussian",
            "student_t", "negative_binomial" (`rnnkit.models.likelihoods`): the
            model then forecasts a distribution per step and its quantiles are
            those of `samples` sampled paths.
        samples: paths sampled per window (parametric likelihoods).
        seed: seed of the dropout layer and of the sampled paths.
        return_training_model: also return the model to train, when it differs
            from the forecaster: with a parametric likelihood it outputs the
            distributions' parameters (batch, H, P) for
            `rnnkit.losses.NegativeLogLikelihood`; with the autoregressive decoder
            it also reads the true future (inputs `future_target` and
            `future_observed`, (batch, H)) as each step's previous value (teacher
            forcing). It shares every weight with the forecaster.

    Returns:
        A model mapping its named inputs to (batch, H, len(quantiles)) float32;
        with `return_training_model`, (training model, that model), the same model
        twice when training needs no other.

    Example:
    >>> model = build_forecaster(input_length=48, horizon=24, segment_length=12)
    >>> model.output_shape
    (None, 24, 3)
    """
    recurrent = recurrent_layer_class(cell_type)
    for name, value in (
        ("input_length", input_length),
        ("horizon", horizon),
        ("units", units),
        ("num_layers", num_layers),
        ("segment_length", segment_length),
    ):
        _positive(name, value)
    if input_length % segment_length:
        raise ValueError(
            f"Argument `segment_length` must divide `input_length`, received "
            f"segment_length={segment_length} and input_length={input_length}."
        )
    quantiles = tuple(float(q) for q in quantiles)
    if not quantiles or not all(0.0 < q < 1.0 for q in quantiles):
        raise ValueError(
            f"Argument `quantiles` must be levels in (0, 1), received {quantiles!r}."
        )
    if architecture not in ARCHITECTURES:
        raise ValueError(
            f"Argument `architecture` must be one of {ARCHITECTURES}, received "
            f"{architecture!r}."
        )
    if decoder not in DECODERS:
        raise ValueError(
            f"Argument `decoder` must be one of {DECODERS}, received {decoder!r}."
        )
    check_likelihood(likelihood, LIKELIHOODS)
    if likelihood == "negative_binomial" and scaling in ("standard", "last"):
        raise ValueError(
            "Argument `scaling` must be 'mean_abs' or 'none' with the negative "
            "binomial likelihood (its mean is the window's scale times a positive "
            f"number), received scaling={scaling!r}."
        )
    if decoder == "segments" and horizon % segment_length:
        raise ValueError(
            "Argument `segment_length` must divide `horizon` with the segments "
            f"decoder, received segment_length={segment_length} and "
            f"horizon={horizon}."
        )
    if decoder == "autoregressive" and (architecture == "linear" or dropout):
        raise ValueError(
            "The autoregressive decoder takes architecture='recurrent' and no "
            f"dropout, received architecture={architecture!r}, dropout={dropout!r}."
        )
    _positive("samples", samples)
    if not 0.0 <= dropout < 1.0:
        raise ValueError(f"Argument `dropout` must be in [0, 1), received {dropout!r}.")
    if time_periods is not None:
        if time_features not in (0, 2 * len(time_periods)):
            raise ValueError(
                f"Argument `time_features` must be 2 x len(time_periods) (sin and cos "
                f"of each period), received time_features={time_features} and "
                f"time_periods={tuple(time_periods)}."
            )
        time_features = 2 * len(time_periods)
    if past_covariates and (covariate_mean is None or covariate_variance is None):
        raise ValueError(
            "Arguments `covariate_mean` and `covariate_variance` (the training span's "
            f"statistics) are required with past_covariates={past_covariates}."
        )

    past_target = keras.Input((input_length,), name="past_target")
    past_observed = keras.Input((input_length,), name="past_observed")
    inputs = {"past_target": past_target, "past_observed": past_observed}
    scaled, location, scale = WindowScaler(scaling, name="scaler")(
        [past_target, past_observed]
    )
    per_step_outputs = (
        len(quantiles) if likelihood == "quantile" else len(PARAMETERS[likelihood])
    )
    heads = OutputHeads(inputs, location, scale, likelihood, quantiles, samples, seed)
    if architecture == "linear":
        flat = keras.layers.Dense(horizon * per_step_outputs, name="linear")(scaled)
        raw = keras.layers.Reshape((horizon, per_step_outputs), name="forecast_grid")(
            flat
        )
        return heads.models(raw, "linear_forecaster", return_training_model)
    steps = [
        keras.layers.Reshape((input_length, 1), name="target_steps")(scaled),
        keras.layers.Reshape((input_length, 1), name="observed_steps")(past_observed),
    ]
    if past_covariates:
        covariates = keras.Input(
            (input_length, past_covariates), name="past_covariates"
        )
        inputs["past_covariates"] = covariates
        normalise = keras.layers.Normalization(
            axis=-1,
            mean=np.asarray(covariate_mean, "float32"),
            variance=np.asarray(covariate_variance, "float32"),
            name="normalize_covariates",
        )
        steps.append(normalise(covariates))
    future_time = None
    if time_features:
        past_time = keras.Input((input_length, time_features), name="past_time")
        future_time = keras.Input((horizon, time_features), name="future_time")
        inputs.update(past_time=past_time, future_time=future_time)
        if time_periods is not None:
            calendar = CalendarTerms(time_periods, name=CALENDAR_LAYER)
            past_time, future_time = calendar(past_time), calendar(future_time)
        steps.append(past_time)
    features = keras.layers.Concatenate(name="step_features")(steps)  # (b, L, F)
    width = features.shape[-1]
    segments = keras.layers.Reshape(
        (input_length // segment_length, segment_length * width), name="segments"
    )(features)
    hidden = keras.layers.Dense(units, activation="relu", name="segment_projection")(
        segments
    )
    states = []
    for index in range(num_layers):
        last = index == num_layers - 1
        outputs = recurrent(
            units,
            return_sequences=not last,
            return_state=last,
            name=f"encoder_{cell_type}_{index + 1}",
        )(hidden)
        if last:
            hidden, states = outputs[0], list(outputs[1:])
        else:
            hidden = outputs

    static = []
    if series_ids is not None and embedding_dim:
        series = keras.Input((), dtype="string", name="series")
        inputs["series"] = series
        lookup = keras.layers.StringLookup(
            vocabulary=[str(i) for i in series_ids], name="series_lookup"
        )
        static.append(
            keras.layers.Embedding(
                len(series_ids) + 1, embedding_dim, name="series_embedding"
            )(lookup(series))
        )

    name = f"{cell_type}_forecaster"
    if decoder == "direct":
        parts = [hidden, *static]
        if future_time is not None:
            parts.append(keras.layers.Flatten(name="future_time_flat")(future_time))
        context = (
            keras.layers.Concatenate(name="context")(parts)
            if len(parts) > 1
            else hidden
        )
        context = keras.layers.Dense(
            hidden_units or 2 * units, activation="relu", name="decoder_hidden"
        )(context)
        if dropout:
            context = keras.layers.Dropout(dropout, seed=seed, name="dropout")(context)
        flat = keras.layers.Dense(horizon * per_step_outputs, name="decoder_output")(
            context
        )
        raw = keras.layers.Reshape((horizon, per_step_outputs), name="forecast_grid")(
            flat
        )
        return heads.models(raw, name, return_training_model)
    if decoder == "segments":
        count = horizon // segment_length
        known = []
        if future_time is not None:
            known.append(
                keras.layers.Reshape(
                    (count, segment_length * future_time.shape[-1]),
                    name="future_time_segments",
                )(future_time)
            )
        known += [keras.layers.RepeatVector(count)(part) for part in static]
        steps_in = (
            keras.layers.Concatenate(name="decoder_inputs")(known)
            if len(known) > 1
            else (known[0] if known else None)
        )
        decoded = SegmentDecoder(
            cell_type, units, count, max(units // 2, 1), name="decoder"
        )(states, steps=steps_in)
        if dropout:
            decoded = keras.layers.Dropout(dropout, seed=seed, name="dropout")(decoded)
        flat = keras.layers.Dense(
            segment_length * per_step_outputs, name="decoder_output"
        )(decoded)
        raw = keras.layers.Reshape((horizon, per_step_outputs), name="forecast_grid")(
            flat
        )
        return heads.models(raw, name, return_training_model)
    per_step = [] if future_time is None else [future_time]
    for part in static:
        per_step.append(keras.layers.RepeatVector(horizon)(part))
    if decoder == "autoregressive":
        step_features = (
            keras.layers.Concatenate(name="decoder_inputs")(per_step)
            if len(per_step) > 1
            else (per_step[0] if per_step else None)
        )
        last = keras.layers.Concatenate(name="last_step")(
            [LastSteps(1)(past_target), LastSteps(1)(past_observed)]
        )
        return heads.autoregressive(
            AutoregressiveDecoder(
                cell_type, units, horizon, likelihood, quantiles, samples,
                seed=seed or 0, name="decoder",
            ),
            last, states, step_features, name, return_training_model,
        )  # fmt: skip
    if not per_step:  # the step's position is all the decoder reads
        per_step.append(
            keras.layers.RepeatVector(horizon, name="decoder_steps")(hidden)
        )
    decoder_inputs = (
        keras.layers.Concatenate(name="decoder_inputs")(per_step)
        if len(per_step) > 1
        else per_step[0]
    )
    decoded = recurrent(units, return_sequences=True, name=f"decoder_{cell_type}")(
        decoder_inputs, initial_state=states
    )
    if dropout:
        decoded = keras.layers.Dropout(dropout, seed=seed, name="dropout")(decoded)
    raw = keras.layers.Dense(per_step_outputs, name="decoder_output")(decoded)
    return heads.models(raw, name, return_training_model)
