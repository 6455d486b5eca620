"""The XLA-compiled time loops of the recurrent layers (`jit_compile`).

On TensorFlow the generic loop runs compiled by XLA where that was measured to pay
(`cell.xla_pays`), on a CPU, in traced calls with a static number of steps;
`jit_compile=True` forces it and `False` keeps the plain loop. Whatever runs, the
outputs and the gradients must be the same: the compiled training loop is the
hand-written backward pass of `_bptt` in two XLA functions, and the compiled
inference loop takes its gradient by differentiating the plain loop run again.
"""

from __future__ import annotations

import keras
import numpy as np
import pytest

from rnnkit.layers import GRU, LSTM, SimpleRNN
from rnnkit.testing import recurrent as checks
from tests.layers import recurrent_checks as internal

LAYERS = {"GRU": (GRU, 1), "LSTM": (LSTM, 2), "SimpleRNN": (SimpleRNN, 1)}
TF_ONLY = pytest.mark.skipif(
    keras.backend.backend() != "tensorflow", reason="the loops are compiled on TF"
)
XLA = "XLA-compiled"


def _pair(name, **options):
    """The same layer with jit_compile True and False, with the same weights."""
    layer_cls, _ = LAYERS[name]
    return internal.same_weights_pair(
        layer_cls,
        {"jit_compile": True},
        {"jit_compile": False},
        checks.random_inputs(11),
        **options,
    )


@TF_ONLY
@pytest.mark.parametrize("name", LAYERS)
@pytest.mark.parametrize(
    ("training", "mask_kind", "options"),
    [
        (True, "right", {"return_sequences": True, "return_state": True}),
        (True, "left", {"go_backwards": True, "return_state": True}),
        (True, None, {"return_sequences": True, "dropout": 0.3}),
        (False, "empty_row", {"return_sequences": True, "return_state": True}),
        (False, None, {"go_backwards": True}),
    ],
)
def test_compiled_loop_equals_the_plain_loop(name, training, mask_kind, options):
    compiled, plain = _pair(name, **options)
    _, num_states = LAYERS[name]
    rng = np.random.RandomState(5)
    kwargs = {
        "training": training,
        "initial_state": [
            rng.randn(checks.BATCH, checks.UNITS).astype("float32")
            for _ in range(num_states)
        ],
    }
    if mask_kind:
        kwargs["mask"] = checks.padding_mask(mask_kind)
    results = {}
    for layer in (compiled, plain):
        layer.cell.seed_generator.state.assign([2, 0])  # the same dropout masks
        results[layer.jit_compile] = checks.outputs_and_gradients(
            layer, checks.random_inputs(12), **kwargs
        )
    assert XLA in compiled.execution_path, compiled.execution_path
    assert XLA not in plain.execution_path, plain.execution_path
    if training:
        assert internal.HAND_WRITTEN in compiled.execution_path
    internal.assert_same_results(
        compiled.trainable_variables, results[True], results[False]
    )


@TF_ONLY
@pytest.mark.parametrize("name", LAYERS)
@pytest.mark.parametrize("training", [True, False])
def test_default_compiles_where_it_pays_in_traced_calls_of_static_length(
    name, training
):
    import tensorflow as tf

    layer_cls, _ = LAYERS[name]
    layer = layer_cls(checks.UNITS)
    x = checks.random_inputs(3)
    expected = checks.as_list(layer(x, training=training))
    # An eager call is a one-off: compiling it would cost more than it saves.
    assert XLA not in layer.execution_path, layer.execution_path

    def call(inputs):
        return layer(inputs, training=training)

    static = tf.function(call)(x)
    assert (XLA in layer.execution_path) == layer.cell.xla_pays(
        training, batch=x.shape[0]
    )
    # Batches padded to their own length: compiling each length once would cost
    # more than it saves, so the plain loop runs.
    signature = [tf.TensorSpec((None, None, checks.FEATURES), "float32")]
    any_length = tf.function(call, input_signature=signature)(x)
    assert XLA not in layer.execution_path, layer.execution_path
    for outputs in (static, any_length):
        checks.assert_close(checks.as_list(outputs)[0], expected[0])


def test_in_one_loop_gru_compiles_both_simple_rnn_inference_lstm_small_steps():
    assert GRU(512).cell.xla_pays(True) and GRU(8).cell.xla_pays(False)
    assert SimpleRNN(8).cell.xla_pays(False) and not SimpleRNN(8).cell.xla_pays(True)
    # The LSTM alone in one loop: compiled for a small step (batch x units), where
    # the plain loop's per-operation cost dominates, both ways; not for a large one
    # or a batch size not known when traced.
    for training in (True, False):
        assert LSTM(256).cell.xla_pays(training, batch=1)
        assert LSTM(512).cell.xla_pays(training, batch=16)
        assert not LSTM(256).cell.xla_pays(training, batch=64)
        assert not LSTM(512).cell.xla_pays(training, batch=32)
        assert not LSTM(64).cell.xla_pays(training)


