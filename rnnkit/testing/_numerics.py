"""Comparisons, tensors and check naming shared by the layer checks, on any Keras
backend."""

from __future__ import annotations

import inspect
import tempfile
from collections.abc import Callable
from pathlib import Path

import keras
import numpy as np


def on_cudnn() -> bool:
    """Whether the PyTorch backend runs the layers' kernels through cuDNN (a GPU)."""
    if keras.backend.backend() != "torch":
        return False
    import torch

    return torch.cuda.is_available()


# cuDNN's float32 recurrent kernels are accurate to about 2e-5 of the values against
# float64 (outputs and gradients, measured on an H200), a CPU's float32 to 1e-7.
TOLERANCE = 1e-4 if on_cudnn() else 1e-5


def as_list(outputs):
    return list(outputs) if isinstance(outputs, (list, tuple)) else [outputs]


def to_numpy(value):
    # Through Keras: a PyTorch tensor in autograd or on a GPU refuses np.asarray.
    return keras.ops.convert_to_numpy(value)


def torch_leaf(array, requires_grad=True):
    """`array` as a PyTorch tensor on the device Keras computes on (a GPU where one
    is visible), a leaf that autograd differentiates; `torch.tensor(array)` would
    stay on the CPU beside weights on the GPU."""
    return keras.ops.convert_to_tensor(array).requires_grad_(requires_grad)


def assert_close(actual, expected, tolerance=TOLERANCE, what=""):
    """Equal within `tolerance` times the larger of 1 and the reference's largest
    magnitude. A weight gradient sums products over batch and time; summed in another
    order (cuDNN on a GPU) its float32 value moves with its size (on an H200 the
    input kernels' gradients moved by 1e-5 to 7e-5)."""
    actual, expected = to_numpy(actual), to_numpy(expected)
    assert actual.shape == expected.shape, f"{what}: {actual.shape} != {expected.shape}"
    if not actual.size:
        return
    difference = float(np.max(np.abs(actual - expected)))
    size = float(np.max(np.abs(expected)))
    assert difference <= tolerance * max(1.0, size), (
        f"{what}: max abs diff {difference:.2e} on values up to {size:.2g} "
        f"(tolerance {tolerance:.0e})"
    )


def named_check(
    name: str, run: Callable[[Path], object], tmp_dir=None
) -> Callable[[], None]:
    """A check without arguments: `run(folder)` from a fixed random seed (its draws do
    not depend on what ran before), in `tmp_dir` or a temporary folder of its own,
    with any failure raised as `AssertionError` "check NAME failed: ..." (an error
    of another type is named by its type: `TypeError: ...` when the layer does not
    take an argument the check gives it), the original kept as its cause."""

    def check() -> None:
        keras.utils.set_random_seed(0)
        with tempfile.TemporaryDirectory(prefix=f"rnnkit_{name}_") as scratch:
            try:
                run(Path(tmp_dir) if tmp_dir is not None else Path(scratch))
            except AssertionError as failure:
                raise AssertionError(f"check {name} failed: {failure}") from failure
            except Exception as error:
                first = (str(error).strip().splitlines() or [""])[0]
                raise AssertionError(
                    f"check {name} failed: {type(error).__name__}: {first}"
                ) from error

    check.__name__ = f"check_{name}"
    return check


def assert_config_names_every_argument(layer, config: dict) -> None:
    """Every named argument of the layer class's `__init__` is a key of `config`
    (one that `get_config` leaves out comes back as its default after a reload);
    those that default to None may be left out, as Keras leaves out an unset
    `activity_regularizer`."""
    parameters = inspect.signature(type(layer).__init__).parameters.values()
    named = [
        p.name
        for p in parameters
        if p.name != "self"
        and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
        and p.default is not None
    ]
    missing = [name for name in named if name not in config]
    assert not missing, f"get_config() lacks the constructor arguments {missing}"
