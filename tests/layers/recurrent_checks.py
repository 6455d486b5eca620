"""Checks shared by the SimpleRNN, LSTM and GRU test modules.

Every check runs on the active Keras backend (TensorFlow, JAX or PyTorch); gradients
come from `tf.GradientTape`, `jax.grad` on the layer's stateless call, or
`torch.autograd.grad`.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable
from dataclasses import dataclass, field

import keras
import numpy as np

from tests.served_process import ServedProcess, ServedProcesses

BATCH, STEPS, FEATURES, UNITS = 3, 6, 5, 4


def _on_cudnn() -> bool:
    """Whether the PyTorch backend runs the layers' kernels through cuDNN (a GPU)."""
    if keras.backend.backend() != "torch":
        return False
    import torch

    return torch.cuda.is_available()


# cuDNN's float32 recurrent kernels are accurate to about 2e-5 of the values against
# float64 (outputs and gradients, measured on an H200), a CPU's float32 to 1e-7.
TOLERANCE = 1e-4 if _on_cudnn() else 1e-5


@dataclass
class Family:
    name: str
    layer: type
    cell: type
    keras_layer: type
    num_states: int
    numpy_forward: Callable  # (x, weights, initial_states, mask, options) -> outs
    numpy_bptt: Callable  # (x, weights, output_weights, initial_states, options)
    parity_cases: list = field(default_factory=list)


def random_inputs(seed=0, batch=BATCH, steps=STEPS, features=FEATURES):
    return np.random.RandomState(seed).randn(batch, steps, features).astype("float32")


def as_list(outputs):
    return list(outputs) if isinstance(outputs, (list, tuple)) else [outputs]


def padding_mask(kind, batch=BATCH, steps=STEPS):
    """(batch, steps) booleans: right-padded ([1 1 1 0 0]), left-padded, or
    "empty_row": right-padded with one row fully masked."""
    lengths = np.array([steps, steps - 2, 2][:batch])
    if kind == "empty_row":  # right-padded, the last row with no step at all
        lengths[-1], kind = 0, "right"
    positions = np.arange(steps)[None, :]
    if kind == "right":
        return positions < lengths[:, None]
    return positions >= (steps - lengths)[:, None]


def outputs_and_gradients(layer, inputs, output_weights=None, **call_kwargs):
    """Outputs, gradients w.r.t. the trainable weights and the inputs of the loss
    sum_k sum(output_k * output_weights_k); output weights are drawn if not given."""
    inputs = np.asarray(inputs, dtype="float32")
    if not layer.built:
        layer(inputs, **call_kwargs)
    if output_weights is None:
        shapes = [np.shape(o) for o in as_list(layer(inputs, **call_kwargs))]
        rng = np.random.RandomState(42)
        output_weights = [rng.randn(*s).astype("float32") for s in shapes]

    if keras.backend.backend() == "jax":
        import jax
        import jax.numpy as jnp

        trainable = [v.value for v in layer.trainable_variables]
        non_trainable = [v.value for v in layer.non_trainable_variables]

        def loss_fn(trainable_values, x):
            outputs, _ = layer.stateless_call(
                trainable_values, non_trainable, x, **call_kwargs
            )
            outputs = as_list(outputs)
            # float32 products: under a mixed policy the outputs are float16/bfloat16.
            loss = sum(
                jnp.sum(o.astype("float32") * w)
                for o, w in zip(outputs, output_weights, strict=True)
            )
            return loss, outputs

        (_, outputs), (weight_grads, input_grad) = jax.value_and_grad(
            loss_fn, argnums=(0, 1), has_aux=True
        )(trainable, jnp.asarray(inputs))
    elif keras.backend.backend() == "torch":
        import torch

        x = torch_leaf(inputs)
        outputs = as_list(layer(x, **call_kwargs))
        loss = sum(
            torch.sum(o.float() * keras.ops.convert_to_tensor(w))
            for o, w in zip(outputs, output_weights, strict=True)
        )
        *weight_grads, input_grad = torch.autograd.grad(
            loss, [v.value for v in layer.trainable_variables] + [x]
        )
        outputs = [o.detach() for o in outputs]
    else:
        import tensorflow as tf

        x = tf.convert_to_tensor(inputs)
        with tf.GradientTape() as tape:
            tape.watch(x)
            outputs = as_list(layer(x, **call_kwargs))
            loss = sum(
                tf.reduce_sum(tf.cast(o, "float32") * w)
                for o, w in zip(outputs, output_weights, strict=True)
            )
        *weight_grads, input_grad = tape.gradient(loss, [*layer.trainable_variables, x])
    to_numpy = keras.ops.convert_to_numpy
    return (
        [to_numpy(o) for o in outputs],
        [to_numpy(g) for g in weight_grads],
        to_numpy(input_grad),
        output_weights,
    )


