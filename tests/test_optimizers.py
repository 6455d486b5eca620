"""`rnnkit.optimizers.LayerwiseAdam` against Adam written out in numpy (Kingma & Ba
2015, with a step count per variable as PyTorch's Adam keeps one per parameter)."""

from __future__ import annotations

import math

import keras
import numpy as np
import pytest

from rnnkit.optimizers import LayerwiseAdam, NoamSchedule, SlantedTriangular

BETA_1, BETA_2, EPSILON = 0.9, 0.999, 1e-7


class NumpyAdam:
    """Adam for one array: its own moments and step count."""

    def __init__(self, value: np.ndarray, learning_rate: float) -> None:
        self.value = value.astype(np.float64)
        self.learning_rate = learning_rate
        self.m = np.zeros_like(self.value)
        self.v = np.zeros_like(self.value)
        self.step = 0

    def update(self, gradient: np.ndarray) -> None:
        self.step += 1
        self.m += (gradient - self.m) * (1 - BETA_1)
        self.v += (gradient**2 - self.v) * (1 - BETA_2)
        alpha = (
            self.learning_rate
            * np.sqrt(1 - BETA_2**self.step)
            / (1 - BETA_1**self.step)
        )
        self.value -= alpha * self.m / (np.sqrt(self.v) + EPSILON)


def make_variables(rng):
    return [
        keras.Variable(rng.normal(size=(3, 4)).astype("float32"), name="kernel"),
        keras.Variable(rng.normal(size=(4,)).astype("float32"), name="bias"),
    ]


def gradient_sequence(rng, steps):
    return [
        [
            rng.normal(size=(3, 4)).astype("float32"),
            rng.normal(size=(4,)).astype("float32"),
        ]
        for _ in range(steps)
    ]


def test_without_factors_it_is_adam_and_keras_adam():
    rng = np.random.default_rng(0)
    ours, theirs = make_variables(rng), make_variables(np.random.default_rng(0))
    references = [NumpyAdam(v.numpy(), 0.01) for v in ours]
    layerwise = LayerwiseAdam(0.01)
    keras_adam = keras.optimizers.Adam(0.01)
    for gradients in gradient_sequence(rng, 6):
        layerwise.apply(gradients, ours)
        keras_adam.apply(gradients, theirs)
        for reference, gradient in zip(references, gradients, strict=True):
            reference.update(gradient)
    for variable, other, reference in zip(ours, theirs, references, strict=True):
        np.testing.assert_allclose(
            variable.numpy(), reference.value, rtol=1e-5, atol=1e-6
        )
        np.testing.assert_allclose(
            variable.numpy(), other.numpy(), rtol=1e-6, atol=1e-7
        )


def test_factors_scale_the_learning_rate_by_the_longest_matching_path():
    optimizer = LayerwiseAdam(0.02, factors={"encoder": 0.5, "encoder/inner": 0.1})
    assert optimizer.factor_of("encoder/kernel") == 0.5
    assert optimizer.factor_of("encoder/inner/kernel") == 0.1
    assert optimizer.factor_of("encoder_2/kernel") == 1.0
    assert optimizer.factor_of("head/bias") == 1.0

    rng = np.random.default_rng(1)
    variables = make_variables(rng)  # paths "kernel" and "bias"
    optimizer = LayerwiseAdam(0.02, factors={"kernel": 0.25})
    references = [
        NumpyAdam(variables[0].numpy(), 0.005),
        NumpyAdam(variables[1].numpy(), 0.02),
    ]
    for gradients in gradient_sequence(rng, 5):
        optimizer.apply(gradients, variables)
        for reference, gradient in zip(references, gradients, strict=True):
            reference.update(gradient)
    for variable, reference in zip(variables, references, strict=True):
        np.testing.assert_allclose(
            variable.numpy(), reference.value, rtol=1e-5, atol=1e-6
        )


