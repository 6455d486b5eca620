"""On the PyTorch backend the layers run PyTorch's own kernels (`_torch_rnn`):
`torch.lstm`, `torch.gru`, `torch.rnn_tanh`/`rnn_relu`. Their outputs, final states
and gradients (weights, inputs, initial states) equal the layers' own loop's."""

import keras
import numpy as np
import pytest

from rnnkit.layers import GRU, LSTM, SimpleRNN
from rnnkit.testing import recurrent as checks
from tests.layers import recurrent_checks as internal

pytestmark = pytest.mark.skipif(
    keras.backend.backend() != "torch", reason="PyTorch's kernels: PyTorch backend"
)

LAYERS = {"lstm": (LSTM, 2), "gru": (GRU, 1), "simple_rnn": (SimpleRNN, 1)}
CASES = {
    "last_output": ({}, None, False),
    "sequences_states_initial": (
        {"return_sequences": True, "return_state": True},
        None,
        True,
    ),
    "backwards": ({"return_sequences": True, "go_backwards": True}, None, True),
    "right_padded": ({"return_sequences": True, "return_state": True}, "right", True),
    "right_padded_zero_outputs": (
        {"return_sequences": True, "zero_output_for_mask": True},
        "right",
        False,
    ),
    "no_bias": ({"use_bias": False, "return_sequences": True}, None, False),
}


def _gradients(layer, x, mask, initial, output_weights):
    import torch

    inputs = checks.torch_leaf(x)
    states = [checks.torch_leaf(s) for s in initial]
    kwargs = {"mask": None if mask is None else keras.ops.convert_to_tensor(mask)}
    if states:
        kwargs["initial_state"] = states
    outputs = checks.as_list(layer(inputs, **kwargs))
    loss = sum(
        (o * keras.ops.convert_to_tensor(w)).sum()
        for o, w in zip(outputs, output_weights, strict=True)
    )
    sources = [v.value for v in layer.trainable_variables] + [inputs, *states]
    gradients = torch.autograd.grad(loss, sources)
    to_numpy = keras.ops.convert_to_numpy
    return [to_numpy(o) for o in outputs], [to_numpy(g) for g in gradients]


@pytest.mark.parametrize("name", LAYERS)
@pytest.mark.parametrize("case", CASES)
def test_pytorch_kernel_equals_the_layers_own_loop(name, case):
    layer_cls, num_states = LAYERS[name]
    options, mask_kind, with_initial = CASES[case]
    zero_outputs = options.pop("zero_output_for_mask", False)
    x = checks.random_inputs(11)
    mask = checks.padding_mask(mask_kind) if mask_kind else None
    rng = np.random.RandomState(12)
    initial = (
        [rng.randn(checks.BATCH, checks.UNITS).astype("float32")] * num_states
        if with_initial
        else []
    )
    fused = layer_cls(checks.UNITS, **options)
    own = layer_cls(checks.UNITS, **options)
    fused(x)
    own(x)
    weights = [
        rng.uniform(-0.6, 0.6, w.shape).astype("float32") for w in fused.get_weights()
    ]
    fused.set_weights(weights)
    own.set_weights(weights)
    # The layer's own loop: what runs where no fused kernel can (here, forced).
    own._cudnn_blockers = lambda training: ["forced by the test"]
    fused.zero_output_for_mask = own.zero_output_for_mask = zero_outputs
    shapes = [np.shape(o) for o in checks.as_list(fused(x, mask=mask))]
    output_weights = [rng.randn(*s).astype("float32") for s in shapes]
    out_a, grads_a = _gradients(fused, x, mask, initial, output_weights)
    assert fused.execution_path.startswith(internal.TORCH_KERNEL), fused.execution_path
    out_b, grads_b = _gradients(own, x, mask, initial, output_weights)
    assert internal.is_generic_path(own.execution_path, "forced by the test")
    for k, (a, b) in enumerate(zip(out_a, out_b, strict=True)):
        checks.assert_close(a, b, what=f"output {k}")
    names = [v.path for v in fused.trainable_variables] + ["inputs"]
    names += [f"initial state {k}" for k in range(len(initial))]
    for what, a, b in zip(names, grads_a, grads_b, strict=True):
        checks.assert_close(a, b, what=f"gradient of {what}")


@pytest.mark.parametrize("name", LAYERS)
def test_the_kernels_weights_are_contiguous(name):
    """On a GPU cuDNN views the weights into one flat buffer and refuses a transposed
    view ("view size is not compatible with input tensor's size and stride": every
    call failed on an H200). The CPU kernel takes views, so the layout is checked."""
    layer_cls, _ = LAYERS[name]
    layer = layer_cls(checks.UNITS)
    layer(checks.random_inputs(3))
    weights = layer._torch_weights()
    assert weights and all(w.is_contiguous() for w in weights)