def torch_leaf(array, requires_grad=True):
    """`array` as a PyTorch tensor on the device Keras computes on (a GPU where one
    is visible), a leaf that autograd differentiates; `torch.tensor(array)` would
    stay on the CPU beside weights on the GPU."""
    return keras.ops.convert_to_tensor(array).requires_grad_(requires_grad)


def _to_numpy(value):
    # Through Keras: a PyTorch tensor in autograd or on a GPU refuses np.asarray.
    return keras.ops.convert_to_numpy(value)


def assert_close(actual, expected, tolerance=TOLERANCE, what=""):
    """Equal within `tolerance` times the larger of 1 and the reference's largest
    magnitude. A weight gradient sums products over batch and time; summed in another
    order (cuDNN on a GPU) its float32 value moves with its size (on an H200 the
    input kernels' gradients moved by 1e-5 to 7e-5)."""
    actual, expected = _to_numpy(actual), _to_numpy(expected)
    assert actual.shape == expected.shape, f"{what}: {actual.shape} != {expected.shape}"
    if not actual.size:
        return
    difference = float(np.max(np.abs(actual - expected)))
    size = float(np.max(np.abs(expected)))
    assert difference <= tolerance * max(1.0, size), (
        f"{what}: max abs diff {difference:.2e} on values up to {size:.2g}"
    )


def same_weights_pair(layer_cls, first, second, inputs, **options):
    """`layer_cls(UNITS, **first, **options)` and the same with `second`, built on
    `inputs`, with the same random weights (drawn in [-0.6, 0.6])."""
    layers = [
        layer_cls(UNITS, seed=2, **variant, **options) for variant in (first, second)
    ]
    for layer in layers:
        layer(inputs)
    for variable in layers[0].trainable_variables:
        variable.assign(np.random.RandomState(6).uniform(-0.6, 0.6, variable.shape))
    layers[1].set_weights(layers[0].get_weights())
    return tuple(layers)


def assert_same_results(variables, results, expected):
    """Two `outputs_and_gradients` results agree: outputs, the gradients of
    `variables` (the layer's trainable ones, in order) and of the inputs."""
    outputs, weight_grads, input_grad, _ = results
    expected_outputs, expected_weight_grads, expected_input_grad, _ = expected
    for k, (a, b) in enumerate(zip(outputs, expected_outputs, strict=True)):
        assert_close(a, b, what=f"output {k}")
    for variable, a, b in zip(
        variables, weight_grads, expected_weight_grads, strict=True
    ):
        assert_close(a, b, what=f"gradient of {variable.path}")
    assert_close(input_grad, expected_input_grad, what="gradient of inputs")


