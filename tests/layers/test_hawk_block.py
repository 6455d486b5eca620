"""Hawk's residual block against its equations written in PyTorch (float64, the
same weights): outputs and every gradient; a stateful block streaming a sequence in
pieces against one call; the config and a `.keras` reload; bad arguments."""

import keras
import numpy as np
import pytest
import torch

from rnnkit.layers import HawkBlock
from rnnkit.testing._numerics import assert_close
from rnnkit.testing.attention import outputs_and_gradients

BATCH, STEPS, FEATURES, UNITS = 3, 9, 6, 5


def _inputs(seed=0, steps=STEPS):
    return np.random.default_rng(seed).normal(size=(BATCH, steps, FEATURES))


def _randomised(layer, seed=1):
    """Every weight drawn at random (the RMSNorm scales and the convolution too, so
    that none is the identity it starts as)."""
    rng = np.random.default_rng(seed)
    for variable in layer.weights:
        variable.assign(rng.normal(scale=0.5, size=variable.shape).astype("float32"))


def torch_block(x, w, conv_width, epsilon):
    """The block's equations (rnnkit.layers.hawk) with the RG-LRU's
    (rnnkit.layers.rg_lru), step by step."""

    def rms_norm(v, scale):
        return v * torch.rsqrt(torch.mean(v * v, -1, keepdim=True) + epsilon) * scale

    def gelu(v):
        return 0.5 * v * (1.0 + torch.erf(v / np.sqrt(2.0)))

    normed = rms_norm(x, w["temporal_norm"])
    gate = gelu(normed @ w["gate_kernel"])
    u = normed @ w["input_kernel"]
    if conv_width:
        steps = u.shape[1]
        before = torch.zeros(u.shape[0], conv_width - 1, u.shape[2], dtype=u.dtype)
        padded = torch.cat([before, u], 1)
        u = w["conv_bias"] + sum(
            padded[:, k : k + steps] * w["conv_kernel"][k] for k in range(conv_width)
        )
    projected = u @ w["kernel"] + w["bias"]
    h = torch.zeros(x.shape[0], w["decay"].shape[0], dtype=x.dtype)
    states = []
    for t in range(x.shape[1]):
        g_a, g_i, g_h = torch.chunk(projected[:, t], 3, dim=-1)
        a = torch.sigmoid(w["decay"]) ** (8.0 * torch.sigmoid(g_a))
        h = a * h + torch.sqrt(1.0 - a * a) * torch.sigmoid(g_i) * g_h
        states.append(h)
    mixed = torch.stack(states, 1)
    y = x + (gate * mixed) @ w["output_kernel"]
    normed = rms_norm(y, w["mlp_norm"])
    hidden = gelu(normed @ w["mlp_gate_kernel"]) * (normed @ w["mlp_input_kernel"])
    return y + hidden @ w["mlp_output_kernel"]


@pytest.mark.parametrize("conv_width", [4, 1, 0])
def test_the_block_computes_its_equations_with_their_gradients(conv_width):
    layer = HawkBlock(UNITS, conv_width=conv_width, expansion=2, seed=3)
    x = _inputs()
    layer(x.astype("float32"))
    _randomised(layer)
    output, weight_grads, input_grads, cotangent = outputs_and_gradients(
        layer, {"inputs": x}
    )
    weights = {}
    for variable in layer.weights:
        name = variable.path.split("/")[-1]
        if name == "scale":  # the two norms' scales: named by their layer
            name = variable.path.split("/")[-2]
        weights[name] = torch.tensor(
            keras.ops.convert_to_numpy(variable),
            dtype=torch.float64,
            requires_grad=True,
        )
    x_torch = torch.tensor(x, requires_grad=True)
    expected = torch_block(x_torch, weights, conv_width, layer.temporal_norm.epsilon)
    assert_close(output, expected.detach().numpy(), 1e-5, "outputs")
    torch.sum(expected * torch.tensor(cotangent, dtype=torch.float64)).backward()
    assert_close(input_grads["inputs"], x_torch.grad.numpy(), 1e-5, "d inputs")
    trainable = [variable.path for variable in layer.trainable_variables]
    assert len(trainable) == len(weights) == len(weight_grads)
    for path, gradient in zip(trainable, weight_grads, strict=True):
        name = path.split("/")[-1]
        name = path.split("/")[-2] if name == "scale" else name
        assert_close(gradient, weights[name].grad.numpy(), 1e-5, f"d {name}")


