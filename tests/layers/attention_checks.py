"""Helpers shared by the attention layer tests: numpy references, gradients, reloads.

Everything runs on the active Keras backend (TensorFlow, JAX or PyTorch). Layer
gradients come from `tf.GradientTape`, `jax.grad` on the layer's stateless call or
`torch.autograd.grad`; the
reference gradients are central finite differences of the float64 numpy equations.
"""

from __future__ import annotations

import keras
import numpy as np

from tests.layers.recurrent_checks import (
    assert_close,
    check_reloads_in_fresh_process,
    torch_leaf,
)

BATCH, QUERY_STEPS, VALUE_STEPS = 2, 3, 5
GRADIENT_TOLERANCE = 1e-4


def random_array(shape, seed, scale=1.0):
    return (scale * np.random.RandomState(seed).randn(*shape)).astype("float32")


def padding_mask(batch=BATCH, steps=VALUE_STEPS):
    """(batch, steps) booleans, right-padded: row b keeps steps - 2 * b positions."""
    lengths = np.maximum(steps - 2 * np.arange(batch), 1)
    return np.arange(steps)[None, :] < lengths[:, None]


def numpy_masked_softmax(scores, mask=None):
    """Softmax over the allowed positions only; zero elsewhere and on empty rows."""
    allowed = (
        np.ones(scores.shape, bool)
        if mask is None
        else np.broadcast_to(mask, scores.shape)
    )
    shifted = np.where(allowed, scores, -np.inf)
    row_max = np.max(shifted, axis=-1, keepdims=True)
    exp = np.where(
        allowed, np.exp(scores - np.where(np.isfinite(row_max), row_max, 0)), 0
    )
    total = np.sum(exp, axis=-1, keepdims=True)
    return np.divide(exp, total, out=np.zeros_like(exp), where=total > 0)


def numpy_attention_mask(
    query_length,
    value_length,
    query_mask=None,
    value_mask=None,
    key_mask=None,
    attention_mask=None,
    use_causal_mask=False,
):
    """The (batch or 1, Tq, Tv) boolean mask the equations use, built with loops."""
    mask = np.ones((1, query_length, value_length), bool)
    if query_mask is not None:
        mask = mask & np.asarray(query_mask, bool)[:, :, None]
    for padding in (value_mask, key_mask):
        if padding is not None:
            mask = mask & np.asarray(padding, bool)[:, None, :]
    if attention_mask is not None:
        mask = mask & np.asarray(attention_mask, bool)
    if use_causal_mask:
        causal = np.zeros((1, query_length, value_length), bool)
        for i in range(query_length):
            causal[0, i, : i + 1] = True
        mask = mask & causal
    return mask


def numerical_gradients(function, arrays, cotangent, step=1e-6):
    """Central differences of sum(function(*arrays) * cotangent), in float64."""
    arrays = [np.array(a, dtype=np.float64) for a in arrays]
    cotangent = np.asarray(cotangent, np.float64)
    gradients = []
    for array in arrays:
        gradient = np.zeros_like(array)
        for index in np.ndindex(array.shape):
            original = array[index]
            array[index] = original + step
            plus = np.sum(function(*arrays) * cotangent)
            array[index] = original - step
            minus = np.sum(function(*arrays) * cotangent)
            array[index] = original
            gradient[index] = (plus - minus) / (2 * step)
        gradients.append(gradient)
    return gradients