@TF_ONLY
def test_a_cell_whose_xla_pays_does_not_take_the_batch_still_decides(monkeypatch):
    import tensorflow as tf

    from rnnkit.layers import GRUCell

    # As a cell of one's own written before `batch` existed overrides it.
    monkeypatch.setattr(
        GRUCell, "xla_pays", lambda self, training, side_by_side=False: False
    )
    layer = GRU(4, batch_shards=1)
    tf.function(lambda inputs: layer(inputs))(checks.random_inputs(1, batch=2))
    assert layer.execution_path.startswith("generic loop")
    assert XLA not in layer.execution_path, layer.execution_path


@TF_ONLY
def test_a_batch_of_one_compiles_the_lstm_loop_and_a_large_one_does_not():
    import tensorflow as tf

    for batch, compiled in ((1, True), (64, False)):
        layer = LSTM(256, batch_shards=1)
        x = np.random.default_rng(0).standard_normal((batch, 5, 3), dtype="float32")
        tf.function(lambda inputs, layer=layer: layer(inputs))(x)
        assert (XLA in layer.execution_path) == compiled, layer.execution_path


@pytest.mark.parametrize("name", LAYERS)
@pytest.mark.parametrize("training", [True, False])
def test_beside_other_loops_every_layer_compiles(name, training):
    layer_cls, _ = LAYERS[name]
    assert layer_cls(8).cell.xla_pays(training, side_by_side=True)


@TF_ONLY
def test_the_stock_recipes_lstms_compile_where_their_batch_is_split(monkeypatch):
    """`rnnkit run stock`'s layers on two cores: two LSTM(32) over windows of 30 days
    of 3 features, batch 64. `fit` traces training for a batch size unknown until it
    runs (each epoch ends on a smaller batch): one plain loop. Validation and
    prediction, traced for a known batch size: split in two and compiled, measured
    end to end not to lose (docs/performance.md, "One loop per core")."""
    import tensorflow as tf

    from rnnkit.layers import _batch_shards

    monkeypatch.setattr(_batch_shards, "_inter_op_threads", lambda: 2)
    first, second = LSTM(32, return_sequences=True), LSTM(32)
    x = np.random.default_rng(0).standard_normal((64, 30, 3)).astype("float32")

    def paths(batch, training):
        signature = [tf.TensorSpec((batch, 30, 3), "float32")]
        tf.function(
            lambda x: second(first(x, training=training), training=training),
            input_signature=signature,
        )(x)
        return [layer.execution_path.split(": ")[0] for layer in (first, second)]

    assert paths(None, training=True) == ["generic loop, hand-written BPTT"] * 2
    split = "batch in 2 shards side by side"
    assert paths(64, training=False) == [f"generic loop, XLA-compiled, {split}"] * 2


@TF_ONLY
def test_an_lstm_beside_other_loops_compiles_by_default(monkeypatch):
    import tensorflow as tf

    from rnnkit.layers import _batch_shards

    monkeypatch.setattr(_batch_shards, "_inter_op_threads", lambda: 2)
    layer = LSTM(checks.UNITS)
    tf.function(lambda x: layer(x, training=True))(checks.random_inputs(1, batch=16))
    assert XLA in layer.execution_path and "2 shards" in layer.execution_path
    # Alone in one loop (a batch size not known when traced) it does not.
    x = checks.random_inputs(1, batch=16)
    signature = [tf.TensorSpec((None, *x.shape[1:]), "float32")]
    tf.function(lambda x: layer(x, training=True), input_signature=signature)(x)
    assert XLA not in layer.execution_path and "shards" not in layer.execution_path
    # Each direction of a Bidirectional runs beside the other.
    both = keras.layers.Bidirectional(LSTM(checks.UNITS))
    tf.function(lambda x: both(x, training=True))(checks.random_inputs(1, batch=8))
    for direction in (both.forward_layer, both.backward_layer):
        assert XLA in direction.execution_path, direction.execution_path


@TF_ONLY
def test_jit_compile_true_on_the_autodiff_path_is_a_clear_error():
    layer = GRU(checks.UNITS, reset_after=False, jit_compile=True)
    x = checks.random_inputs(4)
    layer(x)  # inference compiles
    assert XLA in layer.execution_path
    with pytest.raises(ValueError, match="jit_compile=True cannot be honoured"):
        layer(x, training=True)


