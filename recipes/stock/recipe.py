"""Stock forecasting: the next `horizon` daily closes from a window of past days.

A stacked rnnkit LSTM or GRU reads `window` days of features (log return, day range,
volume) and predicts the next `horizon` log returns; the forecast close is the last
close compounded by them. The evaluation puts the model next to the persistence (random
walk: "tomorrow's close is today's") and moving-average baselines on the same test days.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rnnkit_recipes.stock.config import StockConfig

from rnnkit.recipe import (
    Metrics,
    Recipe,
    RnnkitError,
    csv_files_of,
)

if TYPE_CHECKING:
    import keras
    import keras_tuner
    import numpy as np
    from rnnkit_recipes.stock.data import Split, StockData


class StockRecipe(Recipe):
    """Stacked LSTM/GRU forecaster of daily closing prices."""

    name = "stock"
    summary = (
        "Forecast the next daily closes of a stock: rnnkit LSTM/GRU vs persistence"
    )
    Config = StockConfig

    def check_config(self, config: StockConfig) -> None:
        super().check_config(config)
        _check(config)

    def load_data(self, config: StockConfig) -> StockData:
        from rnnkit_recipes.stock import data as stock_data

        _check(config)
        frame, source = stock_data.load_prices(
            config.data.path,
            config.data.ticker,
            config.data.use_adjusted,
            config.data.start,
            config.data.end,
        )
        return stock_data.build(
            frame,
            source,
            window=config.data.window,
            horizon=config.data.horizon,
            validation_fraction=config.data.validation_fraction,
            test_fraction=config.data.test_fraction,
        )

    def build_model(self, config: StockConfig, data: StockData) -> keras.Model:
        import keras

        from rnnkit.models.sequence_regressor import build_sequence_regressor

        model = build_sequence_regressor(
            data.splits["train"].inputs,
            outputs=config.data.horizon,
            cell_type=config.model.cell_type,
            units=config.model.units,
            num_layers=config.model.layers,
            dropout=config.model.dropout,
            seed=config.train.seed,
        )
        model.compile(
            optimizer=keras.optimizers.Adam(config.train.learning_rate),
            loss="mse",
            metrics=["mae"],
        )
        return model

    def search_space(
        self, hp: keras_tuner.HyperParameters, config: StockConfig
    ) -> StockConfig:
        return config.with_values(
            {
                "model.cell_type": hp.Choice("cell_type", ["lstm", "gru"]),
                "model.units": hp.Choice("units", [16, 32, 64]),
                "model.layers": hp.Int("layers", 1, 2),
                "data.window": hp.Choice("window", [10, 20, 30, 60]),
                "model.dropout": hp.Choice("dropout", [0.0, 0.1, 0.3]),
                "train.learning_rate": hp.Float(
                    "learning_rate", 1e-4, 1e-2, sampling="log"
                ),
            }
        )

    def evaluate(
        self, model: keras.Model, data: StockData, config: StockConfig
    ) -> Metrics:
        _check_model_shape(model, config)
        return forecast_table(
            model, data, config.evaluation.moving_average_days, config.train.batch_size
        )

    def predict(
        self, model: keras.Model, inputs: Sequence[str], config: StockConfig
    ) -> list[str]:
        sources = list(inputs) or [config.data.path]
        lines = []
        for path in sources:
            lines += forecast_lines(model, path, config)
        return lines

    def predict_records(
        self,
        model: keras.Model,
        inputs: Sequence[Any],
        config: StockConfig,
        calls: dict | None = None,
    ) -> list[dict[str, Any]]:
        """Per input (a CSV text of daily prices, as `rnnkit predict` reads a
        file, or its columns as a JSON object): the window the model read and the
        forecast closes."""
        if calls is not None:
            raise RnnkitError(
                "the stock recipe answers /predict from the Keras runtime; "
                "/v1/models/NAME:predict takes the exported model's inputs"
            )
        what = "daily prices (date, close, ...)"
        with csv_files_of(inputs, what, "prices.csv") as paths:
            return [forecast_record(model, path, config) for path in paths]

    def write_plots(
        self, model: keras.Model, data: StockData, config: StockConfig, plot_dir: Path
    ) -> None:
        plot_test_forecast(model, data, config, plot_dir, config.train.batch_size)

    def export_plan(self, model: keras.Model, config: StockConfig, format: str):
        from rnnkit_recipes.stock.export import export_plan

        return export_plan(model, config, format)

    def backtest_folds(
        self, data: StockData, config: StockConfig
    ) -> Iterable[StockData]:
        from rnnkit_recipes.stock.data import walk_forward

        return walk_forward(
            data, config.evaluation.folds, config.data.validation_fraction
        )


def _check(config: StockConfig) -> None:
    from rnnkit.errors import ConfigError

    positive = {
        "data.window": config.data.window,
        "data.horizon": config.data.horizon,
        "model.units": config.model.units,
        "model.layers": config.model.layers,
        "evaluation.moving_average_days": config.evaluation.moving_average_days,
    }
    for key, value in positive.items():
        if value < 1:
            raise ConfigError(f"{key} must be at least 1, got {value}")
    fractions = (config.data.validation_fraction, config.data.test_fraction)
    if not all(0 < f < 1 for f in fractions) or sum(fractions) >= 0.9:
        raise ConfigError(
            "data.validation_fraction and data.test_fraction must each be in (0, 1) "
            "and leave at least 10% of the days for training"
        )
    if not 0 <= config.model.dropout < 1:
        raise ConfigError(
            f"model.dropout must be in [0, 1), got {config.model.dropout}"
        )
    if config.evaluation.folds < 0:
        raise ConfigError(
            f"evaluation.folds must be >= 0, got {config.evaluation.folds}"
        )


def _check_model_shape(model: keras.Model, config: StockConfig) -> None:
    """Stops when the data settings ask for windows or forecasts of another length
    than the model's (the input scaling is inside the model and needs no check)."""
    from rnnkit.errors import ConfigError

    window, horizon = model.input_shape[1], model.output_shape[-1]
    if (config.data.window, config.data.horizon) != (window, horizon):
        raise ConfigError(
            f"this run's model reads data.window={window} days and forecasts "
            f"data.horizon={horizon}; evaluate it with those (got "
            f"{config.data.window} and {config.data.horizon})"
        )


