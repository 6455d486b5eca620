"""What the recurrent checks share: the layer under test and its references, inputs
and masks, outputs and gradients on every backend, and the mixed-precision check.

Public through `rnnkit.testing.recurrent`, which imports everything here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import keras
import numpy as np

from rnnkit.testing._numerics import as_list, assert_close, to_numpy, torch_leaf

BATCH, STEPS, FEATURES, UNITS = 3, 6, 5, 4


@dataclass
class RecurrentFamily:
    """A recurrent layer under test and its references (see the module docstring).

    Attributes:
        layer: the layer class, called as `layer(units, **options)`.
        cell: its cell class (`layer.cell_class` when not given), or None for a
            layer without a separate cell.
        keras_layer: a Keras built-in with the same weight layout, or None.
        num_states: the number of state tensors (2 for an LSTM).
        numpy_forward: the numpy equations, or None.
        numpy_bptt: hand-written numpy gradients, or None (central differences of
            `numpy_forward` then).
        name: used in file names and messages.
        reload_modules: the modules a fresh process imports before it reloads a
            saved model (those that register the layer); default: the layer's own.
    """

    layer: type
    cell: type | None = None
    keras_layer: type | None = None
    num_states: int = 1
    numpy_forward: Callable | None = None
    numpy_bptt: Callable | None = None
    name: str = ""
    reload_modules: tuple[str, ...] | None = None

    def __post_init__(self):
        if self.cell is None:
            self.cell = getattr(self.layer, "cell_class", None)
        self.name = self.name or self.layer.__name__.lower()
        if self.reload_modules is None:
            module = self.layer.__module__
            self.reload_modules = () if module == "__main__" else (module,)


def random_inputs(seed=0, batch=BATCH, steps=STEPS, features=FEATURES):
    return np.random.RandomState(seed).randn(batch, steps, features).astype("float32")


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
    return (
        [to_numpy(o) for o in outputs],
        [to_numpy(g) for g in weight_grads],
        to_numpy(input_grad),
        output_weights,
    )


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


def check_mixed_precision(family: RecurrentFamily, policy: str):
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