def test_a_variable_that_joins_late_starts_as_a_fresh_adam():
    rng = np.random.default_rng(2)
    variables = make_variables(rng)
    start = variables[1].numpy().copy()
    references = [NumpyAdam(v.numpy(), 0.01) for v in variables]
    optimizer = LayerwiseAdam(0.01)
    optimizer.build(variables)
    gradients = gradient_sequence(rng, 8)
    # Steps 1-5 train the kernel only (the bias is frozen), steps 6-8 both.
    for step, pair in enumerate(gradients):
        trained = [0] if step < 5 else [0, 1]
        optimizer.apply([pair[i] for i in trained], [variables[i] for i in trained])
        for i in trained:
            references[i].update(pair[i])
        if step < 5:
            np.testing.assert_array_equal(variables[1].numpy(), start)
    for variable, reference in zip(variables, references, strict=True):
        np.testing.assert_allclose(
            variable.numpy(), reference.value, rtol=1e-5, atol=1e-6
        )


def test_keras_adam_oversteps_a_late_variable_which_layerwise_adam_does_not():
    """Why the step count is per variable: a layer unfrozen after an epoch (400 steps
    here) under Keras' Adam gets moments from zero but corrections from step 400, so
    under a constant gradient it moves ~3x the learning rate per step instead of 1x."""
    rng = np.random.default_rng(4)
    gradient_kernel = rng.normal(size=(3, 4)).astype("float32")
    gradient_bias = rng.normal(size=(4,)).astype("float32")
    moved = {}
    for name, optimizer in (
        ("keras", keras.optimizers.Adam(0.01)),
        ("layerwise", LayerwiseAdam(0.01)),
    ):
        kernel, bias = make_variables(np.random.default_rng(5))
        start = bias.numpy().copy()
        optimizer.build([kernel, bias])
        for _ in range(400):
            optimizer.apply([gradient_kernel], [kernel])
        for _ in range(10):
            optimizer.apply([gradient_kernel, gradient_bias], [kernel, bias])
        moved[name] = np.abs(bias.numpy() - start) / 0.01
    # A fresh Adam under a constant gradient steps exactly learning_rate per step.
    np.testing.assert_allclose(moved["layerwise"], 10.0, rtol=1e-3)
    assert moved["keras"].min() > 25.0


def test_it_saves_and_loads_with_a_model(tmp_path):
    model = keras.Sequential(
        [
            keras.Input((3,)),
            keras.layers.Dense(2, name="hidden"),
            keras.layers.Dense(1, name="out"),
        ]
    )
    model.compile(optimizer=LayerwiseAdam(0.01, factors={"hidden": 0.3}), loss="mse")
    x = np.random.default_rng(3).normal(size=(16, 3)).astype("float32")
    model.fit(x, x[:, :1], epochs=1, verbose=0)
    path = tmp_path / "model.keras"
    model.save(path)
    loaded = keras.saving.load_model(path)
    assert isinstance(loaded.optimizer, LayerwiseAdam)
    assert loaded.optimizer.factors == {"hidden": 0.3}
    steps = [int(s.numpy()) for s in loaded.optimizer._variable_steps]
    assert steps == [1] * len(model.trainable_variables)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"factors": {"embedding": -1.0}}, "must be >= 0"),
        ({"amsgrad": True}, "amsgrad"),
    ],
)
def test_bad_arguments_are_clear_errors(kwargs, message):
    with pytest.raises(ValueError, match=message):
        LayerwiseAdam(0.01, **kwargs)


def test_noam_schedule_follows_the_papers_formula():
    schedule = NoamSchedule(model_dim=256, warmup_steps=100, scale=2.0)
    for iterations in (0, 1, 49, 99, 100, 101, 1000, 123456):
        step = iterations + 1  # the paper counts steps from 1
        expected = 2.0 * 256**-0.5 * min(step**-0.5, step * 100**-1.5)
        assert float(schedule(iterations)) == pytest.approx(expected, rel=1e-6)
    # Rising for warmup_steps steps, falling after.
    rates = [float(schedule(i)) for i in range(300)]
    assert np.argmax(rates) == 99
    peaked = NoamSchedule.with_peak(5e-4, warmup_steps=40, model_dim=64)
    assert float(peaked(39)) == pytest.approx(5e-4, rel=1e-6)
    assert float(peaked(159)) == pytest.approx(5e-4 / 2, rel=1e-6)  # sqrt(40 / 160)


