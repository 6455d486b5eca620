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


def test_runs_and_searches_follow_the_cached_calibration(tmp_path, monkeypatch):
    """The cache is read where training and tuning start, not by the layers."""
    from rnnkit.layers import LSTM, calibration
    from rnnkit.training import runner
    from rnnkit.training.runtime import calibrated
    from rnnkit.tuning import search, worker

    monkeypatch.setenv("RNNKIT_CACHE_DIR", str(tmp_path))
    cell = LSTM(8).cell
    from tests.test_calibration import measured

    calibration.record([measured(LSTM, "inference", 6, 8, True)])
    assert calibration.measured_choice(cell, False, 6, 8) is None

    @calibrated
    def choice():
        return calibration.measured_choice(cell, False, 6, 8)

    assert choice() is True
    assert calibration.measured_choice(cell, False, 6, 8) is None  # restored after
    for entry in (runner.run, search.tune, worker.tune_worker):
        assert getattr(entry, "loads_calibration", False), entry.__qualname__


def test_runs_and_searches_give_the_dtype_policy_back():
    """train.precision sets Keras' global policy; a run leaves the one it found."""
    import keras

    from rnnkit.config import TrainConfig
    from rnnkit.training import runner
    from rnnkit.training.runtime import configure_runtime, keeps_dtype_policy
    from rnnkit.tuning import search, worker

    @keeps_dtype_policy
    def configured(precision):
        configure_runtime(TrainConfig(precision=precision))
        return keras.config.dtype_policy().name

    assert configured("mixed_bfloat16") == "mixed_bfloat16"
    assert keras.config.dtype_policy().name == "float32"
    for entry in (runner.run, search.tune, worker.tune_worker):
        assert getattr(entry, "keeps_dtype_policy", False), entry.__qualname__
