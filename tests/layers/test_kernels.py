"""The cuDNN hand-off of rnnkit's LSTM and GRU with masks, on a simulated GPU.

cuDNN takes right-padded masks only (Keras' own check asserts it), so a left-padded
batch or a fully masked row must take the generic loop, eagerly and inside a
tf.function, where the mask is known per batch only.
"""

from __future__ import annotations

import keras
import numpy as np
import pytest

from rnnkit.layers import GRU, LSTM
from rnnkit.testing import recurrent as checks
from tests.layers import recurrent_checks as internal

pytestmark = pytest.mark.skipif(
    keras.backend.backend() != "tensorflow", reason="cuDNN hand-off is TF-only"
)

RIGHT_PADDED = np.array([[1, 1, 1, 1, 1, 1], [1, 1, 1, 0, 0, 0], [1, 1, 0, 0, 0, 0]])
LEFT_PADDED = RIGHT_PADDED[:, ::-1].copy()
FULLY_MASKED = np.array([[1, 1, 1, 1, 1, 1], [0, 0, 0, 0, 0, 0], [1, 1, 0, 0, 0, 0]])


@pytest.fixture(params=["lstm", "gru"])
def simulated_gpu(request, monkeypatch):
    """A layer class whose cuDNN stand-in returns zeros (recognisable) and records
    each call, with a GPU reported as visible."""
    from rnnkit._keras_private import backend

    calls = []

    def fake_kernel(sequences, *states_and_weights, **kwargs):
        calls.append(kwargs)
        import tensorflow as tf

        units = checks.UNITS
        batch = tf.shape(sequences)[0]
        last = tf.zeros((batch, units))
        outputs = tf.zeros((batch, tf.shape(sequences)[1], units))
        states = [last, last] if request.param == "lstm" else [last]
        return last, outputs, states

    monkeypatch.setattr(backend, "cudnn_ok", lambda *a, **k: True)
    monkeypatch.setattr(backend, request.param, fake_kernel)
    return {"lstm": LSTM, "gru": GRU}[request.param], calls, monkeypatch


def _generic(layer_cls, layer, x, mask):
    """The same layer's output through the generic loop (no GPU visible)."""
    reference = layer_cls(checks.UNITS, return_sequences=True)
    reference(x)
    reference.set_weights(layer.get_weights())
    return keras.ops.convert_to_numpy(reference(x, mask=mask))


@pytest.mark.parametrize(
    ("mask", "reason"),
    [(LEFT_PADDED, "left-padded mask"), (FULLY_MASKED, "mask with a fully masked row")],
)
def test_eager_mask_cudnn_cannot_take_runs_the_generic_loop(
    simulated_gpu, mask, reason
):
    layer_cls, calls, monkeypatch = simulated_gpu
    x = checks.random_inputs(3)
    layer = layer_cls(checks.UNITS, return_sequences=True)
    outputs = keras.ops.convert_to_numpy(layer(x, mask=mask.astype(bool)))
    assert not calls
    assert internal.is_generic_path(layer.execution_path, reason)
    monkeypatch.undo()
    np.testing.assert_allclose(
        outputs, _generic(layer_cls, layer, x, mask.astype(bool))
    )


def test_eager_right_padded_mask_goes_to_cudnn(simulated_gpu):
    layer_cls, calls, _ = simulated_gpu
    layer = layer_cls(checks.UNITS, return_sequences=True)
    outputs = layer(checks.random_inputs(3), mask=RIGHT_PADDED.astype(bool))
    assert len(calls) == 1 and layer.execution_path == "cudnn: fused kernel"
    assert not np.any(keras.ops.convert_to_numpy(outputs))


def test_inside_a_tf_function_each_batch_chooses(simulated_gpu):
    import tensorflow as tf

    layer_cls, _, monkeypatch = simulated_gpu
    x = checks.random_inputs(3)
    layer = layer_cls(checks.UNITS, return_sequences=True)
    layer(x)
    call = tf.function(lambda inputs, mask: layer(inputs, mask=mask))
    on_cudnn = call(x, RIGHT_PADDED.astype(bool)).numpy()
    on_generic = call(x, LEFT_PADDED.astype(bool)).numpy()
    assert layer.execution_path.startswith("per batch in this trace: cudnn")
    assert "left-padded mask or fully masked row otherwise" in layer.execution_path
    assert not np.any(on_cudnn)  # the stand-in kernel ran for the right-padded batch
    monkeypatch.undo()
    expected = _generic(layer_cls, layer, x, LEFT_PADDED.astype(bool))
    np.testing.assert_allclose(on_generic, expected, atol=1e-6)
