"""Tests for rnnkit.diagnostics.memory_tasks: the adding and copy-memory data, their
baselines, and the options of `rnnkit diagnose --task` (trained in tests/cli)."""

import math

import numpy as np
import pytest

from rnnkit.diagnostics import memory_tasks
from rnnkit.errors import RnnkitError


def test_adding_data_marks_one_value_in_each_half_and_sums_them():
    inputs, targets = memory_tasks.adding_data(9, 500, np.random.default_rng(0))
    assert inputs.shape == (500, 9, 2) and targets.shape == (500, 1)
    markers = inputs[:, :, 1]
    assert np.all(markers[:, :4].sum(axis=1) == 1)  # first half: 9 // 2 steps
    assert np.all(markers[:, 4:].sum(axis=1) == 1)
    np.testing.assert_allclose(
        targets[:, 0], (inputs[:, :, 0] * markers).sum(axis=1), rtol=1e-6
    )


def test_adding_baseline_has_the_closed_form_mse():
    # Predicting 1.0 for U1 + U2 costs Var(U1 + U2) = 1/6.
    _, targets = memory_tasks.adding_data(4, 100_000, np.random.default_rng(1))
    predicted = memory_tasks.baseline_outputs("adding", targets)
    error = memory_tasks.task_error("adding", predicted, targets)
    assert error == pytest.approx(1 / 6, abs=3e-3)  # 1/6 +- 5 standard errors
    assert memory_tasks.baseline_error("adding", 50) == pytest.approx(1 / 6)


@pytest.mark.parametrize("delay", [1, 7, 100])
def test_copy_data_and_its_baseline_cross_entropy(delay):
    inputs, targets = memory_tasks.copy_data(delay, 64, np.random.default_rng(2))
    assert inputs.shape == (64, delay + 20, 10) and targets.shape == (64, delay + 20)
    classes = inputs.argmax(axis=-1)
    assert np.all(inputs.sum(axis=-1) == 1)  # one-hot
    assert np.all((classes[:, :10] >= 1) & (classes[:, :10] <= 8))
    assert np.all(classes[:, delay + 9] == 9)  # the delimiter, after T - 1 blanks
    assert np.all(np.delete(classes[:, 10:], delay - 1, axis=1) == 0)
    np.testing.assert_array_equal(targets[:, -10:], classes[:, :10])
    assert np.all(targets[:, :-10] == 0)
    # Blanks, then uniform guesses over the 8 symbols: 10 log(8) / (T + 20) per step,
    # computed on the generated targets (a symbol out of place would make it inf).
    predicted = memory_tasks.baseline_outputs("copy", targets)
    expected = 10 * math.log(8) / (delay + 20)
    assert memory_tasks.task_error("copy", predicted, targets) == pytest.approx(
        expected, rel=1e-12
    )
    assert memory_tasks.baseline_error("copy", delay) == pytest.approx(expected)


@pytest.mark.parametrize("length", [10, 13, 64])
def test_selective_copy_data_and_its_baseline_cross_entropy(length):
    """The 10 symbols stand at random, ordered positions of the first T steps (a
    different place in every sequence), then the delimiter and 10 blanks; the
    targets recall them in order."""
    inputs, targets = memory_tasks.selective_copy_data(
        length, 256, np.random.default_rng(4)
    )
    steps = length + 11
    assert inputs.shape == (256, steps, 10) and targets.shape == (256, steps)
    classes = inputs.argmax(axis=-1)
    assert np.all(inputs.sum(axis=-1) == 1)  # one-hot
    assert np.all(classes[:, length] == 9) and np.all(classes[:, length + 1 :] == 0)
    data = classes[:, :length]
    assert np.all((data != 0).sum(axis=1) == 10)
    for row in range(256):
        np.testing.assert_array_equal(targets[row, -10:], data[row][data[row] != 0])
    assert np.all(targets[:, :-10] == 0)
    if length > 10:  # the positions differ between sequences
        assert len({tuple(np.flatnonzero(row)) for row in data}) > 1
    predicted = memory_tasks.baseline_outputs("selective_copy", targets)
    expected = 10 * math.log(8) / steps
    error = memory_tasks.task_error("selective_copy", predicted, targets)
    assert error == pytest.approx(expected, rel=1e-12)
    assert memory_tasks.baseline_error("selective_copy", length) == pytest.approx(
        expected
    )
    with pytest.raises(ValueError, match="selective_copy needs length >= 10"):
        memory_tasks.selective_copy_data(9, 1, np.random.default_rng(0))


@pytest.mark.parametrize("length", [1, 5, 16])
def test_mqar_data_and_its_baseline_cross_entropy(length):
    """T distinct keys with their values, then every key once more in a random
    order: the target at each query is that key's value."""
    inputs, targets = memory_tasks.mqar_data(length, 128, np.random.default_rng(5))
    assert inputs.shape == (128, 3 * length, 33) and targets.shape == (128, 3 * length)
    assert np.all(inputs.sum(axis=-1) == 1)
    tokens = inputs.argmax(axis=-1)
    keys, values = tokens[:, 0 : 2 * length : 2], tokens[:, 1 : 2 * length : 2]
    assert np.all((keys >= 1) & (keys <= 16))
    assert np.all((values >= 17) & (values <= 32))
    assert np.all(targets[:, : 2 * length] == 0)
    for row in range(128):
        assert len(set(keys[row])) == length  # distinct keys
        pairs = dict(zip(keys[row], values[row], strict=True))
        queries = tokens[row, 2 * length :]
        assert sorted(queries) == sorted(keys[row])  # each key asked once
        assert [pairs[k] for k in queries] == list(targets[row, 2 * length :])
    if length > 2:  # asked in another order than stored
        assert any(
            list(tokens[row, 2 * length :]) != list(keys[row]) for row in range(128)
        )
    predicted = memory_tasks.baseline_outputs("mqar", targets)
    error = memory_tasks.task_error("mqar", predicted, targets)
    assert error == pytest.approx(math.log(16) / 3, rel=1e-12)
    assert memory_tasks.baseline_error("mqar", length) == pytest.approx(error)
    with pytest.raises(ValueError, match="mqar needs length <= 16"):
        memory_tasks.mqar_data(17, 1, np.random.default_rng(0))


def test_task_error_of_a_perfect_copy_is_near_zero():
    _, targets = memory_tasks.copy_data(5, 8, np.random.default_rng(3))
    logits = 50.0 * np.eye(10)[targets]
    assert memory_tasks.task_error("copy", logits, targets) < 1e-12


@pytest.mark.parametrize(
    "value, message",
    [("10,0", "whole numbers of 2 or more"), ("ten", "e.g. --lengths 10,25,50")],
)
def test_bad_lengths_name_the_fix(value, message):
    with pytest.raises(RnnkitError, match=message):
        memory_tasks.parse_lengths(value)


def test_unknown_names_list_the_valid_ones():
    with pytest.raises(RnnkitError, match="unknown 'copyy'.*adding, copy"):
        memory_tasks.parse_list("adding,copyy", "--task", memory_tasks.TASKS)
    assert memory_tasks.parse_list("copy, adding", "--task", memory_tasks.TASKS) == [
        "copy",
        "adding",
    ]
