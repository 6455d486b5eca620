"""Parametric forecasts: likelihoods, sampled paths, and a decoder that reads its own
previous value (DeepAR, Salinas et al. 2020).

A forecaster with a likelihood outputs, per step, the parameters of a distribution of
the value instead of a few of its quantiles, and is trained by the negative
log-likelihood of the observed values (`rnnkit.losses.NegativeLogLikelihood`):

    gaussian            mean, deviation
    student_t           location, scale, degrees of freedom (above 2, so the
                        variance exists), heavy tails
    negative_binomial   mean, dispersion alpha (variance mean + alpha mean^2), for
                        counts; as DeepAR: mean = scale x softplus, alpha = softplus
                        / sqrt(scale), the window's scale a pure scale (location 0)

The head's raw outputs are in the scaled units of `WindowScaler`; `DistributionOutput`
turns them into parameters in the data's units. Forecast quantiles are those of
`samples` sampled paths (`SamplePaths`, `PathQuantiles`). With the autoregressive
decoder (`AutoregressiveDecoder`) a path is drawn one step at a time, each step's
draw fed back as the next step's input, so the paths carry the dependence between
steps that the marginal quantiles of a direct decoder do not.

Sampling uses fixed seeds (`keras.random` with integer seeds): the same inputs, in
the same batch, give the same paths on every call, so a run's evaluation and a
reloaded model's agree to the digit.
"""

from __future__ import annotations

from collections.abc import Sequence

import keras
from keras import ops

from rnnkit.losses import LIKELIHOODS, PARAMETERS, check_likelihood
from rnnkit.models._recurrent import recurrent_layer_class

_FLOOR = 1e-6


def poisson(rate, seed: int):
    """Poisson draws of `rate` (a tensor), from a fixed integer seed."""
    backend = keras.config.backend()
    rate = ops.convert_to_tensor(rate)
    if backend == "tensorflow":
        import tensorflow as tf

        return tf.random.stateless_poisson(
            tf.shape(rate), seed=[seed, 0], lam=rate, dtype=rate.dtype
        )
    if backend == "jax":
        import jax

        return jax.random.poisson(jax.random.key(seed), rate).astype(rate.dtype)
    import torch

    generator = torch.Generator(device=rate.device).manual_seed(seed)
    return torch.poisson(rate, generator=generator)


def distribution_parameters(raw, location, scale, likelihood: str):
    """Parameters in the data's units, (..., steps, P), of the raw head outputs `raw`
    (..., steps, P) in scaled units, for windows of `location` and `scale` (..., 1)."""
    check_likelihood(likelihood)
    raw = ops.cast(raw, "float32")
    if likelihood == "negative_binomial":
        mean = scale * (ops.softplus(raw[..., 0]) + _FLOOR)
        dispersion = (ops.softplus(raw[..., 1]) + _FLOOR) / ops.sqrt(scale)
        return ops.stack([mean, dispersion], axis=-1)
    centre = location + scale * raw[..., 0]
    spread = scale * (ops.softplus(raw[..., 1]) + _FLOOR)
    if likelihood == "gaussian":
        return ops.stack([centre, spread], axis=-1)
    freedom = 2.0 + ops.softplus(raw[..., 2]) + _FLOOR
    return ops.stack([centre, spread, freedom], axis=-1)


def sample(parameters, likelihood: str, seed: int):
    """One draw (...) of each distribution of `parameters` (..., P), from the fixed
    integer `seed`."""
    check_likelihood(likelihood)
    p = ops.cast(parameters, "float32")
    shape = ops.shape(p)[:-1]
    if likelihood == "gaussian":
        return p[..., 0] + p[..., 1] * keras.random.normal(shape, seed=seed)
    if likelihood == "student_t":
        nu = p[..., 2]
        # t = z / sqrt(chi2_nu / nu), chi2_nu = 2 Gamma(nu / 2)
        z = keras.random.normal(shape, seed=seed)
        chi2 = 2.0 * keras.random.gamma(shape, alpha=nu / 2.0, seed=seed + 1)
        return p[..., 0] + p[..., 1] * z * ops.sqrt(nu / ops.maximum(chi2, 1e-12))
    mean, alpha = p[..., 0], p[..., 1]
    r = 1.0 / alpha  # a Poisson whose rate is Gamma(r, mean / r) distributed
    rate = keras.random.gamma(shape, alpha=r, seed=seed) * mean / r
    return poisson(ops.maximum(rate, 0.0), seed + 1)


