"""Monthly airline passengers (Box & Jenkins, 1949-1960), one month ahead.

The smallest complete recipe: a config, data, a model from `rnnkit.models`, a search
space, an evaluation beside two baselines, and predictions. The module imports no
Keras or NumPy at the top, so `rnnkit list` stays fast.
"""

from __future__ import annotations

import dataclasses

from rnnkit.recipe import (
    DataConfig,
    DataError,
    ModelConfig,
    Recipe,
    RecipeConfig,
    RecipeData,
    TrainConfig,
    field,
    section,
)


@dataclasses.dataclass
class AirlineData(DataConfig):
    window: int = field(12, help="Past months the model sees.", at_least=2)
    test_months: int = field(24, help="Last months held out for the test.", at_least=1)


@dataclasses.dataclass
class AirlineModel(ModelConfig):
    cell_type: str = field("gru", help="Recurrent cell.", choices=("gru", "lstm"))
    units: int = field(16, help="Recurrent units.", at_least=1)


@dataclasses.dataclass
class AirlineConfig(RecipeConfig):
    data: AirlineData = section(AirlineData)
    model: AirlineModel = section(AirlineModel)
    train: TrainConfig = section(TrainConfig, epochs=40, batch_size=16)


@dataclasses.dataclass
class Series(RecipeData):
    """The splits, plus the last value of each window (to undo the log change)."""

    last_values: dict


class AirlineRecipe(Recipe):
    name = "airline"
    summary = "Monthly airline passengers one month ahead (an example plugin recipe)."
    Config = AirlineConfig

    def load_data(self, config: AirlineConfig) -> Series:
        import numpy as np

        values = load_series(config.data.path)
        window, test = config.data.window, config.data.test_months
        if len(values) < window + 2 * test + 2:
            raise DataError(f"{len(values)} months are too few for window {window}")
        logs = np.log(values)
        # Window of log changes -> the next month's log change.
        changes = np.diff(logs)  # (months - 1,)
        starts = np.arange(len(changes) - window)
        inputs = np.stack([changes[s : s + window] for s in starts])[..., None]
        targets = changes[starts + window][:, None]
        last = values[starts + window]  # the month before each target
        cut = {"train": -2 * test, "validation": -test}
        splits = {
            "train": slice(None, cut["train"]),
            "validation": slice(cut["train"], cut["validation"]),
            "test": slice(cut["validation"], None),
        }
        data = {k: (inputs[s].astype("float32"), targets[s]) for k, s in splits.items()}
        return Series(**data, last_values={k: last[s] for k, s in splits.items()})

    def build_model(self, config: AirlineConfig, data: Series):
        import keras

        from rnnkit.models.sequence_regressor import build_sequence_regressor

        model = build_sequence_regressor(
            data.train[0],
            outputs=1,
            cell_type=config.model.cell_type,
            units=config.model.units,
            seed=config.train.seed,
        )
        model.compile(
            optimizer=keras.optimizers.Adam(config.train.learning_rate), loss="mse"
        )
        return model

    def search_space(self, hp, config: AirlineConfig) -> AirlineConfig:
        return config.with_values(
            {
                "model.units": hp.Choice("units", [8, 16, 32]),
                "model.cell_type": hp.Choice("cell_type", ["gru", "lstm"]),
            }
        )

    def evaluate(self, model, data: Series, config: AirlineConfig):
        import numpy as np

        inputs, targets = data.test
        last = data.last_values["test"]
        actual = last * np.exp(targets[:, 0])
        forecast = last * np.exp(model.predict(inputs, verbose=0)[:, 0])
        train_mean = float(np.mean(data.last_values["train"]))

        def mae(predicted) -> float:
            return float(np.mean(np.abs(actual - predicted)))

        return {
            "model": {"mae": mae(forecast)},
            "persistence": {"mae": mae(last)},
            "training_mean": {"mae": mae(np.full_like(actual, train_mean))},
        }

    def predict(self, model, inputs, config: AirlineConfig) -> list[str]:
        import numpy as np

        window = config.data.window
        try:
            values = np.array([float(text) for text in inputs])
        except ValueError:
            raise DataError(
                "give the last months' passenger counts as numbers"
            ) from None
        if len(values) != window + 1:
            raise DataError(f"give {window + 1} monthly values, got {len(values)}")
        changes = np.diff(np.log(values))[None, :, None].astype("float32")
        forecast = values[-1] * np.exp(model.predict(changes, verbose=0)[0, 0])
        return [f"next month: {forecast:.0f} passengers (thousands)"]


def load_series(path: str | None):
    """The default series from pmdarima, or the last column of a CSV with a header."""
    import numpy as np

    if path is None:
        from pmdarima.datasets import load_airpassengers

        return np.asarray(load_airpassengers(), dtype="float64")
    try:
        values = np.loadtxt(path, delimiter=",", skiprows=1, usecols=-1, ndmin=1)
    except (OSError, ValueError) as error:
        raise DataError(f"cannot read {path}: {error}") from None
    if (values <= 0).any():
        raise DataError(f"{path}: passenger counts must be positive")
    return values