def check_parity_with_keras(
    family: Family, options: dict, mask_kind=None, training=False
):
    """Outputs and gradients equal the Keras built-in's, weights copied both ways.
    With `training=True` (TensorFlow) the gradients come from the hand-written
    backward pass."""
    x = random_inputs()
    call_kwargs = {"training": True} if training else {}
    if mask_kind:
        call_kwargs["mask"] = padding_mask(mask_kind)
    ours = family.layer(UNITS, **options)
    builtin = family.keras_layer(UNITS, **_keras_reference_options(family, options))
    ours(x, **call_kwargs)
    builtin(x, **call_kwargs)
    for source, target in ((builtin, ours), (ours, builtin)):
        # Both directions: fresh random weights each time, then copied across.
        for variable in source.trainable_variables:
            variable.assign(np.random.uniform(-0.5, 0.5, variable.shape))
        target.set_weights(source.get_weights())
        out_a, grads_a, dx_a, weights = outputs_and_gradients(ours, x, **call_kwargs)
        out_b, grads_b, dx_b, _ = outputs_and_gradients(
            builtin, x, weights, **call_kwargs
        )
        for k, (a, b) in enumerate(zip(out_a, out_b, strict=True)):
            assert_close(a, b, what=f"output {k}")
        for variable, a, b in zip(
            ours.trainable_variables, grads_a, grads_b, strict=True
        ):
            assert_close(a, b, what=f"gradient of {variable.path}")
        assert_close(dx_a, dx_b, what="gradient of the inputs")


def _keras_reference_options(family: Family, options: dict) -> dict:
    """The built-in's options. One exception: Keras 3.15's cuDNN LSTM on JAX (a GPU
    visible; keras-team/keras#22399) returns a `go_backwards` layer's sequence
    flipped back into input order, unlike Keras' own loop and its TensorFlow backend
    (found on an H200: 0.44 apart, equal once flipped), so there the reference is
    Keras' loop (`use_cudnn=False`)."""
    if (
        keras.backend.backend() == "jax"
        and options.get("go_backwards")
        and "use_cudnn" in inspect.signature(family.keras_layer).parameters
    ):
        return {"use_cudnn": False, **options}
    return options


def layer_weights(layer):
    return [np.asarray(w, dtype=np.float64) for w in layer.get_weights()]


def check_against_numpy(
    family: Family, options: dict, with_initial_state: bool, training=False
):
    """Forward pass and BPTT gradients against the numpy equations (no mask); with
    `training=True` (TensorFlow) through the hand-written backward pass."""
    x = random_inputs(1)
    rng = np.random.RandomState(7)
    initial = [
        rng.randn(BATCH, UNITS).astype("float32") for _ in range(family.num_states)
    ]
    layer = family.layer(UNITS, return_sequences=True, **options)
    call_kwargs = {"initial_state": initial} if with_initial_state else {}
    if training:
        call_kwargs["training"] = True
    layer(x, **call_kwargs)
    for variable in layer.trainable_variables:
        variable.assign(np.random.RandomState(3).uniform(-0.6, 0.6, variable.shape))
    outputs, grads, dx, output_weights = outputs_and_gradients(layer, x, **call_kwargs)
    weights = layer_weights(layer)
    initial64 = [s.astype(np.float64) for s in initial] if with_initial_state else None
    expected = family.numpy_forward(
        x.astype(np.float64), weights, initial64, None, options
    )
    assert_close(outputs[0], expected, what="outputs")
    expected_grads = family.numpy_bptt(
        x.astype(np.float64),
        weights,
        output_weights[0].astype(np.float64),
        initial64,
        options,
    )
    names = ["kernel", "recurrent_kernel", "bias"][: len(grads)]
    for name, grad in zip(names, grads, strict=True):
        assert_close(grad, expected_grads[name], 1e-4, what=f"d loss / d {name}")
    assert_close(dx, expected_grads["x"], 1e-4, what="d loss / d inputs")


