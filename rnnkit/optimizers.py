"""Optimizers and learning-rate schedules.

`NoamSchedule` is the learning rate of the Transformer paper (Vaswani et al. 2017,
section 5.3): a linear warm-up, then a decay with the inverse square root of the step;
`configured_learning_rate` picks it or a constant from a recipe's config.
`SlantedTriangular` is ULMFiT's (Howard & Ruder 2018): a short linear rise, then a
long linear decay.

Optimizers for fine-tuning: Adam with a learning rate per layer.

`LayerwiseAdam` is Keras' Adam with two changes that discriminative fine-tuning and
gradual unfreezing (Howard & Ruder 2018, ULMFiT) need:

- a learning-rate factor per variable, chosen by the path of the layer that owns it
  (`factors={"embedding": 0.15, "bidirectional": 0.38}`: a variable whose path is
  `embedding/...` steps with `learning_rate * 0.15`; variables that match no key
  use factor 1);
- a step count per variable for Adam's bias correction, as PyTorch's Adam keeps one
  per parameter. Keras' Adam corrects every variable with the optimizer's global step;
  a layer that joins training late (gradual unfreezing) then starts with moments near
  zero but corrections near one, and its first steps are several times
  `learning_rate` (m / sqrt(v) is 0.1 g / (0.032 |g|) = 3.2 at its first step).
  Counting steps per variable gives it the same first steps as a fresh Adam.

With no factors and every variable trained from the first step it computes exactly
what `keras.optimizers.Adam` computes.

    >>> import keras
    >>> optimizer = LayerwiseAdam(1e-3, factors={"embedding": 0.5})
    >>> optimizer.factors
    {'embedding': 0.5}
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import keras
from keras import ops

from rnnkit import _keras_private


@keras.saving.register_keras_serializable(package="rnnkit")
class LayerwiseAdam(keras.optimizers.Adam):
    """Adam with per-layer learning-rate factors and per-variable step counts.

    Args:
        learning_rate: the base learning rate (a number or a Keras schedule).
        factors: layer path -> factor on the learning rate for that layer's
            variables. A key matches a variable whose path equals it or starts with
            it followed by "/"; the longest matching key wins.
        **kwargs: the other arguments of `keras.optimizers.Adam` (`amsgrad` is not
            supported).
    """

    def __init__(
        self,
        learning_rate: float | keras.optimizers.schedules.LearningRateSchedule = 1e-3,
        factors: Mapping[str, float] | None = None,
        **kwargs,
    ) -> None:
        if kwargs.get("amsgrad"):
            raise ValueError("LayerwiseAdam does not support amsgrad=True")
        super().__init__(learning_rate=learning_rate, **kwargs)
        self.factors = {
            str(key): float(value) for key, value in (factors or {}).items()
        }
        for key, value in self.factors.items():
            if value < 0:
                raise ValueError(f"factors[{key!r}] is {value}; it must be >= 0")

    def factor_of(self, path: str) -> float:
        """The learning-rate factor for the variable at `path`."""
        best, factor = -1, 1.0
        for key, value in self.factors.items():
            if (path == key or path.startswith(key + "/")) and len(key) > best:
                best, factor = len(key), value
        return factor

    def build(self, var_list) -> None:
        if self.built:
            return
        super().build(var_list)
        self._variable_factors = [self.factor_of(v.path) for v in var_list]
        self._variable_steps = [
            self.add_variable(
                shape=(),
                dtype="int64",
                aggregation="only_first_replica",
                name=f"step_{index}",
            )
            for index in range(len(var_list))
        ]

    def update_step(self, gradient, variable, learning_rate) -> None:
        index = _keras_private.variable_index(self, variable)
        lr = ops.cast(learning_rate, variable.dtype) * self._variable_factors[index]
        gradient = ops.cast(gradient, variable.dtype)
        step = self._variable_steps[index]
        self.assign_add(step, ops.ones((), "int64"))
        local_step = ops.cast(step, variable.dtype)
        beta_1_power = ops.power(ops.cast(self.beta_1, variable.dtype), local_step)
        beta_2_power = ops.power(ops.cast(self.beta_2, variable.dtype), local_step)
        m, v = _keras_private.adam_moments(self, index)
        alpha = lr * ops.sqrt(1 - beta_2_power) / (1 - beta_1_power)
        self.assign_add(m, ops.multiply(ops.subtract(gradient, m), 1 - self.beta_1))
        self.assign_add(
            v,
            ops.multiply(ops.subtract(ops.square(gradient), v), 1 - self.beta_2),
        )
        self.assign_sub(
            variable,
            ops.divide(ops.multiply(m, alpha), ops.add(ops.sqrt(v), self.epsilon)),
        )

    def get_config(self) -> dict:
        config = super().get_config()
        config["factors"] = dict(self.factors)
        config.pop("amsgrad", None)
        return config


@keras.saving.register_keras_serializable(package="rnnkit")
class NoamSchedule(keras.optimizers.schedules.LearningRateSchedule):
    """Warm-up, then inverse square-root decay (Vaswani et al. 2017, eq. 3).

        lr(step) = scale * model_dim^-0.5 * min(step^-0.5, step * warmup_steps^-1.5)

    The rate rises linearly for `warmup_steps` steps, peaks at
    `scale * (model_dim * warmup_steps)^-0.5`, then falls as 1 / sqrt(step). Steps
    count from 1: the optimizer's first update (its `iterations` is 0) uses step 1.
    `with_peak` gives the schedule whose peak is a chosen learning rate.

    Args:
        model_dim: d, the model size of the formula.
        warmup_steps: steps of the linear warm-up. Defaults to 4000 (the paper's).
        scale: factor on the whole formula. Defaults to 1 (the paper's).

    Example:
    >>> schedule = NoamSchedule(model_dim=512, warmup_steps=4000)
    >>> round(float(schedule(3999)), 6)  # the peak, at step 4000
    0.000699
    >>> round(float(NoamSchedule.with_peak(1e-3, warmup_steps=100)(99)), 6)
    0.001

    Reference:
        Vaswani et al. (2017), Attention Is All You Need, section 5.3.
    """

    def __init__(self, model_dim: int, warmup_steps: int = 4000, scale: float = 1.0):
        for name, value in (("model_dim", model_dim), ("warmup_steps", warmup_steps)):
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(
                    f"Argument `{name}` must be a positive integer, received "
                    f"{name}={value!r}."
                )
        if not scale > 0:
            raise ValueError(f"Argument `scale` must be > 0, received scale={scale!r}.")
        self.model_dim = model_dim
        self.warmup_steps = warmup_steps
        self.scale = float(scale)

    @classmethod
    def with_peak(
        cls, peak: float, warmup_steps: int, model_dim: int = 512
    ) -> NoamSchedule:
        """The schedule that reaches `peak` at step `warmup_steps` (its scale is
        peak * sqrt(model_dim * warmup_steps), so `model_dim` cancels out)."""
        return cls(model_dim, warmup_steps, peak * math.sqrt(model_dim * warmup_steps))

    def __call__(self, step):
        step = ops.cast(step, "float32") + 1.0
        warmup = ops.cast(self.warmup_steps, "float32")
        return (
            self.scale
            * self.model_dim**-0.5
            * ops.minimum(ops.rsqrt(step), step * ops.power(warmup, -1.5))
        )

    def get_config(self) -> dict:
        return {
            "model_dim": self.model_dim,
            "warmup_steps": self.warmup_steps,
            "scale": self.scale,
        }


@keras.saving.register_keras_serializable(package="rnnkit")
class SlantedTriangular(keras.optimizers.schedules.LearningRateSchedule):
    """ULMFiT's slanted triangular learning rate (Howard & Ruder 2018, eq. 3).

        cut = floor(T * cut_fraction)
        p   = t / cut                                      if t < cut
              1 - (t - cut) / (cut * (1 / cut_fraction - 1))  otherwise
        lr  = peak * (1 + p * (ratio - 1)) / ratio

    A short linear rise from `peak / ratio` to `peak` over the first `cut_fraction`
    of the `total_steps` (T) updates, then a long linear decay back to `peak / ratio`
    at the end (and no lower after it). Steps count from 0: the optimizer's first
    update is t = 0.

    Args:
        peak: the highest learning rate (eta_max).
        total_steps: T, the number of updates of the whole training.
        cut_fraction: the share of the steps that rise. Defaults to 0.1 (the paper's).
        ratio: how much smaller the lowest rate is than the peak. Defaults to 32.

    Example:
    >>> schedule = SlantedTriangular(0.01, total_steps=1000)
    >>> round(float(schedule(100)), 6)  # the peak, after the first 10 % of the steps
    0.01
    >>> round(float(schedule(0)) * 32, 6), round(float(schedule(1000)) * 32, 6)
    (0.01, 0.01)

    Reference:
        Howard & Ruder (2018), Universal Language Model Fine-tuning for Text
        Classification, section 3.2.
    """

    def __init__(
        self,
        peak: float,
        total_steps: int,
        cut_fraction: float = 0.1,
        ratio: float = 32.0,
    ):
        if not isinstance(total_steps, int) or isinstance(total_steps, bool):
            raise ValueError(
                "Argument `total_steps` must be a positive integer, received "
                f"total_steps={total_steps!r}."
            )
        for name, value, valid in (
            ("peak", peak, peak > 0),
            ("total_steps", total_steps, total_steps >= 1),
            ("cut_fraction", cut_fraction, 0 < cut_fraction < 1),
            ("ratio", ratio, ratio >= 1),
        ):
            if not valid:
                raise ValueError(
                    f"Argument `{name}` is out of range (peak > 0, total_steps >= 1, "
                    f"0 < cut_fraction < 1, ratio >= 1), received {name}={value!r}."
                )
        self.peak = float(peak)
        self.total_steps = total_steps
        self.cut_fraction = float(cut_fraction)
        self.ratio = float(ratio)

    def __call__(self, step):
        t = ops.cast(step, "float32")
        cut = float(max(1, math.floor(self.total_steps * self.cut_fraction)))
        rising = t / cut
        falling = 1.0 - (t - cut) / (cut * (1.0 / self.cut_fraction - 1.0))
        p = ops.maximum(ops.where(t < cut, rising, falling), 0.0)
        return self.peak * (1.0 + p * (self.ratio - 1.0)) / self.ratio

    def get_config(self) -> dict:
        return {
            "peak": self.peak,
            "total_steps": self.total_steps,
            "cut_fraction": self.cut_fraction,
            "ratio": self.ratio,
        }


def configured_learning_rate(train, model) -> float | NoamSchedule:
    """The learning rate of a recipe's `train` and `model` config sections (see
    `rnnkit.shared_sections.ScheduledTrainConfig` and `TransformerModelConfig`):
    `train.learning_rate` for `train.lr_schedule = "constant"`; for "noam", the
    schedule that peaks at it after `train.warmup_steps` steps, with the model's
    width (`model.model_dim` for a Transformer, else `model.units`) as model_dim.
    """
    if train.lr_schedule != "noam":
        return train.learning_rate
    transformer = model.architecture == "transformer"
    return NoamSchedule.with_peak(
        train.learning_rate,
        train.warmup_steps,
        model_dim=model.model_dim if transformer else model.units,
    )
