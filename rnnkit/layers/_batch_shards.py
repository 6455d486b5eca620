"""The batch in shards: the generic loop run as independent loops over slices of it.

A recurrent step is a few small matmuls and element-wise work. On TensorFlow several
loops over consecutive slices of the batch run at once, one per inter-op thread, and
keep the cores busier than one loop that splits each small operation over all of
them. The results are those of one loop over the whole batch. How many shards pay,
and the measurements behind `MIN_SHARD_ROWS`: docs/performance.md, "One loop per
core: `batch_shards`".
"""

from __future__ import annotations

import math
import os
from pathlib import Path

import keras

from rnnkit._keras_private import get_global_attribute

# With `batch_shards=None`, a shard gets at least this many rows (the smallest
# measured to pay: docs/performance.md).
MIN_SHARD_ROWS = 8

# Where the cgroup file systems are mounted: in a container, its own cgroup.
CGROUP_ROOT = "/sys/fs/cgroup"
# Which cgroups the process is in (one line per hierarchy).
PROC_CGROUP = "/proc/self/cgroup"


def _inter_op_threads() -> int:
    """The threads TensorFlow runs independent operations on at once: its inter-op
    pool, by default one per core this process may use, and never more than the
    CPUs a cgroup quota grants it (`cgroup_cpus`): TensorFlow sizes its pool by the
    cores it may be scheduled on, which a container's quota does not reduce."""
    import tensorflow as tf

    threads = tf.config.threading.get_inter_op_parallelism_threads()
    if threads <= 0:
        try:
            threads = len(os.sched_getaffinity(0))
        except AttributeError:  # not on Linux
            threads = os.cpu_count() or 1
    quota = cgroup_cpus()
    return threads if quota is None else min(threads, quota)


def cgroup_cpus(
    root: str | os.PathLike | None = None,
    membership: str | os.PathLike | None = None,
) -> int | None:
    """The CPUs the cgroup CPU quotas grant this process, rounded up and at least
    1, or None where no quota is set or none can be read.

    The quotas are read from the process's own cgroup (as `membership`, default
    `PROC_CGROUP`, names it) and every cgroup above it up to the mount `root`
    (default `CGROUP_ROOT`), and the smallest counts: a systemd slice or a
    Kubernetes pod limits the cgroups below it, and a container sees its own cgroup
    as the root. cgroup v2: `cpu.max` holds "QUOTA PERIOD" in microseconds ("200000
    100000": 2 CPUs; "max 100000": no quota). cgroup v1: `cpu.cfs_quota_us` over
    `cpu.cfs_period_us` in the `cpu` (or `cpu,cpuacct`) hierarchy, -1: no quota."""
    root = Path(CGROUP_ROOT if root is None else root)
    own = _own_cgroups(Path(PROC_CGROUP if membership is None else membership))
    limits = [_read(level / "cpu.max") for level in _levels(root, own.get("", "/"))]
    limits = [limit for limit in limits if limit is not None]
    if limits:  # cgroup v2
        cpus = [_quota_cpus(*_quota_period(limit)) for limit in limits]
    else:
        cpus = []
        for hierarchy in ("cpu", "cpu,cpuacct"):
            for level in _levels(root / hierarchy, own.get("cpu", "/")):
                quota = _read(level / "cpu.cfs_quota_us")
                if quota is not None:
                    period = _read(level / "cpu.cfs_period_us")
                    cpus.append(_quota_cpus(quota, period or ""))
    cpus = [count for count in cpus if count is not None]
    return min(cpus) if cpus else None


def _own_cgroups(membership: Path) -> dict[str, str]:
    """The process's cgroup paths from /proc/self/cgroup: "" for cgroup v2
    ("0::/path"), "cpu" for the v1 hierarchy holding the cpu controller."""
    own = {}
    for line in (_read(membership) or "").splitlines():
        _, controllers, path = (line.split(":", 2) + ["", ""])[:3]
        if controllers == "":
            own[""] = path
        elif "cpu" in controllers.split(","):
            own["cpu"] = path
    return own


def _levels(base: Path, path: str) -> list[Path]:
    """`base` joined with `path` and each of its parents, down to `base` itself:
    those that exist (a container's mount holds its own cgroup at `base`, and the
    host's path under it does not exist)."""
    parts = [part for part in path.split("/") if part and part not in (".", "..")]
    levels = [base.joinpath(*parts[:depth]) for depth in range(len(parts), -1, -1)]
    return [level for level in levels if level.is_dir()]


