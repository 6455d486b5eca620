"""The public bases `RecurrentCell` and `RecurrentLayer`: the cell's arguments read
through the layer as on Keras' own layers, and the cell contract of
`keras.layers.RNN` (the numerics of each path are in test_lstm, test_gru,
test_simple_rnn, test_kernels, test_xla_loops and test_batch_shards)."""

from __future__ import annotations

import keras
import numpy as np
import pytest

from rnnkit.layers import (
    GRU,
    LSTM,
    GRUCell,
    LSTMCell,
    RecurrentCell,
    RecurrentLayer,
    SimpleRNN,
    SimpleRNNCell,
)
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


@pytest.mark.parametrize(
    "cell_cls, kwargs",
    [
        (LSTMCell, {}),
        (GRUCell, {}),
        (GRUCell, {"reset_after": False}),
        (SimpleRNNCell, {}),
    ],
)
def test_a_cell_in_bfloat16_runs_its_gates_in_float32(cell_cls, kwargs):
    """A cell computing in bfloat16 runs its products in bfloat16 and its
    activations and gate arithmetic in float32 (`activation_dtype`): the gates come
    out in float32, the new state is float32 arithmetic rather than bfloat16 values
    cast up, and both stay near the float32 cell's with the same weights."""
    from keras import ops

    x = np.random.RandomState(0).randn(4, 3).astype("float32")
    h = (0.5 * np.random.RandomState(1).randn(4, 8)).astype("float32")
    states = [
        ops.convert_to_tensor(s) for s in ([h, -h] if cell_cls is LSTMCell else [h])
    ]
    cells = {}
    for policy in ("float32", "mixed_bfloat16"):
        cells[policy] = cell_cls(8, dtype=policy, **kwargs)
        cells[policy].build((4, 3))
    cells["mixed_bfloat16"].set_weights(cells["float32"].get_weights())
    assert cells["mixed_bfloat16"].compute_dtype == "bfloat16"
    # The step as the layers' loops run it: states carried in float32.
    (_, expected), (_, found) = (
        cell.step(
            cell.augment_inputs(ops.cast(x, cell.compute_dtype)),
            states,
            cell.gate_weights(),
        )
        for cell in cells.values()
    )
    state = np.asarray(ops.convert_to_numpy(found[0]))
    assert keras.backend.standardize_dtype(found[0].dtype) == "float32"
    rounded = ops.convert_to_numpy(ops.cast(ops.cast(found[0], "bfloat16"), "float32"))
    assert np.any(state != rounded)  # not bfloat16 values
    np.testing.assert_allclose(state, ops.convert_to_numpy(expected[0]), atol=2e-2)
    if hasattr(cell_cls, "gate_activations"):
        gates = cells["mixed_bfloat16"].gate_activations(x, states)
        reference = cells["float32"].gate_activations(x, states)
        for name, value in gates.items():
            assert keras.backend.standardize_dtype(value.dtype) == "float32", name
            np.testing.assert_allclose(
                ops.convert_to_numpy(value),
                ops.convert_to_numpy(reference[name]),
                atol=2e-2,
                err_msg=name,
            )


