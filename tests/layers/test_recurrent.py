"""The public bases `RecurrentCell` and `RecurrentLayer`: the cell's arguments read
through the layer as on Keras' own layers, and the cell contract of
`keras.layers.RNN` (the numerics of each path are in test_lstm, test_gru,
test_simple_rnn, test_kernels, test_xla_loops and test_batch_shards)."""

from __future__ import annotations

import keras
import numpy as np
import pytest

from rnnkit.layers import GRU, LSTM, RecurrentCell, RecurrentLayer, SimpleRNN
from rnnkit.testing._reload import check_reloads_in_fresh_process

COMMON = (
    "units",
    "activation",
    "use_bias",
    "kernel_initializer",
    "recurrent_initializer",
    "bias_initializer",
    "kernel_regularizer",
    "recurrent_regularizer",
    "bias_regularizer",
    "kernel_constraint",
    "recurrent_constraint",
    "bias_constraint",
    "dropout",
    "recurrent_dropout",
    "seed",
)
OWN = {
    LSTM: ("recurrent_activation", "unit_forget_bias"),
    GRU: ("recurrent_activation", "reset_after"),
    SimpleRNN: (),
}


@pytest.mark.parametrize("layer_cls", [LSTM, GRU, SimpleRNN])
def test_the_layer_reads_its_cells_arguments_as_keras_layers_do(layer_cls):
    layer = layer_cls(5, dropout=0.25, seed=3)
    for name in COMMON + OWN[layer_cls]:
        assert getattr(layer, name) is getattr(layer.cell, name), name
    assert (layer.units, layer.dropout, layer.seed) == (5, 0.25, 3)
    for name in {"recurrent_activation", "unit_forget_bias", "reset_after"} - set(
        OWN[layer_cls]
    ):
        assert not hasattr(layer, name), name
    with pytest.raises(AttributeError, match="set it on `layer.cell`"):
        layer.units = 7
    assert layer.cell.units == 5


def test_the_public_bases_are_the_layers_bases():
    for layer_cls in (LSTM, GRU, SimpleRNN):
        assert issubclass(layer_cls, RecurrentLayer)
        assert issubclass(layer_cls.cell_class, RecurrentCell)
        assert isinstance(layer_cls(2).cell, layer_cls.cell_class)


@pytest.mark.parametrize("layer_cls", [LSTM, GRU, SimpleRNN])
def test_a_cell_keeps_the_keras_cell_contract(layer_cls):
    cell = layer_cls.cell_class(4)
    sizes = cell.state_size if isinstance(cell.state_size, list) else [cell.state_size]
    assert cell.output_size == 4 and sizes == [4] * len(sizes)
    states = cell.get_initial_state(batch_size=3)
    assert [tuple(state.shape) for state in states] == [(3, 4)] * len(sizes)
    outputs = keras.layers.RNN(cell, return_sequences=True)(np.ones((3, 5, 2)))
    assert tuple(outputs.shape) == (3, 5, 4)


@pytest.mark.parametrize(
    ("saved_under", "loaded_under"),
    [("mixed_bfloat16", "float32"), ("mixed_float16", "mixed_bfloat16")],
)
def test_a_mixed_precision_model_reloads_in_a_fresh_process(
    saved_under, loaded_under, tmp_path
):
    """A model of the three layers built under a mixed policy keeps it when it is
    reloaded in a fresh process under another global policy: same outputs."""
    previous = keras.config.dtype_policy()
    keras.config.set_dtype_policy(saved_under)
    try:
        model = keras.Sequential(
            [
                keras.Input((None, 3)),
                LSTM(4, return_sequences=True),
                GRU(4, return_sequences=True),
                SimpleRNN(4),
                keras.layers.Dense(1, dtype="float32"),
            ]
        )
    finally:
        keras.config.set_dtype_policy(previous)
    assert model.layers[0].compute_dtype == saved_under.removeprefix("mixed_")
    inputs = np.random.RandomState(0).randn(2, 5, 3).astype("float32")
    check_reloads_in_fresh_process(
        model, inputs, tmp_path / "mixed.keras", policy=loaded_under
    )


