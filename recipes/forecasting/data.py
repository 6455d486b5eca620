"""A panel of series (rnnkit_recipes.forecasting.panel) on one grid, cut into windows.

Every series is right-aligned on a common grid of steps: column `t` of the grid is the
same number of steps before each series' end. The last `test_steps` of every series are
its test span, the `validation_steps` before them its validation span and everything
before them its training span (M4: the test values come from the competition's
separate test file; validation is the last 48 hours of each training series). A window
is (series, origin): the `input_length` steps before the origin are read, the
`horizon` steps from it are forecast. Missing values (NaN, a gap in the time column,
the steps before a short series' start) are inputs the model is told are missing
(`past_observed` = 0) and targets that count for nothing.
"""

from __future__ import annotations

import dataclasses

import numpy as np
from rnnkit_recipes.forecasting.panel import Panel

from rnnkit.errors import DataError

# -- The grid and its windows ----------------------------------------------------------


@dataclasses.dataclass
class Grid:
    """The panel right-aligned on one grid of steps (NaN before a series starts).

    `values` is (series, steps); `covariates` (series, steps, C) or None;
    `first_ticks` (series,) int64: the time of each series' first grid step as a
    count of `frequency` steps since the epoch (for the calendar features), or minus
    its start when the data has no times (`ticks`, (series, steps), is every step's).
    `starts[i]` is the first step of series i on the grid. The
    last `test_steps` columns are the test span, the `validation_steps` before them
    the validation span.
    """

    ids: list[str]
    values: np.ndarray
    covariates: np.ndarray | None
    first_ticks: np.ndarray
    starts: np.ndarray
    frequency: str | None
    last_times: list | None
    test_steps: int
    validation_steps: int

    @property
    def steps(self) -> int:
        return self.values.shape[1]

    @property
    def ticks(self) -> np.ndarray:
        """(series, steps) int64: each step's time (made when asked: only the first
        step's is kept)."""
        return self.first_ticks[:, None] + np.arange(self.steps, dtype=np.int64)

    @property
    def train_end(self) -> int:
        """The first step of the validation span."""
        return self.steps - self.test_steps - self.validation_steps


def to_grid(panel: Panel, test_steps: int, validation_steps: int) -> Grid:
    """Right-aligns the panel (see `Grid`)."""
    lengths = np.array([len(v) for v in panel.values])
    steps = int(lengths.max())
    count = len(panel.values)
    values = np.full((count, steps), np.nan)
    first_ticks = np.zeros(count, dtype=np.int64)
    covariates = None
    if panel.covariates is not None:
        covariates = np.full((count, steps, len(panel.covariate_names)), np.nan)
    starts = steps - lengths
    for index, series in enumerate(panel.values):
        values[index, starts[index] :] = series
        if covariates is not None:
            covariates[index, starts[index] :] = panel.covariates[index]
        first_ticks[index] = _first_tick(panel, index) - starts[index]
    last_times = None if panel.times is None else [t[-1] for t in panel.times]
    return Grid(
        ids=list(panel.ids),
        values=values,
        covariates=covariates,
        first_ticks=first_ticks,
        starts=starts,
        frequency=panel.frequency,
        last_times=last_times,
        test_steps=test_steps,
        validation_steps=validation_steps,
    )


