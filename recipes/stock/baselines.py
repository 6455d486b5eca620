"""The baselines the stock forecaster is measured against, on the same test days.

Persistence (the random walk: "tomorrow's close is today's") is the last known close
itself; the moving average is the mean close of the last `days` days. Both forecast
the same close for every day of the horizon.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np


def moving_average(closes: np.ndarray, anchors: np.ndarray, days: int) -> np.ndarray:
    """Mean close of the `days` days ending on each anchor (fewer at the start)."""
    import numpy as np

    totals = np.concatenate([[0.0], np.cumsum(closes)])
    first = np.maximum(anchors + 1 - days, 0)
    return (totals[anchors + 1] - totals[first]) / (anchors + 1 - first)