def outputs_and_gradients(layer, differentiated, cotangent=None, **call_kwargs):
    """Output of `layer(**differentiated, **call_kwargs)` and the gradients of
    sum(output * cotangent) w.r.t. the trainable weights and each differentiated
    input.

    `differentiated` maps call argument names (query, value, key, ...) to float
    arrays; `call_kwargs` (masks, flags, integer inputs) are not differentiated.
    Only the first output is used when the layer returns several.
    """
    inputs = {name: np.asarray(a, "float32") for name, a in differentiated.items()}
    if not layer.built:
        layer(**inputs, **call_kwargs)
    if cotangent is None:
        output = _first(layer(**inputs, **call_kwargs))
        cotangent = random_array(np.shape(output), seed=42)
    names = list(inputs)
    if keras.backend.backend() == "jax":
        import jax
        import jax.numpy as jnp

        non_trainable = [v.value for v in layer.non_trainable_variables]

        def loss(trainable_values, input_values):
            output, _ = layer.stateless_call(
                trainable_values, non_trainable, **input_values, **call_kwargs
            )
            output = _first(output)
            # float32 products: under a mixed policy the output is float16/bfloat16.
            return jnp.sum(output.astype("float32") * cotangent), output

        (_, output), (weight_grads, input_grads) = jax.value_and_grad(
            loss, argnums=(0, 1), has_aux=True
        )(
            [v.value for v in layer.trainable_variables],
            {name: jnp.asarray(a) for name, a in inputs.items()},
        )
        input_grads = [input_grads[name] for name in names]
    elif keras.backend.backend() == "torch":
        import torch

        tensors = {name: torch_leaf(a) for name, a in inputs.items()}
        output = _first(layer(**tensors, **call_kwargs))
        loss = torch.sum(
            output.float() * keras.ops.convert_to_tensor(cotangent, "float32")
        )
        gradients = torch.autograd.grad(
            loss,
            [v.value for v in layer.trainable_variables] + list(tensors.values()),
        )
        output = output.detach()
        weight_grads = gradients[: len(layer.trainable_variables)]
        input_grads = gradients[len(layer.trainable_variables) :]
    else:
        import tensorflow as tf

        tensors = {name: tf.convert_to_tensor(a) for name, a in inputs.items()}
        with tf.GradientTape() as tape:
            tape.watch(list(tensors.values()))
            output = _first(layer(**tensors, **call_kwargs))
            loss = tf.reduce_sum(tf.cast(output, "float32") * cotangent)
        gradients = tape.gradient(loss, [*layer.trainable_variables, *tensors.values()])
        weight_grads = gradients[: len(layer.trainable_variables)]
        input_grads = gradients[len(layer.trainable_variables) :]
    to_numpy = keras.ops.convert_to_numpy
    return (
        to_numpy(keras.ops.cast(output, "float32")),
        [to_numpy(g) for g in weight_grads],
        dict(zip(names, [to_numpy(g) for g in input_grads], strict=True)),
        cotangent,
    )


def _first(outputs):
    return outputs[0] if isinstance(outputs, (list, tuple)) else outputs


def check_gradients_match_numpy(layer, inputs, numpy_forward, **call_kwargs):
    """Layer gradients (weights, then inputs) equal finite differences of
    `numpy_forward(*weights, *inputs.values())`, and so does the output."""
    output, weight_grads, input_grads, cotangent = outputs_and_gradients(
        layer, inputs, **call_kwargs
    )
    weights = [np.asarray(w, np.float64) for w in layer.get_weights()]
    arrays = [*weights, *inputs.values()]
    assert_close(output, numpy_forward(*arrays), what="output")
    expected = numerical_gradients(numpy_forward, arrays, cotangent)
    names = [v.path for v in layer.trainable_variables] + list(inputs)
    actual = [*weight_grads, *input_grads.values()]
    for name, got, want in zip(names, actual, expected, strict=True):
        assert_close(got, want, GRADIENT_TOLERANCE, what=f"d loss / d {name}")


# Largest difference from float32 allowed under each mixed policy, relative to the
# largest float32 value of the output and of each gradient, or absolute where that is
# below 1 (the key bias's gradient is zero: softmax ignores a shift shared by all
# keys). bfloat16 keeps 8 significant bits, float16 11.
MIXED_TOLERANCES = {"mixed_float16": 1e-2, "mixed_bfloat16": 4e-2}