def check_masked_against_numpy(family: Family, mask_kind: str):
    """Masked steps keep the previous state, for right- and left-padded batches."""
    x = random_inputs(2)
    mask = padding_mask(mask_kind)
    layer = family.layer(UNITS, return_sequences=True)
    outputs = keras.ops.convert_to_numpy(layer(x, mask=mask))
    expected = family.numpy_forward(
        x.astype(np.float64), layer_weights(layer), None, mask, {}
    )
    assert_close(outputs, expected, what=f"{mask_kind}-padded outputs")


def check_embedding_mask_ignores_padding(family: Family):
    """Through Embedding(mask_zero=True): padded batches equal the unpadded ones."""
    tokens = np.array([[4, 7, 2, 9]])
    model = keras.Sequential(
        [keras.layers.Embedding(12, 5, mask_zero=True), family.layer(UNITS)]
    )
    reference = keras.ops.convert_to_numpy(model(tokens))
    right = keras.ops.convert_to_numpy(model(np.array([[4, 7, 2, 9, 0, 0]])))
    left = keras.ops.convert_to_numpy(model(np.array([[0, 0, 0, 4, 7, 2, 9]])))
    assert_close(right, reference, what="right padding")
    assert_close(left, reference, what="left padding")


def check_stateful(family: Family, training=False):
    """A stateful layer continues from the last batch; reset_state() starts over."""
    x = random_inputs(3, batch=2, steps=8)
    whole = family.layer(UNITS, return_sequences=True)
    stateful = family.layer(UNITS, return_sequences=True, stateful=True)
    whole(x)
    stateful(x[:, :4])
    stateful.set_weights(whole.get_weights())
    stateful.reset_state()

    def run(layer, inputs):
        return keras.ops.convert_to_numpy(layer(inputs, training=training))

    expected = run(whole, x)
    first = run(stateful, x[:, :4])
    second = run(stateful, x[:, 4:])
    assert_close(np.concatenate([first, second], 1), expected, what="stateful halves")
    stateful.reset_state()
    assert_close(run(stateful, x[:, :4]), first, what="after reset")


def check_bidirectional_parity(family: Family, training=False):
    """Bidirectional, right-padded: outputs and gradients equal the built-in's."""
    x = random_inputs(4)
    ours = keras.layers.Bidirectional(family.layer(UNITS, return_sequences=True))
    builtin = keras.layers.Bidirectional(
        family.keras_layer(UNITS, return_sequences=True)
    )
    ours(x)
    builtin(x)
    ours.set_weights(builtin.get_weights())
    kwargs = {"mask": padding_mask("right"), "training": training}
    out_a, grads_a, dx_a, weights = outputs_and_gradients(ours, x, **kwargs)
    out_b, grads_b, dx_b, _ = outputs_and_gradients(builtin, x, weights, **kwargs)
    assert_close(out_a[0], out_b[0], what="bidirectional outputs")
    for a, b in zip(grads_a, grads_b, strict=True):
        assert_close(a, b, what="bidirectional gradients")
    assert_close(dx_a, dx_b, what="bidirectional input gradients")


def check_input_dropout_keeps_the_bias(family: Family):
    """Input dropout drops inputs, never the biases (folded into the input kernels):
    on all-zero inputs a training call with dropout equals one without, in the
    layer's own loop and with the cell inside keras.layers.RNN."""
    x = np.zeros((BATCH, STEPS, FEATURES), "float32")
    initial = [
        np.random.RandomState(9).randn(BATCH, UNITS).astype("float32")
        for _ in range(family.num_states)
    ]
    reference = family.layer(UNITS, return_sequences=True)
    reference(x, initial_state=initial)
    for variable in reference.trainable_variables:
        variable.assign(np.random.RandomState(4).uniform(-0.6, 0.6, variable.shape))
    expected = keras.ops.convert_to_numpy(reference(x, initial_state=initial))
    dropped = [
        family.layer(UNITS, return_sequences=True, dropout=0.5, seed=1),
        keras.layers.RNN(
            family.cell(UNITS, dropout=0.5, seed=1), return_sequences=True
        ),
    ]
    for layer in dropped:
        layer(x, initial_state=initial)
        layer.set_weights(reference.get_weights())
        outputs = layer(x, initial_state=initial, training=True)
        assert_close(
            keras.ops.convert_to_numpy(outputs), expected, what=type(layer).__name__
        )