def _first_tick(panel: Panel, index: int) -> int:
    """The series' first time as a count of frequency steps since the epoch."""
    import pandas as pd

    if panel.times is None:
        return 0
    first = panel.times[index][0]
    step = pd.tseries.frequencies.to_offset(panel.frequency)
    width = step_width(step)
    if width is None:  # months, quarters, years: calendar steps of varying length
        return _calendar_ticks(first, step)
    return int((first - pd.Timestamp(0)) // width)


def step_width(step):
    """The fixed length of a pandas offset (a week is seven days), or None for the
    calendar's steps of varying length (months, quarters, years). Business days
    and other steps that skip time are refused."""
    import pandas as pd

    if isinstance(step, pd.offsets.Week):
        return pd.Timedelta(days=7 * step.n)
    try:
        return pd.Timedelta(step)
    except ValueError:
        pass
    if _months_per_step(step) is not None:
        return None
    raise DataError(
        f"a spacing of {step.freqstr} skips time (business days or hours); give "
        "the data on a regular calendar grid (data.frequency=D or h), where the "
        "skipped steps are missing values"
    )


def _months_per_step(step) -> int | None:
    """Months per step of a monthly, quarterly or yearly offset, else None."""
    import pandas as pd

    for kinds, months in (
        ((pd.offsets.MonthEnd, pd.offsets.MonthBegin), 1),
        ((pd.offsets.QuarterEnd, pd.offsets.QuarterBegin), 3),
        ((pd.offsets.YearEnd, pd.offsets.YearBegin), 12),
    ):
        if isinstance(step, kinds):
            return months * step.n
    return None


def _calendar_ticks(first, step) -> int:
    """Steps since the epoch of monthly, quarterly and yearly data."""
    months = first.year * 12 + first.month - 1 - 1970 * 12
    return int(months // _months_per_step(step))


def time_periods(frequency: str | None, seasonality: int) -> tuple[float, ...]:
    """The periods, in steps, of the calendar's Fourier terms: a day and a week for
    sub-daily data, a week and a year for daily data, a year for weekly and monthly
    data; `seasonality` alone when the data has no times."""
    import pandas as pd

    if frequency is None:
        return (float(seasonality),) if seasonality > 1 else ()
    step = pd.tseries.frequencies.to_offset(frequency)
    width = step_width(step)
    if width is None:
        per_year = 12 / _months_per_step(step)
        return (float(per_year),) if per_year > 1 else ()
    day, week, year = pd.Timedelta("1D"), pd.Timedelta("7D"), pd.Timedelta("365.25D")
    if width < day:
        return (day / width, week / width)
    if width < week:
        return (week / width, year / width)
    return (year / width,)


# window_origins reads the grid's series in blocks of this many.
_SERIES_PER_BLOCK = 4096


def window_origins(
    grid: Grid,
    first: int,
    last: int,
    input_length: int,
    horizon: int,
    stride: int = 1,
    min_observed: int = 1,
) -> np.ndarray:
    """(windows, 2) int32 rows (series, origin): every origin in [first, last] (a
    step of `stride` from `first`) whose forecast span ends by `last + horizon` and
    holds at least one observed value, and whose input holds `min_observed`."""
    origins = np.arange(first, last + 1, stride)
    origins = origins[origins + horizon <= grid.steps]
    if origins.size == 0 or len(grid.values) == 0:
        return np.zeros((0, 2), dtype=np.int32)
    if max(len(grid.values), grid.steps + input_length + horizon) >= 2**31:
        raise DataError(
            "the panel has 2**31 series or steps or more, beyond what the window "
            "reader indexes; split it into several panels"
        )
    parts = []
    # A block of series at a time: the (series, origins) tables stay small however
    # many series the panel holds.
    for block in range(0, len(grid.values), _SERIES_PER_BLOCK):
        observed = ~np.isnan(grid.values[block : block + _SERIES_PER_BLOCK])
        cumulative = np.zeros((len(observed), grid.steps + 1), dtype=np.int32)
        np.cumsum(observed, axis=1, out=cumulative[:, 1:])
        # cumulative[:, t]: observed values before step t

        def count(start, end, cumulative=cumulative):
            start = np.clip(start, 0, grid.steps)
            return cumulative[:, end] - cumulative[:, start]

        seen_before = count(origins - input_length, origins)  # (series, origins)
        seen_after = count(origins, origins + horizon)
        kept = (seen_before >= max(1, min_observed)) & (seen_after > 0)
        series, index = np.nonzero(kept)
        parts.append(
            np.stack([series + block, origins[index]], axis=1).astype(np.int32)
        )
    return np.concatenate(parts)


def training_statistics(train: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(mean, deviation), each (series,), of `train` (series, steps; NaN where
    missing): the observed values' mean and population standard deviation, as
    scikit-learn's StandardScaler fits them; 0 and 1 for a series with fewer than two
    values, and a deviation of 0 (a constant series) is 1."""
    enough = (~np.isnan(train)).sum(axis=1) > 1
    mean, deviation = np.zeros(len(train)), np.ones(len(train))
    mean[enough] = np.nanmean(train[enough], axis=1)
    deviation[enough] = np.nanstd(train[enough], axis=1)
    return mean, np.where(deviation > 0, deviation, 1.0)


def _seasonal_difference(values, observed, seasonality: int):
    """(batch, 1): the mean |y_t - y_{t-m}| over a window's observed pairs (MASE's
    scale, m the seasonality; the last step's lag if the window is shorter), floored
    as the model's scale is."""
    import tensorflow as tf

    lag = seasonality if values.shape[1] > seasonality else 1
    both = observed[:, lag:] * observed[:, :-lag]
    pairs = tf.maximum(tf.reduce_sum(both, axis=1, keepdims=True), 1.0)
    difference = tf.reduce_sum(
        tf.abs(values[:, lag:] - values[:, :-lag]) * both, axis=1, keepdims=True
    )
    count = tf.maximum(tf.reduce_sum(observed, axis=1, keepdims=True), 1.0)
    mean_abs = tf.reduce_sum(tf.abs(values) * observed, axis=1, keepdims=True) / count
    return tf.maximum(difference / pairs, 1e-3 * (mean_abs + 1.0))


class Windows:
    """Batches of (inputs, targets, weights) for (series, origin) rows of a grid,
    gathered by TensorFlow from the padded grid, never a copy per window: memory
    grows with the panel, not with the windows an epoch reads.

    inputs: the model's (`rnnkit.models.forecaster`): past_target and past_observed
    (batch, L), past_covariates (batch, L, C), past_time and future_time (batch, L or
    H, 2 x periods), series (batch,). targets: (batch, H), 0 where missing. weights:
    (batch, H), 0 where the target is missing, else one over the window's scale as the
    model's `WindowScaler` computes it, so that the loss is in each window's own units
    and a series of large values does not outweigh the others (weighting "scale"; or
    over its mean absolute seasonal difference, or its series' training deviation).
    With a parametric `likelihood` the weights are 1 where seen: the log-likelihood
    of a value in the data's units is that of its scaled value less a constant (the
    log of the scale), so each window already counts in its own units. `teacher`:
    the datasets' inputs also hold the true future (`batch`).
    """

    def __init__(
        self,
        grid: Grid,
        input_length: int,
        horizon: int,
        periods: tuple[float, ...],
        series_ids: list[str] | None,
        scaling: str,
        weighting: str = "scale",
        seasonality: int = 1,
        likelihood: str = "quantile",
        teacher: bool = False,
    ):
        count = grid.values.shape[0]
        self.likelihood, self.teacher = likelihood, teacher
        self.input_length, self.horizon, self.periods = input_length, horizon, periods
        self.scaling, self.weighting, self.seasonality = scaling, weighting, seasonality
        # Padded so that every window's slice exists: L steps before the grid, H after.
        padded = input_length + grid.steps + horizon
        self.values = np.full((count, padded), np.nan, dtype=np.float32)
        self.values[:, input_length : input_length + grid.steps] = grid.values
        self.covariates = None
        if grid.covariates is not None:
            width = grid.covariates.shape[2]
            self.covariates = np.full((count, padded, width), np.nan, dtype=np.float32)
            self.covariates[:, input_length : input_length + grid.steps] = (
                grid.covariates
            )
        self.first_tick = grid.first_ticks.astype(np.int64)
        # weighting "series": each series' deviation over its training span.
        _, deviation = training_statistics(grid.values[:, : grid.train_end])
        self.series_scale = deviation.astype(np.float32)
        self.series_ids = None if series_ids is None else [str(i) for i in series_ids]
        self._tensors = None

    def _constants(self):
        """The grid's tensors, made once, eagerly (the map functions capture them)."""
        import tensorflow as tf

        if self._tensors is None:
            with tf.init_scope():  # eager even when first asked inside a trace
                self._tensors = self._make_constants()
        return self._tensors

    def _make_constants(self) -> dict:
        import tensorflow as tf

        tensors = {
            "values": tf.constant(self.values),
            "first_tick": tf.constant(self.first_tick),
            "series_scale": tf.constant(self.series_scale),
        }
        if self.covariates is not None:
            tensors["covariates"] = tf.constant(self.covariates)
        if self.series_ids is not None:
            tensors["series_ids"] = tf.constant(self.series_ids)
        return tensors

    def batch(self, rows, teacher: bool = False):
        """The (inputs, targets, weights) of integer rows (batch, 2), as tensors;
        `teacher`: the inputs also hold the true future (future_target, 0 where
        missing, and future_observed), which an autoregressive decoder reads in
        training."""
        import tensorflow as tf

        from rnnkit.models.forecaster import window_statistics

        rows = tf.cast(rows, tf.int64)
        series, origins = rows[:, 0], rows[:, 1]
        past = origins[:, None] + tf.range(self.input_length, dtype=tf.int64)[None]
        future = (
            origins[:, None]
            + self.input_length
            + tf.range(self.horizon, dtype=tf.int64)[None]
        )
        constants = self._constants()
        values = constants["values"]

        def take(table, steps):
            index = tf.stack(
                [tf.broadcast_to(series[:, None], tf.shape(steps)), steps], -1
            )
            return tf.gather_nd(table, index)

        past_values = take(values, past)
        observed = tf.cast(~tf.math.is_nan(past_values), tf.float32)
        past_target = tf.where(tf.math.is_nan(past_values), 0.0, past_values)
        inputs = {"past_target": past_target, "past_observed": observed}
        if self.covariates is not None:
            covariates = take(constants["covariates"], past)
            inputs["past_covariates"] = tf.where(
                tf.math.is_nan(covariates), 0.0, covariates
            )
        if self.periods:
            first = tf.gather(constants["first_tick"], series)[:, None]
            inputs["past_time"] = self._fourier(first + past - self.input_length)
            inputs["future_time"] = self._fourier(first + future - self.input_length)
        if self.series_ids is not None:
            inputs["series"] = tf.gather(constants["series_ids"], series)
        future_values = take(values, future)
        seen = ~tf.math.is_nan(future_values)
        targets = tf.where(seen, future_values, 0.0)
        if teacher:
            inputs["future_target"] = targets
            inputs["future_observed"] = tf.cast(seen, tf.float32)
        if self.likelihood != "quantile":  # the likelihood of the scaled values
            return inputs, targets, tf.cast(seen, tf.float32)
        if self.weighting == "seasonal_difference":
            scale = _seasonal_difference(past_target, observed, self.seasonality)
        elif self.weighting == "series":
            scale = tf.gather(constants["series_scale"], series)[:, None]
        else:
            _, scale = window_statistics(past_target, observed, self.scaling)
        weights = tf.cast(seen, tf.float32) / scale
        return inputs, targets, weights

    def _fourier(self, ticks):
        import tensorflow as tf

        columns = []
        for period in self.periods:
            turns = tf.math.floormod(tf.cast(ticks, tf.float64), period) / period
            phase = 2.0 * np.pi * turns
            columns += [tf.sin(phase), tf.cos(phase)]
        return tf.cast(tf.stack(columns, axis=-1), tf.float32)

    def dataset(
        self,
        rows: np.ndarray,
        batch_size: int,
        seed: int | None = None,
        teacher: bool | None = None,
    ):
        """A `tf.data.Dataset` of the batches of `rows`, in a new order each epoch
        (a permutation of all the rows, drawn from `seed`) when `seed` is given, in
        the rows' order otherwise; with the true future in the inputs when `teacher`
        (None: as the windows were made, `Windows.teacher`).

        The rows are held once (int32, as `window_origins` makes them); a shuffled
        epoch reads them through `tf.random.experimental.index_shuffle`, a seeded
        permutation computed index by index, so no shuffle buffer holds the windows
        of a large panel."""
        import tensorflow as tf

        if len(rows) == 0:
            raise DataError("no window to read: the series are too short")
        teacher = self.teacher if teacher is None else teacher
        count = len(rows)
        with tf.init_scope():
            table = tf.constant(np.asarray(rows, np.int32))
        order = tf.data.Dataset.range(count).batch(batch_size)
        if seed is not None:
            last = tf.constant(count - 1, tf.int64)
            batches = order

            def permuted(key):
                seeds = tf.stack([key, tf.constant(seed, tf.int64)])
                return batches.map(
                    lambda index: tf.random.experimental.index_shuffle(
                        index, seeds, last
                    )
                )

            # Dataset.random draws a new key each time the dataset is iterated (each
            # epoch), the same keys on every run of the same seed.
            order = (
                tf.data.Dataset.random(seed=seed, rerandomize_each_iteration=True)
                .take(1)
                .flat_map(permuted)
                .apply(tf.data.experimental.assert_cardinality(-(-count // batch_size)))
            )
        return order.map(
            lambda index: self.batch(tf.gather(table, index), teacher),
            num_parallel_calls=tf.data.AUTOTUNE,
            deterministic=True,
        ).prefetch(tf.data.AUTOTUNE)

    def arrays(self, rows: np.ndarray, batch_size: int = 4096):
        """(inputs, targets, weights) of `rows` as numpy arrays (for evaluation)."""
        parts = [
            self.batch(np.asarray(rows[start : start + batch_size], np.int64))
            for start in range(0, len(rows), batch_size)
        ]
        inputs = {
            key: np.concatenate([part[0][key].numpy() for part in parts])
            for key in parts[0][0]
        }
        if "series" in inputs:  # bytes from TensorFlow: back to str for Keras
            inputs["series"] = inputs["series"].astype(str).astype(object)
        targets = np.concatenate([part[1].numpy() for part in parts])
        weights = np.concatenate([part[2].numpy() for part in parts])
        return inputs, targets, weights
