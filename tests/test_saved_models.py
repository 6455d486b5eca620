"""`.keras` files saved by an earlier rnnkit load and predict the same."""

import json
from pathlib import Path

import pytest

from tests import preloaded

FIXTURES = Path(__file__).parent / "fixtures" / "saved_models"
FAMILIES = ("stock", "sentiment", "translation", "language_model", "captioning")

# Loads each model in a fresh process that imports only rnnkit (its registered Keras
# names must be enough) and reports the largest difference from the saved outputs.
SCRIPT = """
import json, sys
import numpy as np
import keras
import rnnkit.layers, rnnkit.losses, rnnkit.models, rnnkit.optimizers
from tests.fixtures.saved_models.make import unflatten

errors = {}
for name in sys.argv[1:]:
    arrays = dict(np.load(f"{FIXTURES}/{name}.npz"))
    inputs = unflatten({k: v for k, v in arrays.items() if k.startswith("x")})
    expected = [v for k, v in sorted(arrays.items()) if k.startswith("y")]
    model = keras.saving.load_model(f"{FIXTURES}/{name}.keras", safe_mode=True)
    outputs = keras.tree.flatten(model(inputs, training=False))
    assert len(outputs) == len(expected), (name, len(outputs), len(expected))
    errors[name] = max(
        float(np.max(np.abs(np.asarray(out) - want)))
        for out, want in zip(outputs, expected)
    )
print(json.dumps(errors))
"""


@pytest.fixture(scope="module")
def differences():
    result = preloaded.run(
        ["-c", SCRIPT.replace("{FIXTURES}", str(FIXTURES)), *FAMILIES],
        cwd=FIXTURES.parents[2], timeout=600,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("family", FAMILIES)
def test_model_saved_before_the_restructuring_predicts_the_same(differences, family):
    assert differences[family] < 1e-5