def check_cell_in_keras_rnn(family: Family):
    """The cell works in keras.layers.RNN and StackedRNNCells like the layer."""
    x = random_inputs(5)
    layer = family.layer(UNITS)
    rnn = keras.layers.RNN(family.cell(UNITS))
    layer(x)
    rnn(x)
    rnn.set_weights(layer.get_weights())
    assert_close(
        keras.ops.convert_to_numpy(rnn(x)), keras.ops.convert_to_numpy(layer(x))
    )
    # Two stacked cells compute what two stacked layers with the same weights do.
    first, second = family.layer(UNITS, return_sequences=True), family.layer(3)
    expected = keras.ops.convert_to_numpy(second(first(x)))
    stacked = keras.layers.RNN(
        keras.layers.StackedRNNCells([family.cell(UNITS), family.cell(3)])
    )
    stacked(x)
    stacked.set_weights(first.get_weights() + second.get_weights())
    outputs = keras.ops.convert_to_numpy(stacked(x))
    assert outputs.shape == (BATCH, 3)
    assert_close(outputs, expected, what="StackedRNNCells vs stacked layers")


def check_save_and_reload(family: Family, tmp_path):
    """A model saved to .keras reloads in a fresh process that imports only rnnkit."""
    model = keras.Sequential(
        [
            keras.Input((None,), dtype="int32"),
            keras.layers.Embedding(20, 6, mask_zero=True),
            keras.layers.Bidirectional(
                family.layer(UNITS, return_sequences=True, dropout=0.1)
            ),
            family.layer(UNITS, go_backwards=True),
            keras.layers.Dense(1),
        ]
    )
    tokens = np.array([[3, 5, 7, 0], [0, 0, 9, 2]])
    check_reloads_in_fresh_process(model, tokens, tmp_path / f"{family.name}.keras")


def check_reloads_in_fresh_process(model, inputs, path, policy="float32"):
    """`model` saved to `path` (.keras) reloads in a fresh process that imports only
    rnnkit (and keras) and whose global dtype policy is `policy`, holds rnnkit's
    layers and gives the same outputs on `inputs` (an array or a dict of arrays).

    The process (tests/layers/reload_child.py) is started once per test worker and
    serves every reload of the worker; it never imports the tests."""
    expected = keras.ops.convert_to_numpy(keras.ops.cast(model(inputs), "float32"))
    model.save(path)
    named = inputs if isinstance(inputs, dict) else {"": inputs}
    np.savez(path.with_suffix(".inputs.npz"), **named)
    request = {
        "path": str(path),
        "policy": policy,
        "inputs": str(path.with_suffix(".inputs.npz")),
        "outputs": str(path.with_suffix(".outputs.npz")),
    }
    answer = _reload_child().ask(json.dumps(request))
    assert answer == "ok", json.loads(answer.removeprefix("error: "))
    with np.load(request["outputs"]) as reloaded:
        assert_close(reloaded["outputs"], expected, what="reloaded model")
        assert "rnnkit" in reloaded["packages"].tolist()


_SERVED = ServedProcesses()


def _reload_child() -> ServedProcess:
    from tests.layers.reload_child import ANSWER

    return _SERVED.get(
        "reload",
        lambda: ServedProcess(
            "reload_child", "tests.layers.reload_child", answer=ANSWER
        ),
    )


def stop_reload_child() -> None:
    """Ends the worker's reload process (at the end of the session)."""
    _SERVED.stop_all()