@pytest.mark.parametrize("name", LAYERS)
def test_a_gradient_outside_fit_runs_the_kernel_in_training_mode(name, monkeypatch):
    """cuDNN refuses the backward pass of a kernel call made with train=False ("cudnn
    RNN backward can only be called in training mode": every gradient taken outside
    `fit` failed on an H200). The CPU kernel does not check, so the flag is recorded:
    set whenever autograd records the call, clear under `torch.no_grad()`."""
    import torch

    from rnnkit.layers import _torch_rnn

    layer_cls, _ = LAYERS[name]
    layer = layer_cls(checks.UNITS)
    x = checks.random_inputs(3)
    layer(x)
    kind = layer._torch_kernel()
    kernel, seen = _torch_rnn.KERNELS[kind], []

    def recording(*args):
        seen.append(args[6])  # `train`, after input, hx, params, has_biases, layers, p
        return kernel(*args)

    monkeypatch.setitem(_torch_rnn.KERNELS, kind, recording)
    layer(checks.torch_leaf(x), training=False)
    with torch.no_grad():
        layer(x, training=False)
    layer(x, training=True)
    assert seen == [True, False, True]


@pytest.mark.parametrize("name", LAYERS)
def test_a_mixed_policy_runs_the_kernel_in_float32(name):
    """Under mixed_bfloat16 the layer ran its own loop, op by op: 0.06-0.09x of Keras'
    LSTM on an H200. The kernel now runs in float32 on the bfloat16 inputs and gives
    bfloat16 back: the float32 layer's outputs on the same inputs, to bfloat16's
    rounding (2^-8 of the values; both round near-ties alike or not)."""
    layer_cls, _ = LAYERS[name]
    x = keras.ops.cast(keras.ops.cast(checks.random_inputs(3), "bfloat16"), "float32")
    full = layer_cls(checks.UNITS, return_sequences=True)
    full(x)
    previous = keras.config.dtype_policy()
    keras.config.set_dtype_policy("mixed_bfloat16")
    try:
        mixed = layer_cls(checks.UNITS, return_sequences=True)
        mixed(x)
    finally:
        keras.config.set_dtype_policy(previous)
    mixed.set_weights(full.get_weights())
    outputs = mixed(x)
    assert mixed.execution_path.startswith(internal.TORCH_KERNEL), mixed.execution_path
    assert keras.backend.standardize_dtype(outputs.dtype) == "bfloat16"
    expected = keras.ops.cast(keras.ops.cast(full(x), "bfloat16"), "float32")
    checks.assert_close(keras.ops.cast(outputs, "float32"), expected, tolerance=1e-2)


@pytest.mark.parametrize("name", LAYERS)
@pytest.mark.parametrize(
    "options, mask_kind, reason",
    [
        ({}, "left", "left-padded mask"),
        ({}, "empty_row", "mask with a fully masked row"),
        ({"go_backwards": True}, "right", "go_backwards with a mask"),
        ({"recurrent_dropout": 0.2}, None, "recurrent_dropout=0.2 > 0"),
        ({"unroll": True}, None, "unroll=True"),
    ],
)
def test_what_the_kernel_cannot_take_runs_the_layers_loop(
    name, options, mask_kind, reason
):
    layer_cls, _ = LAYERS[name]
    layer = layer_cls(checks.UNITS, return_sequences=True, **options)
    mask = checks.padding_mask(mask_kind) if mask_kind else None
    layer(checks.random_inputs(3), mask=mask)
    assert internal.is_generic_path(layer.execution_path, reason), layer.execution_path


@pytest.mark.parametrize("name", ["lstm", "gru"])
def test_use_cudnn_false_keeps_the_layers_loop_and_true_needs_the_kernel(name):
    layer_cls, _ = LAYERS[name]
    layer = layer_cls(checks.UNITS, use_cudnn=False)
    layer(checks.random_inputs(3))
    assert internal.is_generic_path(layer.execution_path, "use_cudnn=False")
    forced = layer_cls(checks.UNITS, use_cudnn=True)
    forced(checks.random_inputs(3))
    assert forced.execution_path == f"{internal.TORCH_KERNEL}{name}"
    blocked = layer_cls(checks.UNITS, use_cudnn=True, activation="relu")
    with pytest.raises(ValueError, match="activation=relu"):
        blocked(checks.random_inputs(3))