@pytest.mark.parametrize("cell_type, conv_width", [("rglru", 4), ("lstm", 3)])
def test_a_stateful_block_streams_a_sequence_in_pieces(cell_type, conv_width):
    """Pieces shorter than the convolution's reach included: its last inputs and
    the recurrent state carry from call to call; reset_state starts afresh."""
    x = _inputs(seed=2, steps=11).astype("float32")
    whole = HawkBlock(UNITS, cell_type=cell_type, conv_width=conv_width, seed=4)
    expected = keras.ops.convert_to_numpy(whole(x))
    stream = HawkBlock(
        UNITS, cell_type=cell_type, conv_width=conv_width, stateful=True, seed=4
    )
    stream.build((BATCH, None, FEATURES))
    stream.set_weights(whole.get_weights())
    for _ in range(2):  # the second pass after reset_state
        pieces = [
            keras.ops.convert_to_numpy(stream(x[:, start:stop]))
            for start, stop in ((0, 1), (1, 3), (3, 4), (4, 11))
        ]
        np.testing.assert_allclose(np.concatenate(pieces, 1), expected, atol=1e-5)
        stream.reset_state()


@pytest.mark.parametrize(
    "cell_type, conv_width", [("rglru", 4), ("minlstm", 1), ("lstm", 0)]
)
def test_the_step_fed_token_by_token_is_the_call(cell_type, conv_width):
    """`step` from zeros, one step at a time (what an exported generator runs),
    gives the block's outputs on the whole sequence, random weights throughout."""
    x = _inputs(seed=3, steps=7).astype("float32")
    block = HawkBlock(UNITS, cell_type=cell_type, conv_width=conv_width, seed=4)
    block.build((None, None, FEATURES))
    _randomised(block, seed=6)
    expected = keras.ops.convert_to_numpy(block(x))
    conv_inputs = np.zeros((BATCH, max(conv_width - 1, 0), UNITS), "float32")
    states = block.recurrent.cell.get_initial_state(BATCH)
    outputs = []
    for t in range(x.shape[1]):
        y, conv_inputs, states = block.step(x[:, t], conv_inputs, states)
        outputs.append(keras.ops.convert_to_numpy(y))
    assert len(states) == (2 if cell_type == "lstm" else 1)
    np.testing.assert_allclose(np.stack(outputs, 1), expected, atol=1e-5)


def test_the_config_and_a_reload_keep_the_block(tmp_path):
    layer = HawkBlock(
        UNITS, cell_type="mingru", conv_width=2, expansion=2, dropout=0.1, seed=5
    )
    copy = HawkBlock.from_config(layer.get_config())
    assert copy.get_config() == layer.get_config()
    inputs = keras.Input((None, FEATURES))
    model = keras.Model(inputs, layer(inputs))
    x = _inputs(seed=6).astype("float32")
    path = tmp_path / "hawk.keras"
    model.save(path)
    reloaded = keras.saving.load_model(path)
    np.testing.assert_allclose(
        keras.ops.convert_to_numpy(reloaded(x)),
        keras.ops.convert_to_numpy(model(x)),
        atol=1e-6,
    )


def test_under_mixed_bfloat16_the_block_stays_near_float32():
    x = _inputs(seed=9).astype("float32")
    reference = HawkBlock(UNITS, seed=10)
    expected = keras.ops.convert_to_numpy(reference(x))
    keras.mixed_precision.set_dtype_policy("mixed_bfloat16")
    try:
        layer = HawkBlock(UNITS, seed=10)
        layer.build((None, None, FEATURES))
        layer.set_weights(reference.get_weights())
        output = layer(x)
    finally:
        keras.mixed_precision.set_dtype_policy("float32")
    assert keras.backend.standardize_dtype(output.dtype) == "bfloat16"
    output = keras.ops.convert_to_numpy(keras.ops.cast(output, "float32"))
    assert_close(output, expected, 5e-2, "bfloat16 against float32")


def test_dropout_acts_in_training_only():
    layer = HawkBlock(UNITS, dropout=0.5, seed=7)
    x = _inputs(seed=8).astype("float32")
    first = keras.ops.convert_to_numpy(layer(x))
    np.testing.assert_allclose(keras.ops.convert_to_numpy(layer(x)), first)
    assert not np.allclose(keras.ops.convert_to_numpy(layer(x, training=True)), first)


@pytest.mark.parametrize(
    "options, message",
    [
        ({"units": 0}, "`units` must be an integer of at least 1"),
        ({"conv_width": -1}, "`conv_width` must be an integer of at least 0"),
        ({"expansion": 1.5}, "`expansion` must be an integer of at least 1"),
        ({"dropout": 1.0}, "`dropout` must be in [0, 1)"),
        ({"cell_type": "rglr"}, "did you mean 'rglru'"),
    ],
)
def test_bad_arguments_are_refused(options, message):
    with pytest.raises(ValueError, match=None) as raised:
        HawkBlock(**{"units": UNITS, **options})
    assert message in str(raised.value)


def test_a_stateful_block_needs_its_batch_size():
    with pytest.raises(ValueError, match="needs a fixed batch size"):
        HawkBlock(UNITS, stateful=True).build((None, None, FEATURES))
