"""Full float32 for the layer tests on a GPU. There, float32 matrix products may run
in TF32 (10-bit mantissas, differences near 1e-3): PyTorch's cuDNN kernels do by
default, as do TensorFlow and JAX's default precision. These tests check the layers'
equations to 1e-5 against float32 references (numpy, Keras, PyTorch), so they ask
each backend for float32 products. On a CPU this changes nothing.

On JAX the layer tests also share compiled programs: many tests compile the same
programs (Keras' LSTM and GRU with the same shapes, the same rnnkit loops), and JAX
compiles again for every new layer object. A persistent compilation cache in the
run's temporary folder, shared by the xdist workers and the fresh processes they
start, compiles each program once per run: tests/layers/test_gru.py and test_lstm.py
took 93-105 s instead of 132-133 s on a 2-core CPU."""

import os

import keras
import pytest

if keras.backend.backend() == "torch":
    import torch

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
elif keras.backend.backend() == "jax":
    import jax

    jax.config.update("jax_default_matmul_precision", "highest")
else:
    import tensorflow as tf

    tf.config.experimental.enable_tensor_float_32_execution(False)


@pytest.fixture(scope="session", autouse=True)
def jax_compilation_cache(tmp_path_factory):
    """JAX's persistent compilation cache in a folder of this run (the xdist workers'
    common temporary folder), every program cached however quick its compilation;
    set for the fresh processes too (JAX_COMPILATION_CACHE_DIR)."""
    if keras.backend.backend() != "jax":
        yield None
        return
    import jax

    base = tmp_path_factory.getbasetemp()
    shared = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    folder = shared / "jax-compilation-cache"
    folder.mkdir(exist_ok=True)
    jax.config.update("jax_compilation_cache_dir", str(folder))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    with pytest.MonkeyPatch.context() as patch:  # restores the variables at the end
        patch.setenv("JAX_COMPILATION_CACHE_DIR", str(folder))
        patch.setenv("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")
        yield folder
