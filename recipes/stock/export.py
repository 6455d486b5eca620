"""What the exported forecaster takes and returns (`rnnkit export RUN_DIR`).

Every format has one signature (SavedModel `forecast`, LiteRT / ONNX file `model`):

    window      float32 (batch, data.window, 3): the features of the last `window`
                trading days, oldest first, in the order of
                `rnnkit_recipes.stock.data.FEATURES` (return_pct, range_pct,
                volume_pct; `compute_features` makes them from a price table). Raw
                values: the model scales them itself (its Normalization layer holds
                the training split's mean and variance).
    last_close  float32 (batch,): the close of the window's last day.
 ->
    log_return_pct  float32 (batch, data.horizon): the forecast log returns of the
                    next `horizon` days, in percent (what the network predicts).
    close           float32 (batch, data.horizon): the forecast closes,
                    last_close * exp(cumsum(log_return_pct) / 100).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import keras
    from rnnkit_recipes.stock.config import StockConfig

    from rnnkit.export import ExportPlan


def export_plan(model: keras.Model, config: StockConfig, format: str) -> ExportPlan:
    from keras import ops
    from rnnkit_recipes.stock.data import FEATURES

    from rnnkit.export import Artefact, Endpoint, ExportPlan, Tensor
    from rnnkit.export.signature import SignatureModel

    window, features = model.input_shape[1], model.input_shape[2]
    horizon = model.output_shape[-1]
    inputs = [
        Tensor(
            "window",
            "float32",
            (None, window, features),
            f"features of the last {window} days, oldest first: "
            f"{', '.join(FEATURES)} (unscaled)",
        ),
        Tensor("last_close", "float32", (None,), "close of the window's last day"),
    ]
    outputs = [
        Tensor(
            "log_return_pct",
            "float32",
            (None, horizon),
            "forecast log returns of the next days, in percent",
        ),
        Tensor("close", "float32", (None, horizon), "forecast closes"),
    ]

    def forecast(values: dict) -> dict:
        returns_pct = ops.cast(model(values["window"], training=False), "float32")
        growth = ops.exp(ops.cumsum(returns_pct, axis=1) / 100.0)
        close = ops.cast(values["last_close"], "float32")[:, None] * growth
        return {"log_return_pct": returns_pct, "close": close}  # (batch, horizon)

    doc = "a window of daily features in, the forecast log returns and closes out"
    return ExportPlan(
        recipe="stock",
        endpoints=[Endpoint("forecast", forecast, inputs, outputs, doc)],
        artefacts=[
            Artefact(
                "model",
                SignatureModel(forecast, [model], name="forecaster"),
                inputs,
                outputs,
                doc,
            )
        ],
        track=[model],
        notes={"features": list(FEATURES), "window": window, "horizon": horizon},
    )