def test_noam_schedule_round_trips_through_keras_serialization():
    optimizer = keras.optimizers.Adam(NoamSchedule(128, 50, 0.5))
    restored = keras.optimizers.deserialize(keras.optimizers.serialize(optimizer))
    schedule = keras.optimizers.serialize(restored)["config"]["learning_rate"]
    assert schedule["class_name"] == "NoamSchedule"
    assert schedule["config"] == {"model_dim": 128, "warmup_steps": 50, "scale": 0.5}
    # At the first step, the restored optimizer's rate is the schedule's.
    expected = 0.5 * 128**-0.5 * 50**-1.5
    assert float(restored.learning_rate) == pytest.approx(expected, rel=1e-6)
    with pytest.raises(ValueError, match="warmup_steps"):
        NoamSchedule(128, 0)


def slanted_triangular_reference(t, total, cut_fraction, ratio, peak):
    """Howard & Ruder (2018), eq. 3, in plain Python (floored at the lowest rate)."""
    cut = math.floor(total * cut_fraction)
    if t < cut:
        p = t / cut
    else:
        p = 1 - (t - cut) / (cut * (1 / cut_fraction - 1))
    return peak * (1 + max(p, 0.0) * (ratio - 1)) / ratio


@pytest.mark.parametrize(
    "total, cut_fraction, ratio", [(1000, 0.1, 32.0), (1234, 0.2, 10.0), (57, 0.1, 32)]
)
def test_slanted_triangular_follows_the_papers_formula(total, cut_fraction, ratio):
    schedule = SlantedTriangular(3e-3, total, cut_fraction=cut_fraction, ratio=ratio)
    steps = np.arange(total + 20)
    rates = keras.ops.convert_to_numpy(schedule(steps))
    expected = [
        slanted_triangular_reference(t, total, cut_fraction, ratio, 3e-3) for t in steps
    ]
    np.testing.assert_allclose(rates, expected, rtol=1e-5)
    cut = math.floor(total * cut_fraction)
    assert int(np.argmax(rates)) == cut
    assert rates[cut] == pytest.approx(3e-3, rel=1e-6)
    assert rates[0] == pytest.approx(3e-3 / ratio, rel=1e-6)
    assert rates[-1] == pytest.approx(3e-3 / ratio, rel=1e-6)  # no lower after T


def test_slanted_triangular_round_trips_and_refuses_bad_arguments():
    optimizer = keras.optimizers.Adam(SlantedTriangular(1e-2, 200, 0.25, 16.0))
    restored = keras.optimizers.deserialize(keras.optimizers.serialize(optimizer))
    schedule = keras.optimizers.serialize(restored)["config"]["learning_rate"]
    assert schedule["class_name"] == "SlantedTriangular"
    assert schedule["config"] == {
        "peak": 1e-2, "total_steps": 200, "cut_fraction": 0.25, "ratio": 16.0
    }  # fmt: skip
    assert float(restored.learning_rate) == pytest.approx(1e-2 / 16, rel=1e-6)
    for kwargs, name in (
        ({"total_steps": 0}, "total_steps"),
        ({"total_steps": 10.0}, "total_steps"),
        ({"cut_fraction": 1.0}, "cut_fraction"),
        ({"ratio": 0.5}, "ratio"),
        ({"peak": 0.0}, "peak"),
    ):
        arguments = {"peak": 1e-3, "total_steps": 100, **kwargs}
        with pytest.raises(ValueError, match=f"`{name}`"):
            SlantedTriangular(**arguments)
