"""rnnkit.training.runtime: seeds, device and strategy; their errors name the fix."""

from __future__ import annotations

import pytest

from rnnkit.config import TrainConfig
from rnnkit.errors import ConfigError
from rnnkit.training.runtime import configure_runtime, device_summary, versions


def test_gpu_without_gpu_is_a_clear_error():
    import tensorflow as tf

    if tf.config.list_physical_devices("GPU"):
        pytest.skip("this machine has a GPU")
    with pytest.raises(
        ConfigError, match="train.device=gpu, but TensorFlow sees no GPU"
    ):
        configure_runtime(TrainConfig(device="gpu"))


def test_one_device_is_described_and_versions_are_recorded():
    strategy = configure_runtime(TrainConfig(device="cpu", strategy="one"))
    assert strategy.num_replicas_in_sync == 1
    assert device_summary(strategy) == "tensorflow, one CPU device"
    found = versions()
    assert {"python", "keras", "tensorflow", "numpy"} <= set(found)
