"""Checks for attention layers: rnnkit's own, and the ones you write.

    from rnnkit.testing import check_attention_layer
    check_attention_layer(
        lambda: MyAttention(units=4),
        inputs={"query": query, "value": value},
        numpy_forward=my_equations,  # (*weights, query, value) -> output
    )

`check_attention_layer` runs the checks in order; `attention_layer_checks` returns
them as (name, function) pairs for one pytest test per check. Everything runs on the
active Keras backend (TensorFlow, JAX or PyTorch). Layer gradients come from
`tf.GradientTape`, `jax.grad` on the layer's stateless call or `torch.autograd.grad`;
the reference gradients are central finite differences of the float64 numpy
equations (`rnnkit.testing.references.numerical_gradients`).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

import keras
import numpy as np

from rnnkit.testing._numerics import (
    assert_close,
    assert_config_names_every_argument,
    named_check,
    torch_leaf,
)
from rnnkit.testing._reload import check_reloads_in_fresh_process
from rnnkit.testing._selection import refuse_unknown_checks, run_checks
from rnnkit.testing.references import numerical_gradients

BATCH, QUERY_STEPS, VALUE_STEPS = 2, 3, 5
GRADIENT_TOLERANCE = 1e-4


def random_array(shape, seed, scale=1.0):
    return (scale * np.random.RandomState(seed).randn(*shape)).astype("float32")


def padding_mask(batch=BATCH, steps=VALUE_STEPS):
    """(batch, steps) booleans, right-padded: row b keeps steps - 2 * b positions."""
    lengths = np.maximum(steps - 2 * np.arange(batch), 1)
    return np.arange(steps)[None, :] < lengths[:, None]


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
    assert not mask.all(), (
        "no padded position to check: give at least two sequences of three steps"
    )
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
    """`get_config()` names every constructor argument, and `from_config` of it gives
    a layer with the same config."""
    config = layer.get_config()
    assert_config_names_every_argument(layer, config)
    assert type(layer).from_config(config).get_config() == config, (
        "from_config(get_config()) differs"
    )


def _model_of(make_layer, inputs, call_kwargs):
    """A functional model: one `keras.Input` per entry of `inputs`, the layer, and a
    Dense(1) head over its (first) output."""
    tensors = {
        name: keras.Input(np.shape(array)[1:], name=name)
        for name, array in inputs.items()
    }
    output = _first(make_layer()(**tensors, **call_kwargs))
    return keras.Model(tensors, keras.layers.Dense(1)(output))


def _accepts(make_layer, *names) -> bool:
    parameters = inspect.signature(make_layer().call).parameters
    return all(name in parameters for name in names)


def attention_layer_checks(
    make_layer: Callable[[], keras.layers.Layer],
    inputs: Mapping[str, np.ndarray],
    *,
    numpy_forward: Callable | None = None,
    call_kwargs: Mapping | None = None,
    reload_modules: Iterable[str] | None = None,
    checks: Iterable[str] | None = None,
    skip: Iterable[str] = (),
    tmp_dir: str | Path | None = None,
) -> list[tuple[str, Callable[[], None]]]:
    """The checks of an attention layer, as (name, function) pairs.

    Args:
        make_layer: returns a new layer (the same configuration each time).
        inputs: the float inputs by call argument name ({"query": ..., "value":
            ...}), (batch, steps, features) arrays; they are differentiated.
        numpy_forward: `numpy_forward(*weights, *inputs.values()) -> output`, the
            equations in float64 (`weights` in `get_weights()` order), or None.
        call_kwargs: further call arguments (masks, flags), not differentiated.
        reload_modules: the modules a fresh process imports before reloading a saved
            model; default the layer's module.
        checks: the names to keep (default all that apply).
        skip: names to leave out (say why where you call it).
        tmp_dir: where saved models go (default: a temporary folder per check).

    The checks: `numpy_outputs_and_gradients` (with `numpy_forward`: the output and
    the gradients, weights and inputs, against central differences of the
    equations), `padded_positions` (for a layer whose call takes `query`, `value`,
    `value_mask` and `return_attention_scores`: padded keys get zero weight and
    their values move nothing), `mixed_precision` (float16 and bfloat16 within
    `MIXED_TOLERANCES` of float32), `config_round_trip`, `fresh_process_reload` (a
    model of the layer saved to .keras reloads in a fresh process) and
    `training_reduces_loss` (one SGD step lowers the loss on a batch).
    """
    inputs = {name: np.asarray(array, "float32") for name, array in inputs.items()}
    call_kwargs = dict(call_kwargs or {})
    module = type(make_layer()).__module__
    modules = (
        tuple(reload_modules)
        if reload_modules is not None
        else (() if module == "__main__" else (module,))
    )

    def numpy_parity(folder):
        check_gradients_match_numpy(make_layer(), inputs, numpy_forward, **call_kwargs)

    def padded_positions(folder):
        check_padded_positions_do_not_move(
            make_layer(), inputs["query"], inputs["value"], **call_kwargs
        )

    def mixed_precision(folder):
        for policy in MIXED_TOLERANCES:
            check_mixed_precision(make_layer, inputs, policy, **call_kwargs)

    def config_round_trip(folder):
        layer = make_layer()
        layer(**inputs, **call_kwargs)
        check_config_round_trip(layer)

    def fresh_process_reload(folder):
        check_reloads_in_fresh_process(
            _model_of(make_layer, inputs, call_kwargs),
            inputs,
            folder / "model.keras",
            modules=modules,
            package=module.split(".")[0],
        )

    def training_reduces_loss(folder):
        model = _model_of(make_layer, inputs, call_kwargs)
        targets = random_array(tuple(model(inputs).shape), seed=13)
        check_training_step_reduces_loss(model, inputs, targets)

    available = {
        "numpy_outputs_and_gradients": (numpy_parity, numpy_forward is not None),
        "padded_positions": (
            padded_positions,
            {"query", "value"} <= set(inputs)
            and _accepts(make_layer, "value_mask", "return_attention_scores"),
        ),
        "mixed_precision": (mixed_precision, True),
        "config_round_trip": (config_round_trip, True),
        "fresh_process_reload": (fresh_process_reload, True),
        "training_reduces_loss": (training_reduces_loss, True),
    }
    wanted = list(available) if checks is None else list(checks)
    skip = list(skip)
    refuse_unknown_checks([*wanted, *skip], list(available))
    selected = []
    for name, (run, applies) in available.items():
        if name not in wanted or name in skip:
            continue
        if not applies:
            if checks is not None:
                raise ValueError(f"check {name} does not apply to this layer")
            continue
        selected.append((name, named_check(name, run, tmp_dir)))
    return selected


def check_attention_layer(make_layer, inputs, **kwargs) -> list[str]:
    """Runs `attention_layer_checks(make_layer, inputs, **kwargs)` in order; returns
    the names of the checks that ran. The first failure raises `AssertionError`
    "check NAME failed: what differs, by how much"."""
    return run_checks(attention_layer_checks(make_layer, inputs, **kwargs))