# Largest difference from the float32 layer allowed under each mixed policy, for the
# outputs (absolute: they lie in [-1, 1]), for the gradients (relative to the largest
# float32 gradient), over 40 steps, and for the weights after one SGD(0.1) step.
# bfloat16 keeps 8 significant bits, float16 11. A bias gradient sums 120 terms (batch
# x time) that partly cancel, so its error is large next to its value: for the LSTM on
# JAX under bfloat16, over 100 initialisations, the bias gradient's error reached
# 0.076 of its largest entry (5 % of them above 0.044), the kernels' at most 0.032.
MIXED_TOLERANCES = {
    "mixed_float16": {"outputs": 1e-2, "gradients": 1e-2, "weights": 2e-3},
    "mixed_bfloat16": {"outputs": 4e-2, "gradients": 8e-2, "weights": 8e-3},
}


def check_mixed_precision(family: Family, policy: str):
    """Under `policy` the layer computes in float16 or bfloat16 and keeps its state in
    float32; its outputs and its gradients (weights and inputs, right-padded mask)
    stay within `MIXED_TOLERANCES` of the float32 layer with the same weights, and a
    training step's loss and updated weights stay close to the float32 model's."""
    tolerance = MIXED_TOLERANCES[policy]
    compute_dtype = policy.removeprefix("mixed_")
    # The initial weights are drawn from a fixed seed: the figures do not depend on
    # which tests ran before in the same process.
    keras.utils.set_random_seed(0)
    x = random_inputs(6, steps=40)
    mask = padding_mask("right", steps=40)
    y = np.random.RandomState(7).randn(BATCH, 1).astype("float32")
    reference = family.layer(UNITS, return_sequences=True)
    expected, expected_grads, expected_input_grad, output_weights = (
        outputs_and_gradients(reference, x, mask=mask)
    )

    def training_model(loss_scale=None):
        model = keras.Sequential(
            [keras.Input((None, FEATURES)), family.layer(UNITS), keras.layers.Dense(1)]
        )
        optimizer = keras.optimizers.SGD(0.1)
        if loss_scale:
            # A fixed small scale: Keras' default dynamic scale (2**15) overflows
            # float16 on the first step and skips it, which would compare nothing.
            optimizer = keras.optimizers.LossScaleOptimizer(
                optimizer, initial_scale=loss_scale
            )
        model.compile(optimizer=optimizer, loss="mse")
        return model

    float_model = training_model()
    keras.utils.set_random_seed(3)
    initial = [w.copy() for w in float_model.get_weights()]
    float_loss = float(float_model.train_on_batch(x, y))
    float_weights = float_model.get_weights()
    moved = max(
        np.abs(a - b).max() for a, b in zip(float_weights, initial, strict=True)
    )
    assert moved > 1e-2, (
        "the step must move the weights for the comparison to mean much"
    )
    previous = keras.config.dtype_policy()
    keras.config.set_dtype_policy(policy)
    try:
        layer = family.layer(UNITS, return_sequences=True)
        layer(x)
        layer.set_weights(reference.get_weights())
        raw = layer(x, mask=mask)
        assert keras.backend.standardize_dtype(raw.dtype) == compute_dtype
        states = layer.cell.get_initial_state(batch_size=2)
        assert all(
            keras.backend.standardize_dtype(s.dtype) == "float32" for s in states
        )
        outputs, grads, input_grad, _ = outputs_and_gradients(
            layer, x, output_weights, mask=mask
        )
        assert_close(
            outputs[0].astype("float32"), expected[0], tolerance["outputs"], "outputs"
        )
        for name, actual, wanted in zip(
            ["inputs", *(v.path for v in layer.trainable_variables)],
            [input_grad, *grads],
            [expected_input_grad, *expected_grads],
            strict=True,
        ):
            scale = float(np.abs(wanted).max())
            assert_close(
                actual / scale, wanted / scale, tolerance["gradients"], f"d/d {name}"
            )
        # Keras wraps the optimizer for loss scaling under mixed_float16 only.
        model = training_model(loss_scale=8.0 if policy == "mixed_float16" else None)
        model.set_weights(initial)
        loss = float(model.train_on_batch(x, y))
        np.testing.assert_allclose(loss, float_loss, rtol=tolerance["outputs"])
        for updated, expected_weight in zip(
            model.get_weights(), float_weights, strict=True
        ):
            np.testing.assert_allclose(
                updated, expected_weight, atol=tolerance["weights"]
            )
    finally:
        keras.config.set_dtype_policy(previous)