def _quota_period(limit: str) -> tuple[str, str]:
    quota, _, period = limit.partition(" ")
    return quota, period


def _read(path: Path) -> str | None:
    """The stripped text of `path`, or None where it cannot be read."""
    try:
        return path.read_text().strip()
    except (OSError, UnicodeDecodeError):
        return None


def _quota_cpus(quota: str, period: str) -> int | None:
    """ceil(quota / period), at least 1; None for no quota ("max", -1) or text that
    is not one."""
    try:
        quota_us, period_us = int(quota), int(period)
    except ValueError:  # "max", or a damaged file
        return None
    if quota_us <= 0 or period_us <= 0:
        return None
    return max(1, math.ceil(quota_us / period_us))


def _local_replicas() -> int:
    """How many replicas of the `tf.distribute` strategy in scope run on this
    machine (its worker's devices), side by side: 1 without a strategy."""
    import tensorflow as tf

    if not tf.distribute.has_strategy():
        return 1
    try:
        return max(1, len(tf.distribute.get_strategy().extended.worker_devices))
    except (AttributeError, NotImplementedError, RuntimeError, ValueError):
        return 1


def directions(layer) -> int:
    """2 when `layer` is being called as one direction of a
    `keras.layers.Bidirectional` (whose two loops TensorFlow runs side by side),
    else 1.

    Keras records the layer calls in progress: each `Layer.__call__` opens a name
    scope with the layer as its `caller` (`keras.src.backend.common.name_scope`,
    the scopes that give variables their paths). The direction is the layer whose
    enclosing call is a `Bidirectional` that holds it as `forward_layer` or
    `backward_layer`."""
    for scope in get_global_attribute("name_scope_stack") or ():
        owner = getattr(scope, "caller", None)
        if isinstance(owner, keras.layers.Bidirectional) and layer in (
            owner.forward_layer,
            owner.backward_layer,
        ):
            return 2
    return 1


def shards_for(layer, sequences) -> tuple[int, int]:
    """(How many shards of the batch the generic loop runs side by side, each its
    own loop (1: the whole batch in one), and how many copies of this loop run side
    by side without them: the directions of a `Bidirectional` times the replicas of
    a distribution strategy on this machine); see `batch_shards`."""
    if keras.backend.backend() != "tensorflow" or layer.unroll:
        return 1, 1
    import tensorflow as tf

    batch = sequences.shape[0]
    beside = directions(layer) * _local_replicas()
    if layer.batch_shards is not None:
        shards = layer.batch_shards
    else:
        # Only a traced call runs its shards at once (eagerly they run one after
        # the other), only on a CPU (a GPU runs one loop's kernels in parallel
        # already), and only for a batch size known when traced: one loop per
        # thread of TensorFlow's inter-op pool, each of at least MIN_SHARD_ROWS
        # rows. The two directions of a Bidirectional, and the replicas of a
        # strategy over this machine's CPUs, run side by side already: they share
        # the threads.
        if (
            batch is None
            or tf.executing_eagerly()
            or tf.config.list_logical_devices("GPU")
        ):
            return 1, beside
        shards = min(_inter_op_threads() // beside, batch // MIN_SHARD_ROWS)
    if batch is not None:
        shards = min(shards, batch)
    return max(shards, 1), beside


def run_sharded(run, shards, batch_major):
    """`run(sequences, initial_state, mask, input_mask, recurrent_mask)` on `shards`
    consecutive slices of the batch, as independent loops (TensorFlow runs them at
    once, one per inter-op thread), joined again: (last output, outputs, states) as
    for the whole batch. Slices differ in size by at most one row."""
    import tensorflow as tf

    sequences = batch_major[0]
    batch = sequences.shape[0]
    if batch is not None:
        sizes = [batch // shards + (i < batch % shards) for i in range(shards)]
    else:
        batch = tf.shape(sequences)[0]
        sizes = tf.stack([(batch + shards - 1 - i) // shards for i in range(shards)])

    def split(tensor):
        if tensor is None:
            return [None] * shards
        if isinstance(tensor, (list, tuple)):  # the initial states
            return [list(states) for states in zip(*map(split, tensor), strict=True)]
        return tf.split(tensor, sizes, axis=0)

    results = [run(*pieces) for pieces in zip(*map(split, batch_major), strict=True)]
    last, outputs, states = zip(*results, strict=True)
    return (
        tf.concat(last, axis=0),
        tf.concat(outputs, axis=0),
        [tf.concat(state, axis=0) for state in zip(*states, strict=True)],
    )
