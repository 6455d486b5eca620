"""Where and how a run computes: seeds, device, precision and strategy.

`configure_runtime(train)` is called before a model is built: it seeds every generator
with `train.seed`, applies `train.device` and the dtype policy of `train.precision`, and
returns the `tf.distribute` strategy that `train.strategy` asks for
(rnnkit.training.strategies). `keeps_dtype_policy` gives the policy back afterwards.
`device_summary` and `versions` describe the result for the log and `run.json`.
`calibrated` makes a run follow this machine's `rnnkit calibrate` measurements.
`stop_on_sigterm` makes SIGTERM stop a run as Ctrl-C does.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import platform
import signal
import threading
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, TypeVar

from rnnkit.errors import ConfigError
from rnnkit.training.cluster import cluster_from_environment
from rnnkit.training.strategies import is_multiworker, make_strategy

if TYPE_CHECKING:
    from rnnkit import config as config_lib

log = logging.getLogger("rnnkit")

Function = TypeVar("Function", bound=Callable[..., Any])


def calibrated(function: Function) -> Function:
    """Runs `function` with this machine's cached `rnnkit calibrate` measurements
    loaded (`rnnkit.layers.calibration.loaded`), and what was loaded before restored
    after it. Training and tuning are where rnnkit reads the cache: the layers never
    do, and what it changes is only which time loop is compiled, never a number."""

    @functools.wraps(function)
    def with_calibration(*args: Any, **kwargs: Any) -> Any:
        from rnnkit.layers import calibration

        with calibration.loaded():
            return function(*args, **kwargs)

    with_calibration.loads_calibration = True
    return with_calibration  # type: ignore[return-value]


def keeps_dtype_policy(function: Function) -> Function:
    """Runs `function` and then restores the global Keras dtype policy it found.

    `configure_runtime` sets the policy of `train.precision` for the whole process
    (Keras has only a global one); a run or a search must not leave it behind for
    whatever the process does next, such as a second run in float32.
    """

    @functools.wraps(function)
    def with_policy_restored(*args: Any, **kwargs: Any) -> Any:
        import keras

        previous = keras.config.dtype_policy()
        try:
            return function(*args, **kwargs)
        finally:
            keras.config.set_dtype_policy(previous)

    with_policy_restored.keeps_dtype_policy = True
    return with_policy_restored  # type: ignore[return-value]


@contextlib.contextmanager
def stop_on_sigterm() -> Iterator[None]:
    """Within the block, SIGTERM raises KeyboardInterrupt, as Ctrl-C (SIGINT) does.

    A job scheduler or `kill` then stops a run cleanly: the temporary files of a write
    in progress are removed and the run directory stays resumable with `--resume`,
    where SIGTERM's default action would end the process on the spot. A handler that
    someone else installed is left alone, and so is a thread other than the main
    one (only it may install handlers).
    """
    if (
        threading.current_thread() is not threading.main_thread()
        or signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL
    ):
        yield
        return

    def interrupt(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


def configure_runtime(train: config_lib.TrainConfig, one_device: bool = False) -> Any:
    """Seeds every generator, picks the device and precision; returns the strategy.

    Call it before building a model. The precision is Keras' global dtype policy
    (`train.dtype_policy()`); under mixed_float16 `Model.compile` wraps the optimizer
    in a `LossScaleOptimizer` itself. Wrap the caller in `keeps_dtype_policy`.
    Two runs in fresh processes with the same seed and device give identical
    weights and metrics on CPU. `one_device`: the model cannot
    be mirrored, so `train.strategy=auto` keeps one device even on several GPUs.
    """
    import keras

    keras.utils.set_random_seed(train.seed)
    keras.config.set_dtype_policy(train.dtype_policy())
    if keras.backend.backend() != "tensorflow":
        if train.device == "gpu" and not _backend_has_gpu():
            raise ConfigError("train.device=gpu, but the Keras backend sees no GPU")
        if train.strategy in ("mirrored", "multiworker"):
            raise ConfigError(
                f"train.strategy={train.strategy} uses tf.distribute, which needs the "
                f"TensorFlow backend (KERAS_BACKEND is {keras.backend.backend()})"
            )
        return None
    import tensorflow as tf

    tf.config.experimental.enable_op_determinism()
    gpus = tf.config.list_physical_devices("GPU")
    if train.device == "gpu" and not gpus:
        raise ConfigError(
            "train.device=gpu, but TensorFlow sees no GPU "
            "(use --device cpu, or auto to take a GPU only when there is one)"
        )
    if train.device == "cpu" and gpus:
        try:
            tf.config.set_visible_devices([], "GPU")
        except RuntimeError:
            if tf.config.get_visible_devices("GPU"):
                raise ConfigError(
                    "--device cpu must be chosen before TensorFlow starts using the "
                    "GPU; run it in a fresh process"
                ) from None
    if one_device and train.strategy == "auto":
        if len(tf.config.get_visible_devices("GPU")) > 1:
            log.info("train.strategy=auto: one GPU, as this model cannot be mirrored")
        return tf.distribute.get_strategy()
    return make_strategy(train)


def _backend_has_gpu() -> bool:
    import keras

    if keras.backend.backend() == "jax":
        import jax

        return any(device.platform == "gpu" for device in jax.devices())
    if keras.backend.backend() == "torch":
        import torch

        return torch.cuda.is_available()
    return False


def device_summary(strategy: Any) -> str:
    """A short description of where training runs, for logs and run.json."""
    import keras

    backend = keras.backend.backend()
    if strategy is None or strategy.num_replicas_in_sync == 1:
        if backend == "tensorflow":
            import tensorflow as tf

            kind = "GPU" if tf.config.get_visible_devices("GPU") else "CPU"
            return f"{backend}, one {kind} device"
        return f"{backend}, default device"
    devices = ", ".join(strategy.extended.worker_devices)
    if is_multiworker(strategy):
        workers, index = cluster_from_environment()
        return (
            f"MultiWorkerMirroredStrategy, {strategy.num_replicas_in_sync} replicas "
            f"on {workers} workers; this is worker {index}, on {devices}"
        )
    return f"{type(strategy).__name__} over {devices}"


def versions() -> dict[str, str]:
    """Versions of Python and the libraries a run depends on."""
    from importlib.metadata import PackageNotFoundError, version

    found = {"python": platform.python_version()}
    for name in ("rnnkit", "keras", "tensorflow", "numpy", "keras-tuner"):
        with contextlib.suppress(PackageNotFoundError):
            found[name] = version(name)
    return found