@pytest.mark.skipif(
    keras.backend.backend() != "tensorflow", reason="a TensorFlow CPU choice"
)
@pytest.mark.parametrize(
    "bfloat16, training, masked",
    [
        ("AMX", True, False),
        ("AMX", True, True),  # the backward pass's masking, in bfloat16
        ("AMX", False, False),
        ("AVX512_BF16", True, False),
        ("AVX512_BF16", False, False),
        (None, True, False),
        (None, False, False),
    ],
    ids=["AMX-training", "AMX-training-masked", "AMX-inference",
         "AVX512_BF16-training", "AVX512_BF16-inference", "none-training",
         "none-inference"],
)  # fmt: skip
@pytest.mark.parametrize("layer_cls", [LSTM, GRU, SimpleRNN])
def test_under_mixed_bfloat16_a_large_step_runs_in_bfloat16_on_a_cpu_that_has_it(
    layer_cls, bfloat16, training, masked, monkeypatch
):
    """Per call: on a CPU with bfloat16 matrix instructions (AMX, AVX512_BF16) a step
    of enough units and rows for that CPU runs the loop in bfloat16, uncompiled (in
    training with the hand-written backward pass in bfloat16), near Keras' own
    float32 layer with the same weights: outputs and the gradients of the inputs and
    every weight; the cell is back in float32 after the call. A smaller batch or a
    narrower layer, or a CPU without them, keeps the float32 loop."""
    import tensorflow as tf

    from rnnkit.layers import _kernels, calibration

    if tf.config.get_visible_devices("GPU"):
        pytest.skip("a GPU is visible: the loop computes in bfloat16 there")
    machine = {**calibration.machine(), "bfloat16": bfloat16}
    monkeypatch.setattr(calibration, "machine", lambda: machine)
    units, rows = 8, 4  # a batch of 4 runs in one loop (`batch_shards`)
    # Any set of this CPU's lets a call through; the second asks for more units than
    # this layer has, the third for more gates than any cell, so the batch of
    # rows // 2 below keeps the float32 loop. The other CPU's sets let nothing
    # through.
    beyond = ({"units": 2 * units, "rows": 1}, {"units": 1, "rows": 1, "gates": 5})
    least = ({"units": units, "rows": rows}, *beyond)
    sets = {"AMX": "AMX_BFLOAT16", "AVX512_BF16": "AVX512_BFLOAT16"}

    def allow(least):
        for kind, name in sets.items():
            mine = least if kind == bfloat16 else beyond
            monkeypatch.setattr(_kernels, f"{name}_TRAINING", mine)
            monkeypatch.setattr(_kernels, f"{name}_INFERENCE", mine)

    allow(least)
    previous = keras.config.dtype_policy()
    try:
        keras.config.set_dtype_policy("mixed_bfloat16")
        layer = layer_cls(units, return_sequences=True, seed=1)
    finally:
        keras.config.set_dtype_policy(previous)
    # Keras' own layer with the same weights: a reference outside rnnkit's loops.
    reference = getattr(keras.layers, layer_cls.__name__)(units, return_sequences=True)
    x = np.random.RandomState(0).randn(rows, 6, 3).astype("float32")
    layer.build(x.shape)
    reference.build(x.shape)
    reference.set_weights(layer.get_weights())
    upstream = np.random.RandomState(1).randn(rows, 6, units).astype("float32")
    # Rows padded on the right (4 and 3 steps of 6) and on the left (4 of 6).
    steps = np.arange(6)
    padded = np.stack([steps < 6, steps < 4, steps >= 2, steps < 3])
    mask = padded if masked else None

    def gradients(run_layer, inputs, dtype, weights):
        inputs = tf.constant(inputs, dtype)
        with tf.GradientTape() as tape:
            tape.watch(inputs)
            outputs = run_layer(inputs)
            if mask is not None:
                outputs = outputs * tf.cast(
                    mask[: inputs.shape[0], :, None], outputs.dtype
                )
            loss = tf.reduce_sum(
                tf.cast(outputs, "float32") * upstream[: inputs.shape[0]]
            )
        return outputs, tape.gradient(loss, [inputs, *weights])

    expected, expected_gradients = gradients(
        lambda v: reference(v, mask=mask, training=training),
        x,
        "float32",
        reference.trainable_weights,
    )
    for batch in (rows, rows // 2):
        outputs, found = gradients(
            tf.function(
                lambda v: layer(
                    v,
                    mask=None if mask is None else mask[: v.shape[0]],
                    training=training,
                )
            ),
            x[:batch],
            "bfloat16",
            layer.trainable_weights,
        )
        path = layer.execution_path
        assert layer.cell.compute_dtype == "float32"
        assert outputs.dtype == tf.bfloat16
        np.testing.assert_allclose(np.float32(outputs), expected[:batch], atol=2e-2)
        if batch == rows:  # the inputs' gradient, then each weight's
            for gradient, reference_gradient in zip(
                found, expected_gradients, strict=True
            ):
                scale = float(tf.reduce_max(tf.abs(reference_gradient)))
                np.testing.assert_allclose(
                    np.float32(gradient), reference_gradient, atol=0.05 * scale, rtol=0
                )
        in_bfloat16 = bfloat16 is not None and batch == rows
        assert ("in bfloat16 under mixed_bfloat16" in path) == in_bfloat16, path
        assert ("in float32 under mixed_bfloat16" in path) != in_bfloat16, path
        if in_bfloat16:
            assert "XLA-compiled" not in path
            assert ("hand-written BPTT" in path) == training, path
            # The loop rounds in bfloat16: not the float32 loop's outputs, cast.
            float32_loop = tf.cast(tf.cast(expected[:batch], "bfloat16"), "float32")
            assert np.abs(np.float32(outputs) - float32_loop).max() > 0
    # A narrower layer than the least units keeps the float32 loop at any batch.
    allow(({"units": units + 1, "rows": rows}, *beyond))
    if not masked:
        tf.function(lambda v: layer(v, training=training))(tf.constant(x, "bfloat16"))
        assert "in float32 under mixed_bfloat16" in layer.execution_path
