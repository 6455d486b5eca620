"""rnnkit's own recurrent checks: its execution paths, its hand-written backward
pass and its batch shards. The checks any recurrent layer must pass are public, in
`rnnkit.testing.recurrent`; these concern how rnnkit's layers run, not what they
compute.
"""

from __future__ import annotations

import keras
import numpy as np

from rnnkit.testing._numerics import as_list, assert_close
from rnnkit.testing.recurrent import (
    BATCH,
    UNITS,
    RecurrentFamily,
    padding_mask,
    random_inputs,
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
    family: RecurrentFamily,
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


def check_training_path_is_named(family: RecurrentFamily, options: dict, reason: str):
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
