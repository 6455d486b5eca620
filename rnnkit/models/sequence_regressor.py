"""A many-to-one sequence regressor: a window of feature vectors in, K numbers out.

    (batch, window, features) -> Normalization (statistics of the training data)
        -> rnnkit LSTM/GRU stack -> Dropout -> Dense(outputs, float32)

The input scaling lives inside the model, so `model.keras` alone turns raw features into
a forecast and reloads in safe mode (only Keras and registered rnnkit layers).
"""

from __future__ import annotations

import keras
import numpy as np

from rnnkit.models._recurrent import recurrent_layer_class


def build_sequence_regressor(
    training_inputs: np.ndarray,
    outputs: int,
    *,
    cell_type: str = "lstm",
    units: int = 32,
    num_layers: int = 1,
    dropout: float = 0.0,
    seed: int | None = None,
) -> keras.Model:
    """The regressor as a functional `keras.Model` (not compiled).

    Args:
        training_inputs: (examples, window, features) training windows; only their
            per-feature mean and variance are kept (the Normalization layer), so pass
            the training split alone, never validation or test data.
        outputs: numbers predicted per example (e.g. the forecast horizon).
        cell_type: the name of a registered recurrent layer (`"lstm"`, `"gru"`,
            `"simple_rnn"`, ...; `rnnkit.layers.get_recurrent`). Defaults to "lstm".
        units: units of every recurrent layer. Defaults to 32.
        num_layers: stacked recurrent layers. Defaults to 1.
        dropout: dropout rate before the output layer. Defaults to 0.
        seed: seed of the dropout layer.

    Returns:
        A model mapping (batch, window, features) to (batch, outputs) in float32.

    Example:
    >>> model = build_sequence_regressor(np.zeros((100, 30, 3)), outputs=5)
    >>> model.output_shape
    (None, 5)
    """
    recurrent = recurrent_layer_class(cell_type)
    if training_inputs.ndim != 3 or len(training_inputs) == 0:
        raise ValueError(
            "Argument `training_inputs` must be a non-empty (examples, window, "
            f"features) array, received shape {training_inputs.shape}."
        )
    for name, value in (
        ("outputs", outputs),
        ("units", units),
        ("num_layers", num_layers),
    ):
        if not isinstance(value, int) or value < 1:
            raise ValueError(
                f"Argument `{name}` must be a positive integer, "
                f"received {name}={value!r}."
            )
    if not 0.0 <= dropout < 1.0:
        raise ValueError(f"Argument `dropout` must be in [0, 1), received {dropout!r}.")

    _, window, num_features = training_inputs.shape
    normalizer = keras.layers.Normalization(axis=-1, name="normalize")
    normalizer.adapt(
        training_inputs.reshape(-1, num_features)
    )  # (examples * window, features)

    inputs = keras.Input(
        (window, num_features), name="window"
    )  # (batch, window, features)
    hidden = normalizer(inputs)
    for index in range(num_layers):
        last = index == num_layers - 1
        # (batch, window, units) for inner layers, (batch, units) for the last one
        hidden = recurrent(
            units, return_sequences=not last, name=f"{cell_type}_{index + 1}"
        )(hidden)
    if dropout > 0:
        hidden = keras.layers.Dropout(dropout, seed=seed, name="dropout")(hidden)
    predictions = keras.layers.Dense(outputs, dtype="float32", name="forecast")(hidden)
    return keras.Model(inputs, predictions, name=f"{cell_type}_regressor")