@keras.saving.register_keras_serializable(package="rnnkit")
class DistributionOutput(keras.layers.Layer):
    """Raw outputs in scaled units to distribution parameters in the data's units.

    Call it on `[raw, location, scale]`: `raw` (batch, steps, P), P the likelihood's
    parameter count (`PARAMETERS`), `location` and `scale` (batch, 1) of
    `WindowScaler`. Returns (batch, steps, P) float32, as
    `distribution_parameters` defines them.

    Args:
        likelihood: "gaussian", "student_t" or "negative_binomial".
    """

    def __init__(self, likelihood: str = "gaussian", **kwargs):
        super().__init__(**kwargs)
        check_likelihood(likelihood)
        self.likelihood = likelihood

    def call(self, inputs):
        raw, location, scale = inputs
        location = ops.cast(location, "float32")
        scale = ops.cast(scale, "float32")
        return distribution_parameters(raw, location, scale, self.likelihood)

    def compute_output_shape(self, input_shape):
        return tuple(input_shape[0])

    def get_config(self):
        return {**super().get_config(), "likelihood": self.likelihood}


@keras.saving.register_keras_serializable(package="rnnkit")
class SamplePaths(keras.layers.Layer):
    """`samples` paths (batch, samples, steps) drawn from per-step parameters
    (batch, steps, P), each step independently (the marginals of a direct decoder).

    Args:
        likelihood: "gaussian", "student_t" or "negative_binomial".
        samples: paths per window.
        seed: the fixed integer seed of the draws.
    """

    def __init__(self, likelihood: str, samples: int = 100, seed: int = 0, **kwargs):
        super().__init__(**kwargs)
        check_likelihood(likelihood)
        self.likelihood, self.samples, self.seed = likelihood, int(samples), int(seed)

    def call(self, parameters):
        tiled = ops.repeat(parameters[:, None], self.samples, axis=1)
        return sample(tiled, self.likelihood, self.seed)

    def compute_output_shape(self, input_shape):
        return (input_shape[0], self.samples, input_shape[1])

    def get_config(self):
        return {
            **super().get_config(),
            "likelihood": self.likelihood,
            "samples": self.samples,
            "seed": self.seed,
        }


@keras.saving.register_keras_serializable(package="rnnkit")
class PathQuantiles(keras.layers.Layer):
    """The quantiles (batch, steps, Q), in increasing order, of sampled paths (batch,
    samples, steps): at each step, the empirical quantile over the paths (linear
    interpolation between order statistics).

    Args:
        quantiles: the levels in (0, 1), increasing.
    """

    def __init__(self, quantiles: Sequence[float] = (0.1, 0.5, 0.9), **kwargs):
        super().__init__(**kwargs)
        self.quantiles = tuple(sorted(float(q) for q in quantiles))

    def call(self, paths):
        levels = ops.convert_to_tensor(self.quantiles, "float32")
        found = ops.quantile(ops.cast(paths, "float32"), levels, axis=1)  # (Q, b, H)
        return ops.transpose(found, (1, 2, 0))

    def compute_output_shape(self, input_shape):
        return (input_shape[0], input_shape[2], len(self.quantiles))

    def get_config(self):
        return {**super().get_config(), "quantiles": list(self.quantiles)}