@pytest.mark.skipif(
    keras.backend.backend() != "tensorflow", reason="a TensorFlow CPU choice"
)
@pytest.mark.parametrize("layer_cls", [LSTM, GRU, SimpleRNN])
def test_under_mixed_bfloat16_on_a_cpu_the_loop_runs_in_float32(layer_cls):
    """bfloat16 in, bfloat16 out, float32 inside: the hand-written backward pass and
    float32 speed (docs/performance.md, "Mixed precision on a CPU")."""
    import tensorflow as tf

    if tf.config.get_visible_devices("GPU"):
        pytest.skip("a GPU is visible: the loop computes in bfloat16 there")
    previous = keras.config.dtype_policy()
    try:
        keras.config.set_dtype_policy("mixed_bfloat16")
        layer = layer_cls(4, dropout=0.25, seed=1)  # input dropout: a mask in float32
        keras.config.set_dtype_policy("mixed_float16")
        float16_layer = layer_cls(4)
    finally:
        keras.config.set_dtype_policy(previous)
    assert layer.compute_dtype == "bfloat16"
    assert layer.cell.compute_dtype == "float32"
    assert float16_layer.cell.compute_dtype == "float16"
    x = tf.constant(np.random.RandomState(0).randn(3, 5, 2), "bfloat16")
    with tf.GradientTape() as tape:
        tape.watch(x)
        outputs = tf.function(lambda x: layer(x, training=True))(x)
    assert outputs.dtype == tf.bfloat16
    assert tape.gradient(outputs, x).dtype == tf.bfloat16
    assert "in float32 under mixed_bfloat16" in layer.execution_path
    assert "hand-written BPTT" in layer.execution_path


@pytest.mark.skipif(
    keras.backend.backend() != "tensorflow", reason="a TensorFlow CPU choice"
)
@pytest.mark.parametrize("training", [True, False], ids=["training", "inference"])
@pytest.mark.parametrize("layer_cls", [LSTM, GRU, SimpleRNN])
@pytest.mark.parametrize("isa", ["AMX", "AVX-512"])
def test_under_mixed_bfloat16_a_large_step_runs_in_bfloat16_on_a_cpu_with_amx(
    isa, layer_cls, training, monkeypatch
):
    """Per call: on a CPU with AMX a step of enough rows x units (and units, in
    inference) runs the loop in bfloat16, uncompiled, near the float32 layer with the
    same weights, and the cell is back in float32 after the call; a smaller batch of
    the same layer, or a CPU without AMX, keeps the float32 loop."""
    import tensorflow as tf

    from rnnkit.layers import _kernels, calibration

    if tf.config.get_visible_devices("GPU"):
        pytest.skip("a GPU is visible: the loop computes in bfloat16 there")
    machine = {**calibration.machine(), "isa": isa}
    monkeypatch.setattr(calibration, "machine", lambda: machine)
    units, rows = 8, 4  # a batch of 4 runs in one loop (`batch_shards`)
    monkeypatch.setattr(_kernels, "AMX_BFLOAT16_TRAINING_WORK", units * rows)
    monkeypatch.setattr(_kernels, "AMX_BFLOAT16_INFERENCE_WORK", units * rows)
    monkeypatch.setattr(_kernels, "AMX_BFLOAT16_INFERENCE_UNITS", units)
    previous = keras.config.dtype_policy()
    try:
        keras.config.set_dtype_policy("mixed_bfloat16")
        layer = layer_cls(units, return_sequences=True, seed=1)
    finally:
        keras.config.set_dtype_policy(previous)
    reference = layer_cls(units, return_sequences=True, seed=1)
    x = np.random.RandomState(0).randn(rows, 6, 3).astype("float32")
    layer.build(x.shape)
    reference.build(x.shape)
    reference.set_weights(layer.get_weights())
    recurrent_kernel = layer.trainable_weights[1]
    assert recurrent_kernel.path.endswith("recurrent_kernel")

    def run(batch):
        inputs = tf.constant(x[:batch], "bfloat16")
        with tf.GradientTape() as tape:
            outputs = tf.function(lambda v: layer(v, training=training))(inputs)
            loss = tf.reduce_sum(tf.cast(outputs, "float32") ** 2)
        return outputs, tape.gradient(loss, recurrent_kernel), layer.execution_path

    with tf.GradientTape() as tape:
        expected = reference(x, training=training)
        expected_loss = tf.reduce_sum(expected**2)
    expected_gradient = tape.gradient(expected_loss, reference.trainable_weights[1])
    scale = float(tf.reduce_max(tf.abs(expected_gradient)))
    for batch in (rows, rows // 2):
        outputs, gradient, path = run(batch)
        assert layer.cell.compute_dtype == "float32"
        assert outputs.dtype == tf.bfloat16
        np.testing.assert_allclose(np.float32(outputs), expected[:batch], atol=2e-2)
        if batch == rows:
            np.testing.assert_allclose(
                gradient, expected_gradient, atol=0.05 * scale, rtol=0
            )
        in_bfloat16 = isa == "AMX" and batch == rows
        assert ("in bfloat16 under mixed_bfloat16" in path) == in_bfloat16, path
        assert ("in float32 under mixed_bfloat16" in path) != in_bfloat16, path
        if in_bfloat16:
            assert "XLA-compiled" not in path
            # The loop rounds in bfloat16: not the float32 loop's outputs, cast.
            float32_loop = tf.cast(tf.cast(expected[:batch], "bfloat16"), "float32")
            assert np.abs(np.float32(outputs) - float32_loop).max() > 0