# -- Evaluation ----------------------------------------------------------------------


def forecast_closes(
    model: keras.Model, split: Split, closes: np.ndarray, batch_size: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(predicted, actual, last known) closes of a split's examples.

    `predicted` and `actual` are (examples, horizon); `last` is (examples,), the close
    of each anchor day, which is also the persistence forecast.
    """
    import numpy as np

    returns_pct = model.predict(split.inputs, batch_size=batch_size, verbose=0)
    horizon = returns_pct.shape[1]
    last = closes[split.anchors]  # (examples,)
    growth = np.exp(np.cumsum(returns_pct.astype("float64"), axis=1) / 100.0)
    predicted = last[:, None] * growth  # (examples, horizon)
    actual = closes[split.anchors[:, None] + np.arange(1, horizon + 1)]  # (ex, horizon)
    return predicted, actual, last


def forecast_table(
    model: keras.Model, data: StockData, moving_average_days: int, batch_size: int
) -> Metrics:
    """MAE / RMSE / MASE / relative MAE / directional accuracy of every system.

    MASE is Hyndman and Koehler's: the MAE over the in-sample MAE of the one-step naive
    forecast on the closes up to the last training target. Relative MAE is the MAE over
    the persistence forecast's on the same test days.
    """
    import numpy as np
    from rnnkit_recipes.stock.baselines import moving_average

    from rnnkit.metrics import directional_accuracy, mae, mase, relative_mae, rmse

    split = data.splits["test"]
    closes = data.prices["close"].to_numpy()
    horizon = split.targets.shape[1]
    training_closes = closes[: int(data.splits["train"].anchors.max()) + horizon + 1]
    predicted, actual, last = forecast_closes(model, split, closes, batch_size)
    persistence = np.broadcast_to(last[:, None], actual.shape)
    average = np.broadcast_to(
        moving_average(closes, split.anchors, moving_average_days)[:, None],
        actual.shape,
    )
    actual_change = actual - last[:, None]

    def row(forecast: np.ndarray, direction: bool = True) -> dict[str, float]:
        figures = {
            "mae": mae(actual, forecast),
            "rmse": rmse(actual, forecast),
            "mase": mase(actual, forecast, training_closes),
            "relative_mae": relative_mae(actual, forecast, persistence),
        }
        if direction:
            figures["directional_accuracy"] = directional_accuracy(
                actual_change, forecast - last[:, None]
            )
        return figures

    return {
        "model": row(predicted),
        "persistence": row(persistence, direction=False),
        f"moving_average_{moving_average_days}": row(average),
        "always_up": {
            "directional_accuracy": directional_accuracy(
                actual_change, np.ones_like(actual_change)
            )
        },
    }


ZOOM_DAYS = 60


def plot_test_forecast(
    model: keras.Model,
    data: StockData,
    config: StockConfig,
    plot_dir: Path,
    batch_size: int,
) -> list[Path]:
    """Next-day forecasts against the actual close: the whole test span, and its last
    `ZOOM_DAYS` days, where the lines can be told apart."""
    from rnnkit import plots

    split = data.splits["test"]
    closes = data.prices["close"].to_numpy()
    predicted, actual, last = forecast_closes(model, split, closes, batch_size)
    dates = data.prices["date"].to_numpy()[split.anchors + 1]
    label = f"model ({config.model.cell_type.upper()}, next day)"
    paths = []
    for name, start, span in (
        ("forecast.png", 0, "test span"),
        (f"forecast_last_{ZOOM_DAYS}_days.png", -ZOOM_DAYS, f"last {ZOOM_DAYS} days"),
    ):
        paths.append(
            plots.forecast(
                dates[start:],
                actual[start:, 0],
                {label: predicted[start:, 0], "persistence": last[start:]},
                plot_dir / name,
                title=f"{data.source}: {span}, next-day close",
            )
        )
    return paths


def _forecast(model: keras.Model, path: str | None, config: StockConfig):
    """(source, the window's prices, the forecast dates and closes) for a file."""
    import numpy as np
    import pandas as pd
    from rnnkit_recipes.stock.data import latest_window, load_prices

    frame, source = load_prices(
        path, config.data.ticker, config.data.use_adjusted, None, None
    )
    window, prices = latest_window(frame, config.data.window, source)
    returns_pct = model.predict(window, verbose=0)[0].astype("float64")  # (horizon,)
    last_date = prices["date"].iloc[-1]
    last_close = float(prices["close"].iloc[-1])
    closes = last_close * np.exp(np.cumsum(returns_pct) / 100.0)
    dates = pd.bdate_range(last_date + pd.offsets.BDay(1), periods=len(closes))
    return source, prices, dates, closes


def forecast_lines(
    model: keras.Model, path: str | None, config: StockConfig
) -> list[str]:
    """The forecast closes for the `horizon` trading days after a file's last date."""
    source, prices, dates, closes = _forecast(model, path, config)
    last_date = prices["date"].iloc[-1]
    last_close = float(prices["close"].iloc[-1])
    lines = [f"{source}: last close {last_close:.2f} on {last_date:%Y-%m-%d}"]
    for date, close in zip(dates, closes, strict=True):
        change = 100.0 * (close / last_close - 1.0)
        lines.append(f"  {date:%Y-%m-%d}  forecast close {close:.2f}  ({change:+.2f}%)")
    return lines


def forecast_record(model: keras.Model, path: str, config: StockConfig) -> dict:
    """The window's dates and closes (`history`) and the forecast's (`forecast`)."""
    _, prices, dates, closes = _forecast(model, path, config)
    return {
        "history": {
            "time": [f"{d:%Y-%m-%d}" for d in prices["date"]],
            "close": [float(c) for c in prices["close"]],
        },
        "forecast": {
            "time": [f"{d:%Y-%m-%d}" for d in dates],
            "close": [float(c) for c in closes],
        },
    }
