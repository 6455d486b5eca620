"""The forecasting recipe's figures: a fan chart of the last test window of a few
series, and the error of every system by horizon step."""

from __future__ import annotations

from pathlib import Path

import numpy as np

# Steps of history drawn before the forecast, in horizons.
HISTORY_HORIZONS = 3


def fan_chart(forecasts, data, config, path: Path) -> Path | None:
    """The last test window of up to `evaluation.plot_series` series: history, actual
    values, the median and the bands between symmetric quantiles."""
    import matplotlib.pyplot as plt

    from rnnkit.plots import save_figure

    count = config.evaluation.plot_series
    if count == 0:
        return None
    rows, grid = forecasts.rows, data.grid
    last = rows[:, 1].max()
    chosen = np.flatnonzero(rows[:, 1] == last)[:count]
    levels = forecasts.levels
    horizon = forecasts.actual.shape[1]
    figure, axes = plt.subplots(
        len(chosen), 1, figsize=(9, 2.6 * len(chosen)), squeeze=False
    )
    for axis, index in zip(axes[:, 0], chosen, strict=True):
        series, origin = rows[index]
        start = max(0, origin - HISTORY_HORIZONS * horizon)
        past = np.arange(start, origin)
        future = np.arange(origin, origin + horizon)
        axis.plot(past, grid.values[series, start:origin], color="black", lw=1)
        axis.plot(future, forecasts.actual[index], color="black", lw=1, ls="--",
                  label="actual")  # fmt: skip
        quantiles = forecasts.quantiles[index]
        for low in range(len(levels) // 2):
            high = len(levels) - 1 - low
            axis.fill_between(
                future, quantiles[:, low], quantiles[:, high], color="tab:blue",
                alpha=0.15 + 0.15 * low,
                label=f"{levels[low]:g} to {levels[high]:g}",
            )  # fmt: skip
        axis.plot(future, forecasts.median[index], color="tab:blue", lw=1.5,
                  label="model median")  # fmt: skip
        if "seasonal_naive" in forecasts.baselines:
            axis.plot(future, forecasts.baselines["seasonal_naive"][index],
                      color="tab:orange", lw=1, label="seasonal naive")  # fmt: skip
        axis.set_title(f"{grid.ids[series]}", fontsize=9)
        axis.legend(fontsize=7, loc="upper left")
    axes[-1, 0].set_xlabel("step")
    figure.suptitle(f"{data.source}: last test window", fontsize=10)
    return save_figure(figure, path)


def error_by_step_plot(forecasts, data, path: Path) -> Path:
    """sMAPE of each horizon step, averaged over the test windows, per system."""
    import matplotlib.pyplot as plt
    from rnnkit_recipes.forecasting.evaluation import error_by_step

    from rnnkit.plots import save_figure

    figure, axis = plt.subplots(figsize=(7, 3.5))
    for name, errors in error_by_step(forecasts).items():
        axis.plot(np.arange(1, len(errors) + 1), errors, label=name,
                  lw=2 if name == "model" else 1)  # fmt: skip
    axis.set_xlabel("steps ahead")
    axis.set_ylabel("sMAPE (%)")
    axis.set_title(f"{data.source}: error by horizon step", fontsize=10)
    axis.legend(fontsize=8)
    return save_figure(figure, path)