def msft_windows(window=20, count=256):
    """Real data: windows of standardised MSFT daily log returns -> next return."""
    from pmdarima.datasets import load_msft

    close = load_msft()["Close"].to_numpy(dtype=np.float64)[-(count + window + 1) :]
    returns = np.diff(np.log(close))
    returns = (returns - returns.mean()) / returns.std()
    x = np.stack([returns[i : i + window] for i in range(count)])[..., None]
    y = returns[window : window + count, None]
    return x.astype("float32"), y.astype("float32")


def check_training_reduces_loss(family: Family):
    """A few optimiser steps on real MSFT windows reduce the training loss."""
    keras.utils.set_random_seed(0)
    x, y = msft_windows()
    model = keras.Sequential(
        [keras.Input((None, 1)), family.layer(8), keras.layers.Dense(1)]
    )
    model.compile(optimizer=keras.optimizers.Adam(0.01), loss="mse")
    before = model.evaluate(x, y, verbose=0)
    model.fit(x, y, epochs=3, batch_size=64, verbose=0, shuffle=False)
    after = model.evaluate(x, y, verbose=0)
    assert after < before, (before, after)


HAND_WRITTEN = "hand-written BPTT"
TORCH_KERNEL = "fused kernel: PyTorch's torch."


def hand_written_bptt_expected() -> bool:
    return keras.backend.backend() == "tensorflow"


def _gradients_on_both_paths(layer, x, call_kwargs, compiled):
    """Outputs and gradients (weights, inputs, initial states) of one training call
    through the hand-written backward pass and one through automatic
    differentiation of the same loop, with the same dropout masks."""
    import tensorflow as tf

    rng = np.random.RandomState(42)
    shapes = [np.shape(o) for o in as_list(layer(x, **call_kwargs))]
    output_weights = [rng.randn(*s).astype("float32") for s in shapes]
    initial = [tf.constant(s) for s in call_kwargs.get("initial_state", [])]
    kwargs = {**call_kwargs, "training": True}
    if initial:
        kwargs["initial_state"] = initial
    seed_state = keras.ops.convert_to_numpy(layer.cell.seed_generator.state)

    def loss_and_gradients(inputs):
        with tf.GradientTape() as tape:
            tape.watch([inputs, *initial])
            outputs = as_list(layer(inputs, **kwargs))
            loss = sum(
                tf.reduce_sum(tf.cast(o, "float32") * w)
                for o, w in zip(outputs, output_weights, strict=True)
            )
        sources = [*layer.trainable_variables, inputs, *initial]
        return outputs, tape.gradient(loss, sources)

    results = {}
    for path in ("hand-written", "autodiff"):
        function = tf.function(loss_and_gradients) if compiled else loss_and_gradients
        layer.cell.seed_generator.state.assign(seed_state)  # same dropout masks
        if path == "autodiff":
            layer._bptt_blockers = lambda: ["forced by the test"]
        outputs, gradients = function(tf.constant(x))
        results[path] = ([o.numpy() for o in outputs], [g.numpy() for g in gradients])
        results[path + " path"] = layer.execution_path
    del layer._bptt_blockers
    return results


