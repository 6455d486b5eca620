"""benchmarks/gpu_check.py, the script a lent GPU runs: its parity rows hold on this
device (and would fail on a layer that drifts from Keras'), and its time guard names
the rows it leaves out instead of overrunning the loan."""

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import gpu_check  # noqa: E402


def collect():
    rows = []
    return rows, lambda **row: rows.append(row)


def test_parity_rows_pass_against_keras_and_measure_bfloat16():
    rows, emit = collect()
    gpu_check.parity_rows((3, 7, 4), emit)
    parity = [r for r in rows if r["section"] == "parity"]
    assert [(r["family"], r["masked"]) for r in parity] == [
        ("LSTM", False), ("LSTM", True), ("GRU", False), ("GRU", True),
    ]  # fmt: skip
    for row in parity:
        assert row["passed"], row
        assert 0 <= row["outputs_vs_keras"] <= gpu_check.PARITY_TOLERANCE
    bfloat16 = [r for r in rows if r["section"] == "bfloat16"]
    assert len(bfloat16) == 8
    # bfloat16 has 8 bits of mantissa: the outputs move, by less than a few percent.
    assert all(1e-5 < r["outputs_vs_float32"] < 0.05 for r in bfloat16), bfloat16


def test_gradients_read_from_one_sgd_step_are_the_gradients():
    import keras

    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    x = np.array([[1.0, 2.0], [3.0, -1.0]], "float32")
    y = np.array([[0.5], [1.0]], "float32")
    kernel, bias = model.get_weights()
    residual = x @ kernel + bias - y  # d(mean squared error)/d(prediction) = 2 r / n
    expected = [x.T @ (2 * residual / 2), (2 * residual / 2).sum(axis=0)]
    for got, want in zip(gpu_check.sgd_gradients(model, x, y), expected, strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(model.get_weights()[0], kernel)  # put back


@pytest.mark.parametrize("section", ["speed", "scan"])
def test_rows_past_the_deadline_are_named_not_measured(section):
    rows, emit = collect()
    if section == "speed":
        gpu_check.speed_rows([(100, 256)], 64, 5, 5, emit, deadline=0.0)
    else:
        gpu_check.scan_rows([256, 1024], 16, 256, 5, emit, deadline=0.0)
    assert rows and all("skipped" in row for row in rows)
    assert len(rows) == (4 if section == "speed" else 2 * len(gpu_check.SCAN_LAYERS))


def test_a_model_that_fails_gives_a_row_saying_why_and_the_run_goes_on(monkeypatch):
    """As Keras 3.15's cuDNN LSTM did under mixed_bfloat16 on JAX: the row names the
    error, the other layers are still measured."""
    import keras

    import rnnkit.layers

    class Broken(keras.layers.Layer):
        def __init__(self, *args, **kwargs):
            raise RuntimeError("Unknown output type\nbfloat16")

    monkeypatch.setattr(gpu_check, "FAMILIES", {"GRU": (rnnkit.layers.GRU, Broken)})
    rows, emit = collect()
    gpu_check.speed_rows([(3, 4)], 2, 1, 1, emit, deadline=float("inf"))
    failed = [row for row in rows if "failed" in row]
    assert len(failed) == 4  # masked or not, in both precisions
    assert failed[0]["failed"] == "RuntimeError: Unknown output type bfloat16"
    assert all(row["layer"] == "keras" for row in failed)
    assert not [row for row in rows if "ratio" in row]


def test_it_runs_where_tensorflow_is_not_installed():
    """The lent GPU machines hold PyTorch and JAX, not TensorFlow (its CUDA wheel is
    too large to carry there): the script, with the benchmark modules it imports,
    runs its toy sizes with TensorFlow unimportable (on PyTorch; JAX's run differs
    only in the backend branches, each of which imports its own framework)."""
    import os
    import subprocess

    root = Path(__file__).resolve().parents[1]
    without_tensorflow = (
        "import runpy, sys; sys.modules['tensorflow'] = None; "
        "sys.argv = ['gpu_check.py', '--quick']; "
        "runpy.run_path('gpu_check.py', run_name='__main__')"
    )
    paths = [str(root), str(root / "benchmarks"), os.environ.get("PYTHONPATH", "")]
    result = subprocess.run(
        [sys.executable, "-c", without_tensorflow],
        cwd=root / "benchmarks",
        env={
            **os.environ,
            "KERAS_BACKEND": "torch",
            "PYTHONPATH": os.pathsep.join(paths),
        },
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert "backend=torch  section=scan" in result.stdout
    assert "every parity row within" in result.stdout