@TF_ONLY
def test_jit_compile_true_does_not_stop_a_call_that_cudnn_runs(monkeypatch):
    """The error is for the generic loop: a training call that cuDNN takes (on a
    GPU, here simulated) does not raise, though its autodiff loop could not be
    compiled."""
    from rnnkit._keras_private import backend

    calls = []

    def fake_lstm(sequences, h0, c0, mask, *weights, **kwargs):
        calls.append(kwargs)
        zeros = h0 * 0
        return zeros, sequences[:, :, :1] * 0 + zeros[:, None, :1], [zeros, c0 * 0]

    layer = LSTM(checks.UNITS, jit_compile=True)
    x = checks.random_inputs(4)
    layer(x)
    layer._bptt_blockers = lambda: ["forced by the test"]
    monkeypatch.setattr(backend, "cudnn_ok", lambda *a, **k: True)
    monkeypatch.setattr(backend, "lstm", fake_lstm)
    layer(x, training=True)
    assert calls and layer.execution_path == "cudnn: fused kernel"
    monkeypatch.undo()
    with pytest.raises(ValueError, match="jit_compile=True cannot be honoured"):
        layer(x, training=True)


@pytest.mark.skipif(keras.backend.backend() != "torch", reason="torch only")
def test_jit_compile_true_on_torch_is_a_clear_error():
    layer = LSTM(checks.UNITS, jit_compile=True, use_cudnn=False)
    with pytest.raises(ValueError, match="cannot be honoured: backend is torch"):
        layer(checks.random_inputs(4))
    # Not for a call that PyTorch's own kernel runs: it compiles nothing either.
    fused = LSTM(checks.UNITS, jit_compile=True)
    fused(checks.random_inputs(4))
    assert fused.execution_path == f"{internal.TORCH_KERNEL}lstm"


@pytest.mark.parametrize("name", LAYERS)
def test_jit_compile_is_checked_and_saved(name):
    layer_cls, _ = LAYERS[name]
    with pytest.raises(ValueError, match="received jit_compile='yes'"):
        layer_cls(3, jit_compile="yes")
    layer = layer_cls(3, jit_compile=False)
    assert layer.get_config()["jit_compile"] is False
    assert layer_cls.from_config(layer.get_config()).jit_compile is False
    assert layer_cls(3).get_config()["jit_compile"] is None


@TF_ONLY
def test_layers_of_one_config_share_the_compiled_loops():
    """Models built alike (tuning trials, a rebuilt model) compile once per shape."""
    import tensorflow as tf

    from rnnkit.layers import _bptt, _xla

    x = checks.random_inputs(3)
    first, second = (GRU(checks.UNITS, jit_compile=True, seed=1) for _ in range(2))
    other = GRU(checks.UNITS + 1, jit_compile=True, seed=1)
    forward, _ = _bptt._loops(first.cell, True)
    assert _bptt._loops(second.cell, True)[0] is forward
    assert _bptt._loops(other.cell, True)[0] is not forward
    before = forward.experimental_get_tracing_count()
    for layer in (first, second):
        tf.function(lambda inputs, layer=layer: layer(inputs, training=True))(x)
    assert forward.experimental_get_tracing_count() - before <= 1
    # A lambda, or a subclass from elsewhere (its config may not hold all it is),
    # keeps a function of its own: made from the cell itself, once.
    custom = GRU(checks.UNITS, activation=lambda a: tf.tanh(a), jit_compile=True)

    class OwnCell(type(first.cell)):
        pass

    own = OwnCell(checks.UNITS)
    for cell in (custom.cell, own):
        made = []
        function = _xla.shared_function(
            cell, "test", lambda c, made=made: made.append(c) or c
        )
        assert function is _xla.shared_function(cell, "test", lambda c: object())
        assert made == [cell]


@TF_ONLY
@pytest.mark.parametrize("training", [True, False])
def test_stateful_layer_carries_its_state_through_the_compiled_loop(training):
    import tensorflow as tf

    compiled, plain = _pair("GRU", stateful=True, return_sequences=True)
    x = checks.random_inputs(13)
    for layer in (compiled, plain):
        layer.reset_state()
    outputs = {}
    for layer in (compiled, plain):
        call = tf.function(lambda inputs, layer=layer: layer(inputs, training=training))
        outputs[layer.jit_compile] = [call(x).numpy() for _ in range(2)]
    assert XLA in compiled.execution_path
    for first, second in zip(outputs[True], outputs[False], strict=True):
        checks.assert_close(first, second)
    # The second batch started from the first one's final state.
    assert np.abs(outputs[True][1] - outputs[True][0]).max() > 1e-3
