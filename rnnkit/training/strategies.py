"""Which `tf.distribute` strategy a run trains under (`make_strategy`).

`train.strategy` picks it:

- `auto`: `MirroredStrategy` over all visible GPUs when there are several, else one
  device;
- `one`: one device;
- `mirrored`: `MirroredStrategy` over the GPUs of `train.devices`, or over all visible
  GPUs (`runner.run(..., strategy=...)` takes any other strategy, such as one over
  logical CPU devices, which is how the tests mirror without GPUs);
- `multiworker`: `MultiWorkerMirroredStrategy` over the machines that `TF_CONFIG` lists
  (rnnkit.training.cluster writes it from `--workers` and `--worker-index`).

`train.batch_size` is the batch of one replica: the global batch of a step is that
times the replicas in sync, and the learning rate is never changed to match
(`describe_batch` says so in the log).

TensorFlow's multi-worker chief waits for the other workers without a limit; here both
the chief and the workers give up after `train.worker_timeout` with a `ClusterError`.
"""

from __future__ import annotations

import json
import logging
import os
import time
from typing import TYPE_CHECKING, Any

from rnnkit.errors import ClusterError, ConfigError
from rnnkit.training.cluster import (
    TF_CONFIG,
    cluster_addresses,
    cluster_from_environment,
    parse_address,
)

if TYPE_CHECKING:
    from rnnkit import config as config_lib

log = logging.getLogger("rnnkit")


def make_strategy(train: config_lib.TrainConfig) -> Any:
    """The `tf.distribute` strategy that `train.strategy` and `train.devices` ask for.

    Call it before TensorFlow runs anything (the multi-worker server can only be set
    up then).
    """
    import tensorflow as tf

    if train.devices and train.strategy != "mirrored":
        raise ConfigError(
            f"train.devices lists devices, but train.strategy={train.strategy}; use "
            "--strategy mirrored with them, or leave train.devices empty"
        )
    if train.strategy == "multiworker":
        return _multiworker(train)
    visible_gpus = tf.config.get_visible_devices("GPU")
    if train.strategy == "one":
        return tf.distribute.get_strategy()
    if train.strategy == "auto":
        if len(visible_gpus) > 1:
            return tf.distribute.MirroredStrategy()
        return tf.distribute.get_strategy()
    devices = [_device_name(name) for name in train.devices]
    if not devices:
        if not visible_gpus:
            raise ConfigError(
                "train.strategy=mirrored without train.devices mirrors over the "
                "visible GPUs, and TensorFlow sees none; use --strategy one (or auto) "
                "on this machine"
            )
        return tf.distribute.MirroredStrategy()
    for name in devices:
        index = int(name.rsplit(":", 1)[1])
        if index >= len(visible_gpus):
            raise ConfigError(
                f"train.devices names gpu:{index}, but TensorFlow sees "
                f"{len(visible_gpus)} GPU(s)"
            )
    if len(set(devices)) != len(devices):
        raise ConfigError(f"train.devices lists a device twice: {list(train.devices)}")
    return tf.distribute.MirroredStrategy(devices=devices)


def _device_name(name: str) -> str:
    kind, _, index = name.strip().lower().replace("/device:", "").partition(":")
    if kind != "gpu" or not index.isdigit():
        raise ConfigError(
            f"train.devices: {name!r} is not a GPU; write gpu:N, e.g. --set "
            "train.devices=gpu:0,gpu:1 (to try mirroring on a CPU, pass "
            "runner.run a MirroredStrategy over logical CPU devices; see the "
            "distributed guide)"
        )
    return f"/device:GPU:{int(index)}"


def _multiworker(train: config_lib.TrainConfig) -> Any:
    import tensorflow as tf

    workers, index = cluster_from_environment()
    log.info(
        "worker %d of %d (%s); waiting up to %g s for the others "
        "(train.worker_timeout)",
        index,
        workers,
        "the chief" if index == 0 else "not the chief",
        train.worker_timeout,
    )
    joined = (
        f"not every worker of TF_CONFIG joined within {train.worker_timeout:g} s "
        f"(train.worker_timeout); this is worker {index} of {workers}: start the "
        "same command on every machine with its own --worker-index, and check the "
        "addresses and the firewall"
    )
    if index == 0:
        # TensorFlow's chief waits for the others without a limit (and holds the
        # interpreter while it does), so it first waits here, with one, for every
        # other worker to listen: a worker listens while it waits for the chief.
        _wait_for_listeners(cluster_addresses()[1:], train.worker_timeout, joined)
    else:
        _limit_registration(train.worker_timeout)
    options = tf.distribute.experimental.CommunicationOptions(
        timeout_seconds=train.worker_timeout
    )
    try:
        return tf.distribute.MultiWorkerMirroredStrategy(communication_options=options)
    except tf.errors.OpError as error:
        if isinstance(error, tf.errors.DeadlineExceededError):
            raise ClusterError(joined) from None
        raise cluster_error(error) from None


def _wait_for_listeners(addresses: list[str], seconds: float, message: str) -> None:
    import socket

    deadline = time.monotonic() + seconds
    waiting = [(text, parse_address(text, "TF_CONFIG")) for text in addresses]
    while waiting:
        address = waiting[0][1]
        try:
            with socket.create_connection(
                (address.host.strip("[]"), address.port), timeout=1.0
            ):
                waiting.pop(0)
                continue
        except OSError:
            pass
        if time.monotonic() > deadline:
            silent = ", ".join(text for text, _ in waiting)
            raise ClusterError(f"{message} (no answer from {silent})")
        time.sleep(0.25)


def _limit_registration(seconds: float) -> None:
    """Bounds a worker's wait for the chief by `seconds` (TensorFlow's coordination
    service; its own default is shorter). Best effort: a private TensorFlow API."""
    from rnnkit._keras_private import limit_cluster_registration

    limit_cluster_registration(json.loads(os.environ[TF_CONFIG])["cluster"], seconds)


def is_multiworker(strategy: Any) -> bool:
    """True for TensorFlow's multi-worker strategy (under any of its names)."""
    return type(strategy).__name__ in (
        "MultiWorkerMirroredStrategy",
        "CollectiveAllReduceStrategy",
        "_CollectiveAllReduceStrategyExperimental",
    )


def is_chief(strategy: Any) -> bool:
    """True except on the workers of a multi-worker strategy other than worker 0."""
    if not is_multiworker(strategy):
        return True
    return bool(strategy.extended.should_checkpoint)


def cluster_error(error: BaseException) -> BaseException:
    """A one-line error for a lost worker; any other error as it is."""
    import tensorflow as tf

    lost = (
        tf.errors.UnavailableError,
        tf.errors.DeadlineExceededError,
        tf.errors.CancelledError,
        tf.errors.AbortedError,
    )
    if isinstance(error, lost):
        first = str(error).strip().splitlines()[0] if str(error).strip() else ""
        return ClusterError(
            "lost a worker of the cluster (it stopped, or did not answer within "
            "train.worker_timeout); training stopped on this worker too. Start every "
            "worker again: the chief with --resume RUN_DIR continues from the last "
            f"finished epoch. TensorFlow said: {first[:300]}"
        )
    return error


def describe_batch(per_replica: int, strategy: Any, learning_rate: float) -> str:
    """The global batch of a step and the learning rate, for the log."""
    replicas = strategy.num_replicas_in_sync
    return (
        f"global batch {per_replica * replicas} = {per_replica} per replica x "
        f"{replicas} replica(s); learning rate {learning_rate:g}, not scaled"
    )