def check_mixed_precision(make_layer, differentiated, policy, **call_kwargs):
    """A layer from `make_layer()` built under `policy` computes in float16 or
    bfloat16 and, with the weights of a float32 one, gives its output and its
    gradients (weights and `differentiated` inputs) within `MIXED_TOLERANCES`."""
    reference = make_layer()
    expected, expected_grads, expected_input_grads, cotangent = outputs_and_gradients(
        reference, differentiated, **call_kwargs
    )
    previous = keras.config.dtype_policy()
    keras.config.set_dtype_policy(policy)
    try:
        layer = make_layer()
        raw = _first(layer(**differentiated, **call_kwargs))
        assert keras.backend.standardize_dtype(raw.dtype) == policy.removeprefix(
            "mixed_"
        )
        layer.set_weights(reference.get_weights())
        output, grads, input_grads, _ = outputs_and_gradients(
            layer, differentiated, cotangent, **call_kwargs
        )
    finally:
        keras.config.set_dtype_policy(previous)
    pairs = [("output", output, expected)]
    pairs += [
        (f"d/d {v.path}", g, e)
        for v, g, e in zip(
            layer.trainable_variables, grads, expected_grads, strict=True
        )
    ]
    pairs += [
        (f"d/d {name}", input_grads[name], expected_input_grads[name])
        for name in differentiated
    ]
    for what, actual, wanted in pairs:
        scale = max(float(np.abs(wanted).max()), 1.0)
        assert_close(actual / scale, wanted / scale, MIXED_TOLERANCES[policy], what)


def check_padded_positions_do_not_move(layer, query, value, **call_kwargs):
    """Changing the padded value and key positions changes nothing, and padded keys
    get exactly zero weight."""
    mask = padding_mask(len(value), value.shape[1])
    to_numpy = keras.ops.convert_to_numpy
    output, weights = layer(
        query, value, value_mask=mask, return_attention_scores=True, **call_kwargs
    )
    garbage = random_array(value.shape, seed=99, scale=100.0)
    changed = np.where(mask[:, :, None], value, garbage)
    output_changed, weights_changed = layer(
        query, changed, value_mask=mask, return_attention_scores=True, **call_kwargs
    )
    assert_close(to_numpy(output_changed), to_numpy(output), 1e-6, what="output")
    assert_close(to_numpy(weights_changed), to_numpy(weights), 1e-6, what="weights")
    weights = to_numpy(weights)
    # (batch, [heads,] [Tq,] Tv): broadcast the key mask over the middle axes.
    key_mask = mask.reshape((len(mask),) + (1,) * (weights.ndim - 2) + (-1,))
    assert np.all(np.where(key_mask, 0.0, weights) == 0.0), "padded keys got weight"


def check_save_and_reload(model, inputs, tmp_path):
    """A model saved to .keras reloads in a fresh process that imports only rnnkit
    (and keras) and gives the same outputs."""
    check_reloads_in_fresh_process(model, inputs, tmp_path / "model.keras")


def check_training_step_reduces_loss(model, inputs, targets):
    """One SGD step on a batch lowers the loss on that batch."""
    model.compile(optimizer=keras.optimizers.SGD(0.05), loss="mse")
    before = model.evaluate(inputs, targets, verbose=0)
    model.train_on_batch(inputs, targets)
    after = model.evaluate(inputs, targets, verbose=0)
    assert after < before, (before, after)


def check_config_round_trip(layer):
    config = layer.get_config()
    assert type(layer).from_config(config).get_config() == config


def check_docstring_examples(module):
    """The module's docstring examples run and print what they say."""
    import doctest

    import rnnkit.layers

    names = {name: getattr(rnnkit.layers, name) for name in dir(rnnkit.layers)}
    result = doctest.testmod(
        module, extraglobs={"np": np, **names}, optionflags=doctest.NORMALIZE_WHITESPACE
    )
    assert result.attempted > 0 and result.failed == 0, result
