"""rnnkit.models.sequence_regressor: shapes, argument checks, safe-mode reload."""

from __future__ import annotations

import numpy as np
import pytest

from rnnkit.models.sequence_regressor import build_sequence_regressor
from tests import preloaded


@pytest.mark.parametrize("cell_type", ["lstm", "gru"])
def test_shapes_and_layers(cell_type):
    inputs = np.random.default_rng(0).normal(size=(64, 12, 3)).astype("float32")
    model = build_sequence_regressor(
        inputs, outputs=4, cell_type=cell_type, units=8, num_layers=2, dropout=0.1
    )
    assert model.output_shape == (None, 4)
    recurrent = [layer for layer in model.layers if layer.name.startswith(cell_type)]
    assert [type(layer).__module__ for layer in recurrent] == [
        f"rnnkit.layers.{cell_type}"
    ] * 2
    assert model.predict(inputs[:5], verbose=0).shape == (5, 4)


@pytest.mark.parametrize("cell_type", ["lstm", "gru"])
def test_computes_normalize_then_stack_then_dense(cell_type):
    """Against an independent stack: numpy scaling with the training statistics, the
    Keras built-in layers with the model's weights, and the Dense layer in numpy."""
    import keras

    rng = np.random.default_rng(2)
    training = rng.normal(3.0, 2.0, size=(64, 12, 3)).astype("float32")
    model = build_sequence_regressor(
        training, outputs=4, cell_type=cell_type, units=8, num_layers=2
    )
    builtin = {"lstm": keras.layers.LSTM, "gru": keras.layers.GRU}[cell_type]
    first, second = builtin(8, return_sequences=True), builtin(8)
    x = rng.normal(size=(5, 12, 3)).astype("float32")
    flat = training.reshape(-1, 3)
    scaled = (x - flat.mean(axis=0)) / np.sqrt(flat.var(axis=0))
    first(scaled), second(first(scaled))
    first.set_weights(model.get_layer(f"{cell_type}_1").get_weights())
    second.set_weights(model.get_layer(f"{cell_type}_2").get_weights())
    hidden = keras.ops.convert_to_numpy(second(first(scaled)))
    kernel, bias = model.get_layer("forecast").get_weights()
    np.testing.assert_allclose(
        model.predict(x, verbose=0), hidden @ kernel + bias, atol=1e-5
    )


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"cell_type": "rnn"}, "cell_type"),
        ({"units": 0}, "units"),
        ({"num_layers": 0}, "num_layers"),
        ({"outputs": 0}, "outputs"),
        ({"dropout": 1.0}, "dropout"),
    ],
)
def test_bad_arguments(kwargs, message):
    arguments = {"outputs": 1, **kwargs}
    with pytest.raises(ValueError, match=message):
        build_sequence_regressor(np.zeros((4, 5, 2)), **arguments)


def test_reloads_in_safe_mode_in_a_fresh_process(tmp_path):
    inputs = np.random.default_rng(1).normal(size=(32, 6, 3)).astype("float32")
    model = build_sequence_regressor(inputs, outputs=2, cell_type="gru", units=4)
    path = tmp_path / "model.keras"
    model.save(path)
    np.save(tmp_path / "inputs.npy", inputs)
    np.save(tmp_path / "expected.npy", model.predict(inputs, verbose=0))
    code = (
        "import sys, numpy as np, keras, rnnkit.layers\n"
        "folder = sys.argv[1]\n"
        "model = keras.saving.load_model(folder + '/model.keras', safe_mode=True)\n"
        "out = model.predict(np.load(folder + '/inputs.npy'), verbose=0)\n"
        "expected = np.load(folder + '/expected.npy')\n"
        "np.testing.assert_allclose(out, expected, atol=1e-6)\n"
    )
    result = preloaded.run(["-c", code, str(tmp_path)])
    assert result.returncode == 0, result.stderr[-2000:]