@keras.saving.register_keras_serializable(package="rnnkit")
class AutoregressiveDecoder(keras.layers.Layer):
    """A recurrent decoder whose input at each forecast step is the previous step's
    value (DeepAR's, and a sequence-to-sequence decoder's).

    Each step reads [previous value (scaled by the window's `location` and `scale`),
    whether it was observed, the step's known features] and emits raw outputs (P per
    step) from its state; the state starts from the encoder's.

    Call it as `decoder(last, location, scale, states, steps=None, future=None,
    future_observed=None)`:

    - last: (batch, 2) the window's last past value (raw) and whether it was seen.
    - location, scale: (batch, 1), `WindowScaler`'s.
    - states: the encoder's final states (one tensor for a GRU, two for an LSTM).
    - steps: (batch, horizon, F) the forecast steps' known features, or None.
    - future, future_observed: (batch, horizon) the true values (raw, 0 where
      missing) and 1 where each was seen, for teacher forcing in training; None to
      forecast.

    Returns, with `future` (teacher forcing): the raw outputs (batch, horizon, P) in
    scaled units, step h having read the true value of step h - 1. Without it: for
    `likelihood="quantile"` the raw quantiles (batch, horizon, Q), each step having
    read the previous step's median; otherwise `samples` paths (batch, samples,
    horizon) in the data's units, each step having read its path's previous draw.

    Args:
        cell_type: a registered recurrent layer ("gru", "lstm", ...).
        units: the recurrence's width (the encoder's, whose states it starts from).
        horizon: forecast steps.
        likelihood: "quantile" (P = len(quantiles)) or a parametric likelihood.
        quantiles: the levels of the raw quantile outputs ("quantile" only; the one
            nearest 0.5 of the outputs put in increasing order is fed back, the
            median that `QuantileOutput` reports).
        samples: paths per window (parametric likelihoods).
        seed: the fixed integer seed of the draws (step h uses seed + 2h and
            seed + 2h + 1).
    """

    def __init__(
        self,
        cell_type: str = "gru",
        units: int = 32,
        horizon: int = 1,
        likelihood: str = "gaussian",
        quantiles: Sequence[float] = (0.5,),
        samples: int = 100,
        seed: int = 0,
        **kwargs,
    ):
        super().__init__(**kwargs)
        check_likelihood(likelihood, LIKELIHOODS)
        self.cell_type, self.units, self.horizon = cell_type, int(units), int(horizon)
        self.likelihood = likelihood
        self.quantiles = tuple(float(q) for q in quantiles)
        self.samples, self.seed = int(samples), int(seed)
        width = (
            len(self.quantiles)
            if likelihood == "quantile"
            else len(PARAMETERS[likelihood])
        )
        self.recurrent = recurrent_layer_class(cell_type)(
            self.units, return_sequences=True, name="recurrent"
        )
        self.head = keras.layers.Dense(width, name="head")

    def build(
        self, last_shape, location_shape, scale_shape, states_shape,
        steps_shape=None, future_shape=None, future_observed_shape=None,
    ):  # fmt: skip
        features = 2 + (0 if steps_shape is None else steps_shape[-1])
        self.recurrent.build((None, self.horizon, features))
        self.head.build((None, self.horizon, self.units))

    def _scaled(self, values, seen, location, scale):
        return (values - location) / scale * seen

    def call(
        self, last, location, scale, states, steps=None, future=None,
        future_observed=None,
    ):  # fmt: skip
        location = ops.cast(location, "float32")
        scale = ops.cast(scale, "float32")
        states = list(states) if isinstance(states, (list, tuple)) else [states]
        last = ops.cast(last, "float32")
        last_value = self._scaled(last[:, :1], last[:, 1:], location, scale)
        if future is not None:
            seen = ops.cast(future_observed, "float32")
            values = self._scaled(ops.cast(future, "float32"), seen, location, scale)
            previous = ops.concatenate([last_value, values[:, :-1]], axis=1)
            previous_seen = ops.concatenate([last[:, 1:], seen[:, :-1]], axis=1)
            x = ops.stack([previous, previous_seen], axis=-1)
            if steps is not None:
                x = ops.concatenate([x, ops.cast(steps, "float32")], axis=-1)
            return self.head(self.recurrent(x, initial_state=states))
        return self._forecast(last_value, last[:, 1:], location, scale, states, steps)

    def _forecast(self, value, seen, location, scale, states, steps):
        quantile = self.likelihood == "quantile"
        count = 1 if quantile else self.samples
        if count > 1:
            value, seen, location, scale = (
                ops.repeat(t, count, axis=0) for t in (value, seen, location, scale)
            )
            states = [ops.repeat(s, count, axis=0) for s in states]
            if steps is not None:
                steps = ops.repeat(steps, count, axis=0)
        middle = min(
            range(len(self.quantiles)), key=lambda i: abs(self.quantiles[i] - 0.5)
        )
        cell = self.recurrent.cell
        outputs = []
        for step in range(self.horizon):
            x = ops.concatenate([value, seen], axis=-1)
            if steps is not None:
                x = ops.concatenate([x, ops.cast(steps[:, step], "float32")], axis=-1)
            hidden, states = cell(x, states)
            raw = self.head(hidden)  # (rows, P)
            if quantile:
                outputs.append(raw)  # sorted as QuantileOutput sorts them
                value = ops.sort(raw, axis=-1)[:, middle : middle + 1]
            else:
                parameters = distribution_parameters(
                    raw[:, None], location, scale, self.likelihood
                )[:, 0]
                draw = sample(parameters, self.likelihood, self.seed + 2 * step)
                outputs.append(draw)
                value = self._scaled(draw[:, None], 1.0, location, scale)
            seen = ops.ones_like(value)
        if quantile:
            return ops.stack(outputs, axis=1)  # (batch, horizon, Q)
        paths = ops.stack(outputs, axis=1)  # (batch x samples, horizon)
        return ops.reshape(paths, (-1, count, self.horizon))

    def get_config(self):
        return {
            **super().get_config(),
            "cell_type": self.cell_type,
            "units": self.units,
            "horizon": self.horizon,
            "likelihood": self.likelihood,
            "quantiles": list(self.quantiles),
            "samples": self.samples,
            "seed": self.seed,
        }


