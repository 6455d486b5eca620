"""The forecaster's own layers: the window scaling, the calendar terms it records,
the cut of a window to a shorter input, SegRNN's parallel segment decoder, and the
median of an ensemble's members."""

from __future__ import annotations

from collections.abc import Sequence

import keras
import numpy as np
from keras import ops

from rnnkit.models._recurrent import recurrent_layer_class

SCALINGS = ("standard", "last", "mean_abs", "none")


def window_statistics(values, observed, mode: str = "standard", minimum_scale=1e-3):
    """(location, scale), each (batch, 1), of `WindowScaler` for (batch, steps)
    `values` and `observed` (float32 tensors; keras ops, so an input pipeline can
    weight each window's loss by one over its scale as the model scales it)."""
    count = ops.maximum(ops.sum(observed, axis=-1, keepdims=True), 1.0)
    mean_abs = ops.sum(ops.abs(values) * observed, axis=-1, keepdims=True) / count
    floor = minimum_scale * (mean_abs + 1.0)
    if mode in ("standard", "last"):
        mean = ops.sum(values * observed, axis=-1, keepdims=True) / count
        deviation = (values - mean) * observed
        variance = ops.sum(ops.square(deviation), axis=-1, keepdims=True) / count
        scale = ops.maximum(ops.sqrt(variance), floor)
        if mode == "standard":
            return mean, scale
        # The last observed step: observed, and none observed after it (a cumulative
        # count, not an argmax: Keras' float argmax needs ops LiteRT lacks).
        after = ops.sum(observed, axis=-1, keepdims=True) - ops.cumsum(observed, -1)
        last = observed * ops.cast(after < 0.5, values.dtype)  # 0 if none is seen
        return ops.sum(values * last, axis=-1, keepdims=True), scale
    if mode == "mean_abs":
        return ops.zeros_like(mean_abs), ops.maximum(mean_abs, floor)
    return ops.zeros_like(mean_abs), ops.ones_like(mean_abs)


@keras.saving.register_keras_serializable(package="rnnkit")
class WindowScaler(keras.layers.Layer):
    """Scales each window by statistics of its own observed values.

    Call it on `[values, observed]`, both (batch, steps); `observed` is 1 where the
    value was seen and 0 where it is missing (a missing value must be a finite
    placeholder, such as 0). Returns `[scaled, location, scale]`: `scaled` (batch,
    steps) is `(values - location) / scale` at observed steps and 0 at missing ones;
    `location` and `scale` are (batch, 1).

    Args:
        mode: "standard" (location the observed mean, scale the observed standard
            deviation), "last" (location the last observed value, the window's
            level where the forecast starts, as NLinear and SegRNN subtract it;
            scale the observed standard deviation), "mean_abs" (location 0, scale
            the observed mean absolute value; DeepAR's) or "none" (0 and 1).
        minimum_scale: the smallest scale, relative to the window's mean absolute
            value plus one, so that a constant window does not divide by zero.
    """

    def __init__(self, mode: str = "standard", minimum_scale: float = 1e-3, **kwargs):
        super().__init__(**kwargs)
        if mode not in SCALINGS:
            raise ValueError(
                f"Argument `mode` must be one of {SCALINGS}, received {mode!r}."
            )
        self.mode = mode
        self.minimum_scale = float(minimum_scale)

    def call(self, inputs):
        values, observed = inputs
        values = ops.cast(values, "float32")
        observed = ops.cast(observed, "float32")
        location, scale = window_statistics(
            values, observed, self.mode, self.minimum_scale
        )
        scaled = (values - location) / scale * observed
        return [scaled, location, scale]

    def compute_output_shape(self, input_shape):
        shape = tuple(input_shape[0])
        return [shape, (shape[0], 1), (shape[0], 1)]

    def get_config(self):
        config = super().get_config()
        config.update(mode=self.mode, minimum_scale=self.minimum_scale)
        return config


@keras.saving.register_keras_serializable(package="rnnkit")
class CalendarTerms(keras.layers.Layer):
    """Calendar terms passed through unchanged, their periods kept in the model.

    The forecaster's `past_time` and `future_time` inputs hold, for each period p (in
    steps), sin and cos of 2 pi (t mod p) / p at each step t. The model cannot make
    them itself from a window, so whoever feeds it (the recipe's `predict`, an
    exported model's caller) must know the periods: this layer records them in the
    saved model (`layers_named(model, CALENDAR_LAYER)`), where the data that trained
    it need not be at hand.

    Args:
        periods: the periods, in steps; the inputs' last axis is 2 x len(periods).
    """

    def __init__(self, periods: Sequence[float] = (), **kwargs):
        super().__init__(**kwargs)
        self.periods = tuple(float(p) for p in periods)

    def build(self, input_shape):
        if input_shape[-1] is not None and input_shape[-1] != 2 * len(self.periods):
            raise ValueError(
                f"CalendarTerms of periods {self.periods} reads "
                f"{2 * len(self.periods)} terms per step (sin, cos of each), "
                f"received inputs of shape {input_shape}."
            )

    def call(self, inputs):
        return inputs

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        return {**super().get_config(), "periods": list(self.periods)}


