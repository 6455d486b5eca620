"""The configuration of the stock recipe.

The typed configuration of the recipe: one dataclass per section, each field with its
default and help text; the command line's options come from the same fields.
"""

from __future__ import annotations

import dataclasses

from rnnkit.recipe import (
    DataConfig,
    EvaluationConfig,
    ModelConfig,
    RecipeConfig,
    TrainConfig,
    field,
    section,
)
from rnnkit.registry import recurrent_names


@dataclasses.dataclass
class StockDataConfig(DataConfig):
    ticker: str | None = field(
        None, help="Ticker to keep from a multi-ticker file (its Name/Ticker column)."
    )
    use_adjusted: bool = field(
        True, help="Use the file's Adj Close (split/dividend adjusted) as the close."
    )
    start: str | None = field(None, help="First date to use (YYYY-MM-DD).")
    end: str | None = field(None, help="Last date to use (YYYY-MM-DD).")
    window: int = field(
        30, help="Past trading days the model reads per forecast.", at_least=1
    )
    horizon: int = field(
        1, help="Trading days forecast ahead (1 = next day).", at_least=1
    )
    validation_fraction: float = field(
        0.15,
        help="Share of days (before the test days) used for validation.",
        above=0.0,
        below=1.0,
    )
    test_fraction: float = field(
        0.15, help="Share of the last days used for testing.", above=0.0, below=1.0
    )


@dataclasses.dataclass
class StockModelConfig(ModelConfig):
    cell_type: str = field("lstm", help="Recurrent layer.", choices=recurrent_names())
    units: int = field(32, help="Units per recurrent layer.", at_least=1)
    layers: int = field(2, help="Stacked recurrent layers.", at_least=1)
    dropout: float = field(
        0.0, help="Dropout before the output layer.", at_least=0.0, below=1.0
    )


@dataclasses.dataclass
class StockEvaluationConfig(EvaluationConfig):
    moving_average_days: int = field(
        5, help="Days averaged by the moving-average baseline.", at_least=1
    )


@dataclasses.dataclass
class StockConfig(RecipeConfig):
    data: StockDataConfig = section(StockDataConfig, "Price source and windows.")
    model: StockModelConfig = section(StockModelConfig, "The recurrent regressor.")
    train: TrainConfig = section(
        TrainConfig, "The training loop.", epochs=20, batch_size=64, patience=4
    )
    evaluation: StockEvaluationConfig = section(
        StockEvaluationConfig, "Baselines and backtest."
    )