@keras.saving.register_keras_serializable(package="rnnkit")
class QuantileOutput(keras.layers.Layer):
    """Scaled forecasts back in the series' units, quantiles in increasing order.

    Call it on `[forecast, location, scale]`: `forecast` (batch, horizon, quantiles)
    in the scaled units of `WindowScaler`, `location` and `scale` (batch, 1). Returns
    `forecast * scale + location`, sorted along the last axis, so that a lower
    quantile never lies above a higher one.
    """

    def call(self, inputs):
        forecast, location, scale = inputs
        forecast = ops.cast(forecast, "float32")
        unscaled = forecast * scale[:, :, None] + location[:, :, None]
        return ops.sort(unscaled, axis=-1)

    def compute_output_shape(self, input_shape):
        return tuple(input_shape[0])


class OutputHeads:
    """The forecaster's last layers, from raw outputs in scaled units to the
    forecast (and the training model's outputs, when they differ)."""

    def __init__(self, inputs, location, scale, likelihood, quantiles, samples, seed):
        self.inputs, self.location, self.scale = inputs, location, scale
        self.likelihood, self.quantiles = likelihood, quantiles
        self.samples, self.seed = samples, seed or 0

    def _quantiles(self, raw):
        return QuantileOutput(name="quantiles", dtype="float32")(
            [raw, self.location, self.scale]
        )

    def _paths_to_quantiles(self, paths):
        return PathQuantiles(self.quantiles, name="quantiles", dtype="float32")(paths)

    def _parameters(self, raw):
        return DistributionOutput(
            self.likelihood, name="distribution", dtype="float32"
        )([raw, self.location, self.scale])

    def _pair(self, training, forecaster, return_training_model):
        return (training, forecaster) if return_training_model else forecaster

    def models(self, raw, name, return_training_model):
        """The forecaster (and the training model) of the raw outputs (b, H, P)."""
        if self.likelihood == "quantile":
            model = keras.Model(self.inputs, self._quantiles(raw), name=name)
            return self._pair(model, model, return_training_model)
        parameters = self._parameters(raw)
        paths = SamplePaths(self.likelihood, self.samples, self.seed, name="paths")(
            parameters
        )
        forecaster = keras.Model(
            self.inputs, self._paths_to_quantiles(paths), name=name
        )
        training = keras.Model(self.inputs, parameters, name=f"{name}_training")
        return self._pair(training, forecaster, return_training_model)

    def autoregressive(self, decoder, last, states, steps, name, return_training_model):
        """The forecaster of an `AutoregressiveDecoder` and, with the true future
        as two more inputs, the teacher-forced training model."""
        common = (last, self.location, self.scale, states)
        forecast = decoder(*common, steps=steps)
        if self.likelihood == "quantile":
            output_layer = QuantileOutput(name="quantiles", dtype="float32")
            forecast = output_layer([forecast, self.location, self.scale])
        else:
            forecast = self._paths_to_quantiles(forecast)
        forecaster = keras.Model(self.inputs, forecast, name=name)
        if not return_training_model:
            return forecaster  # the teacher-forced graph is for training only
        future = keras.Input((decoder.horizon,), name="future_target")
        future_observed = keras.Input((decoder.horizon,), name="future_observed")
        teacher = decoder(
            *common, steps=steps, future=future, future_observed=future_observed
        )
        if self.likelihood == "quantile":
            teacher = output_layer([teacher, self.location, self.scale])
        else:
            teacher = self._parameters(teacher)
        training_inputs = {
            **self.inputs, "future_target": future, "future_observed": future_observed
        }  # fmt: skip
        training = keras.Model(training_inputs, teacher, name=f"{name}_training")
        return self._pair(training, forecaster, return_training_model)
