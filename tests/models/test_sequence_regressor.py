"""rnnkit.models.sequence_regressor: shapes, argument checks, safe-mode reload."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from rnnkit.models.sequence_regressor import build_sequence_regressor


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
    result = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr[-2000:]