# (options, mask kind, initial state, inside tf.function) for the comparison of the
# hand-written backward pass with automatic differentiation.
BPTT_CASES = {
    "last_output": ({}, None, False, False),
    "sequences_states_initial": (
        {"return_sequences": True, "return_state": True},
        None,
        True,
        False,
    ),
    "right_padded_backwards": (
        {"return_sequences": True, "go_backwards": True},
        "right",
        False,
        False,
    ),
    "left_padded_state": ({"return_state": True}, "left", True, False),
    "empty_row_state": ({"return_state": True}, "empty_row", True, False),
    "empty_row_sequences": ({"return_sequences": True}, "empty_row", True, False),
    "input_dropout": ({"return_sequences": True, "dropout": 0.4}, None, False, False),
    "relu": ({"activation": "relu"}, None, False, False),
    "no_bias": ({"use_bias": False, "return_sequences": True}, None, False, False),
    "compiled_masked": ({"return_state": True}, "right", True, True),
    "compiled_dropout": ({"return_sequences": True, "dropout": 0.3}, None, False, True),
}


def check_hand_written_bptt_matches_autodiff(
    family: Family,
    options: dict,
    mask_kind=None,
    with_initial_state=False,
    compiled=False,
):
    """A training call on TensorFlow runs the hand-written backward pass; its outputs
    and its gradients with respect to the weights, the inputs and the initial
    states equal those of automatic differentiation through the same loop."""
    x = random_inputs(8)
    call_kwargs = {}
    if mask_kind:
        call_kwargs["mask"] = padding_mask(mask_kind)
    if with_initial_state:
        rng = np.random.RandomState(5)
        call_kwargs["initial_state"] = [
            rng.randn(BATCH, UNITS).astype("float32") for _ in range(family.num_states)
        ]
    layer = family.layer(UNITS, seed=3, **options)
    layer(x, **call_kwargs)
    for variable in layer.trainable_variables:
        variable.assign(np.random.RandomState(6).uniform(-0.6, 0.6, variable.shape))
    results = _gradients_on_both_paths(layer, x, call_kwargs, compiled)
    assert HAND_WRITTEN in results["hand-written path"], results["hand-written path"]
    assert "autodiff BPTT (forced by the test)" in results["autodiff path"]
    (out_a, grads_a), (out_b, grads_b) = results["hand-written"], results["autodiff"]
    for k, (a, b) in enumerate(zip(out_a, out_b, strict=True)):
        assert_close(a, b, what=f"output {k}")
    names = (
        [v.path for v in layer.trainable_variables]
        + ["inputs"]
        + [
            f"initial state {k}"
            for k in range(len(call_kwargs.get("initial_state", [])))
        ]
    )
    assert len(grads_a) == len(names)
    for name, a, b in zip(names, grads_a, grads_b, strict=True):
        assert a is not None and b is not None, name
        assert_close(a, b, what=f"gradient of {name}")


def check_training_path_is_named(family: Family, options: dict, reason: str):
    """A training call says which backward pass it took, and why not the
    hand-written one."""
    layer = family.layer(UNITS, **options)
    x = random_inputs(9)
    layer(x)
    if keras.backend.backend() == "torch" and not reason:
        # PyTorch's own kernel runs what the layer's loop would, in both modes.
        assert layer.execution_path.startswith(TORCH_KERNEL), layer.execution_path
        layer(x, training=True)
        assert layer.execution_path.startswith(TORCH_KERNEL), layer.execution_path
        return
    assert HAND_WRITTEN not in layer.execution_path  # inference: plain loop
    layer(x, training=True)
    if hand_written_bptt_expected() and not reason:
        assert f", {HAND_WRITTEN}:" in layer.execution_path, layer.execution_path
    else:
        reason = reason or f"backend is {keras.backend.backend()}"
        assert "autodiff BPTT (" in layer.execution_path, layer.execution_path
        assert reason in layer.execution_path, layer.execution_path


def is_generic_path(path: str, reason: str) -> bool:
    """`execution_path` of the generic loop (XLA-compiled or not) for `reason`."""
    return path.startswith("generic loop") and path.endswith(f": {reason}")
