"""`rnnkit predict` of a forecasting run: the forecast of the steps after each
series' last value in a file, as CSV lines, read with the calendar the model was
trained on."""

from __future__ import annotations

from rnnkit_recipes.forecasting.config import ForecastingConfig
from rnnkit_recipes.forecasting.recipe import panel_of


def trained_periods(model) -> list[float] | None:
    """The calendar periods (in steps) `model` was trained with, as its calendar
    layer (or an ensemble member's) records them; None for a model saved before it
    recorded them."""
    from rnnkit.models.forecaster import CALENDAR_LAYER, layers_named

    found = layers_named(model, CALENDAR_LAYER)
    return list(found[0].periods) if found else None


def forecast(model, path: str | None, config: ForecastingConfig):
    """The forecast of the `horizon` steps after each series' last value in `path`
    (the default data when None): (grid, quantiles (series, horizon, levels), the
    sorted levels, each series' forecast times or None)."""
    import numpy as np
    import pandas as pd
    from rnnkit_recipes.forecasting.data import Windows, time_periods, to_grid

    d = config.data
    panel = panel_of(config, path)
    grid = to_grid(panel, 0, 0)
    inputs = {tensor.name: tensor for tensor in model.inputs}
    periods = ()
    if "past_time" in inputs:
        periods = time_periods(grid.frequency, d.seasonality)
        trained = trained_periods(model)
        count = inputs["past_time"].shape[-1] // 2
        given = ", ".join(f"{p:g}" for p in periods) or "none"
        if trained is None and len(periods) != count:  # saved before they were kept
            problem = f"{count} period(s), and this file's times give ({given})"
        elif trained is not None and (
            len(periods) != len(trained) or not np.allclose(periods, trained)
        ):
            kept = ", ".join(f"{p:g}" for p in trained)
            problem = f"periods ({kept}), and this file's times give ({given})"
        else:
            problem = None
        if problem:
            from rnnkit.errors import DataError

            raise DataError(
                f"{panel.source}: the model reads calendar terms of {problem} steps; "
                "predict from a file of the training data's layout and spacing"
            )
    names = set(inputs)
    windows = Windows(
        grid, d.input_length, d.horizon, periods,
        grid.ids if "series" in names else None,
        config.model.scaling,
        config.model.weighting,
        d.seasonality,
    )  # fmt: skip
    rows = np.stack([np.arange(len(grid.ids)), np.full(len(grid.ids), grid.steps)], 1)
    inputs, _, _ = windows.arrays(rows.astype(np.int64))
    quantiles = model.predict(inputs, batch_size=config.train.batch_size, verbose=0)
    levels = tuple(sorted(config.model.quantiles))
    times = None
    if grid.last_times is not None:
        times = [
            pd.date_range(last, periods=d.horizon + 1, freq=grid.frequency)[1:]
            for last in grid.last_times
        ]
    return grid, quantiles, levels, times


def forecast_lines(
    model, path: str | None, config: ForecastingConfig, header: bool
) -> list[str]:
    """CSV lines `id,step,time,q...`: the forecast of the `horizon` steps after each
    series' last value in `path` (the default data when None)."""
    grid, quantiles, levels, times = forecast(model, path, config)
    lines = ["id,step,time," + ",".join(f"q{q:g}" for q in levels)] if header else []
    for index, series_id in enumerate(grid.ids):
        for step in range(config.data.horizon):
            when = "" if times is None else str(times[index][step])
            values = ",".join(f"{v:.6g}" for v in quantiles[index, step])
            lines.append(f"{series_id},{step + 1},{when},{values}")
    return lines


def forecast_records(model, path: str, config: ForecastingConfig) -> list[dict]:
    """One record per series of the file at `path`: its `id`, the `history` the
    model read (the last data.input_length values, None where missing) and the
    `forecast`: `time` (None without a time column) and `quantiles` {level: values}
    of the horizon's steps, the median the point forecast."""
    import numpy as np

    grid, quantiles, levels, times = forecast(model, path, config)
    length = config.data.input_length
    records = []
    for index, series_id in enumerate(grid.ids):
        history = grid.values[index, -length:]
        records.append(
            {
                "id": str(series_id),
                "history": [None if np.isnan(v) else float(v) for v in history],
                "forecast": {
                    "time": None if times is None else [str(t) for t in times[index]],
                    "quantiles": {
                        f"{q:g}": [float(v) for v in quantiles[index, :, i]]
                        for i, q in enumerate(levels)
                    },
                },
            }
        )
    return records