@keras.saving.register_keras_serializable(package="rnnkit")
class LastSteps(keras.layers.Layer):
    """The last `steps` steps (axis 1) of its input: a window cut to a shorter
    model's input length (the members of an ensemble read windows of their own
    lengths from one longest window)."""

    def __init__(self, steps: int, **kwargs):
        super().__init__(**kwargs)
        _positive("steps", steps)
        self.steps = int(steps)

    def call(self, inputs):
        return inputs[:, -self.steps :]

    def compute_output_shape(self, input_shape):
        return (input_shape[0], self.steps, *input_shape[2:])

    def get_config(self):
        return {**super().get_config(), "steps": self.steps}


@keras.saving.register_keras_serializable(package="rnnkit")
class Median(keras.layers.Layer):
    """The element-wise median of its inputs, a list of tensors of one shape (the
    median of an ensemble's members, less swayed than their mean by one member
    that errs far). Of an even number, the mean of the two middle values. Sorting
    runs along the last axis, which every export runtime sorts (top-k)."""

    def call(self, inputs):
        if not isinstance(inputs, list | tuple):
            raise ValueError(
                "Median takes a list of tensors of one shape, received "
                f"{type(inputs).__name__}."
            )
        stacked = ops.stack(list(inputs), axis=-1)
        values = ops.sort(stacked, axis=-1)
        middle = len(inputs) // 2
        median = values[..., middle]
        if len(inputs) % 2 == 0:
            median = (values[..., middle - 1] + median) / 2
        # A sort leaves NaN anywhere: where a member is NaN the median is NaN, as
        # the mean is (x != x marks NaN; LiteRT has no isnan op). An infinite
        # member is sorted like any other value that errs far.
        missing = ops.where(ops.not_equal(stacked, stacked), stacked, 0.0)
        return median + ops.sum(missing, axis=-1)

    def compute_output_shape(self, input_shape):
        return tuple(input_shape[0])


def _positive(name: str, value) -> None:
    if not isinstance(value, int | np.integer) or value < 1:
        raise ValueError(
            f"Argument `{name}` must be a positive integer, received {name}={value!r}."
        )


@keras.saving.register_keras_serializable(package="rnnkit")
class SegmentDecoder(keras.layers.Layer):
    """SegRNN's parallel multi-step decoder (PMF, Lin et al. 2023): the horizon cut
    into `segments` segments, each decoded by one recurrent step from the encoder's
    final state, reading a learned embedding of the segment's position and the
    segment's known features. No segment reads another's output, so all run at once
    as one batch of one-step sequences, and no error compounds along the horizon.

    Call it as `decoder(states, steps=None)`: `states` the encoder's final states (a
    list: one tensor for a GRU, two for an LSTM, each (batch, units)), `steps`
    (batch, segments, F) the known features of each output segment, or None.
    Returns (batch, segments, units), the state each segment's step ends in.

    Args:
        cell_type: a registered recurrent layer ("gru", "lstm", ...).
        units: the recurrence's width (the encoder's, whose states it starts from).
        segments: output segments (the horizon over the segment length).
        position_dim: width of the position embedding (SegRNN's: half of `units`).
    """

    def __init__(
        self,
        cell_type: str = "gru",
        units: int = 32,
        segments: int = 1,
        position_dim: int = 16,
        **kwargs,
    ):
        super().__init__(**kwargs)
        for name, value in (
            ("units", units),
            ("segments", segments),
            ("position_dim", position_dim),
        ):
            _positive(name, value)
        self.cell_type, self.units = cell_type, int(units)
        self.segments, self.position_dim = int(segments), int(position_dim)
        self.recurrent = recurrent_layer_class(cell_type)(self.units, name="step")

    def build(self, states_shape, steps_shape=None):
        width = self.position_dim + (0 if steps_shape is None else int(steps_shape[-1]))
        self.positions = self.add_weight(
            shape=(self.segments, self.position_dim),
            initializer=keras.initializers.RandomNormal(stddev=1.0),
            name="positions",
        )
        self.recurrent.build((None, 1, width))

    def call(self, states, steps=None):
        batch = ops.shape(states[0])[0]
        features = ops.broadcast_to(
            ops.cast(self.positions, states[0].dtype)[None],
            (batch, self.segments, self.position_dim),
        )
        if steps is not None:
            features = ops.concatenate([features, ops.cast(steps, features.dtype)], -1)
        flat = ops.reshape(features, (-1, 1, features.shape[-1]))
        starts = [
            ops.reshape(ops.repeat(state[:, None, :], self.segments, axis=1),
                        (-1, self.units))
            for state in states
        ]  # fmt: skip
        ends = self.recurrent(flat, initial_state=starts)
        return ops.reshape(ends, (-1, self.segments, self.units))

    def compute_output_shape(self, states_shape, steps_shape=None):
        return (states_shape[0][0], self.segments, self.units)

    def get_config(self):
        return {
            **super().get_config(),
            "cell_type": self.cell_type,
            "units": self.units,
            "segments": self.segments,
            "position_dim": self.position_dim,
        }
