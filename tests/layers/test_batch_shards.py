"""The recurrent layers' batch shards (`batch_shards`).

On TensorFlow the generic loop may run as several independent loops over
consecutive slices of the batch, which TensorFlow runs at once, one per inter-op
thread. Whatever the split, the outputs, the final states and every gradient must be
those of one loop over the whole batch: on the hand-written backward pass (plain and
XLA-compiled), the autodiff path, the compiled inference loop and the plain loop,
with masks, dropout, initial states and uneven slices.
"""

from __future__ import annotations

import os

import keras
import numpy as np
import pytest

from rnnkit.layers import GRU, LSTM, SimpleRNN, _batch_shards
from rnnkit.testing import recurrent as checks
from tests.layers import recurrent_checks as internal

LAYERS = {"GRU": (GRU, 1), "LSTM": (LSTM, 2), "SimpleRNN": (SimpleRNN, 1)}
TF_ONLY = pytest.mark.skipif(
    keras.backend.backend() != "tensorflow", reason="the batch is split on TF only"
)
BATCH = 7  # in 3 shards: slices of 3, 2 and 2 rows


def _shards_named(path):
    """The N of "batch in N shards side by side" in an `execution_path`, else 1."""
    marker = " shards side by side"
    if marker not in path:
        return 1
    return int(path.split(marker)[0].rsplit("batch in ", 1)[1])


def _pair(name, shards, **options):
    """The same layer with `batch_shards=shards` and with 1, with the same weights."""
    layer_cls, _ = LAYERS[name]
    return internal.same_weights_pair(
        layer_cls,
        {"batch_shards": shards},
        {"batch_shards": 1},
        checks.random_inputs(11, batch=BATCH),
        **options,
    )


def _mask(kind, batch):
    """`checks.padding_mask` rows repeated to `batch` rows."""
    return np.tile(checks.padding_mask(kind), (-(-batch // checks.BATCH), 1))[:batch]


@TF_ONLY
@pytest.mark.parametrize("name", LAYERS)
@pytest.mark.parametrize(
    ("training", "mask_kind", "options"),
    [
        # the hand-written backward pass, plain loop
        (True, "right", {"return_sequences": True, "return_state": True}),
        # ... and XLA-compiled, read backwards
        (True, "left", {"go_backwards": True, "jit_compile": True}),
        # the autodiff path (recurrent dropout), the dropout masks of one batch
        (True, None, {"return_sequences": True, "dropout": 0.3,
                      "recurrent_dropout": 0.2}),
        # the compiled inference loop, a row with no step at all
        (False, "empty_row", {"return_sequences": True, "return_state": True,
                              "jit_compile": True}),
        # the plain inference loop
        (False, None, {"go_backwards": True, "jit_compile": False}),
    ],
)  # fmt: skip
def test_sharded_loop_equals_one_loop(name, training, mask_kind, options):
    sharded, whole = _pair(name, 3, **options)
    _, num_states = LAYERS[name]
    rng = np.random.RandomState(5)
    kwargs = {
        "training": training,
        "initial_state": [
            rng.randn(BATCH, checks.UNITS).astype("float32") for _ in range(num_states)
        ],
    }
    if mask_kind:
        kwargs["mask"] = _mask(mask_kind, BATCH)
    results = {}
    for layer in (sharded, whole):
        layer.cell.seed_generator.state.assign([2, 0])  # the same dropout masks
        results[layer.batch_shards] = checks.outputs_and_gradients(
            layer, checks.random_inputs(12, batch=BATCH), **kwargs
        )
    assert _shards_named(sharded.execution_path) == 3, sharded.execution_path
    assert _shards_named(whole.execution_path) == 1, whole.execution_path
    internal.assert_same_results(sharded.trainable_variables, results[3], results[1])


@TF_ONLY
@pytest.mark.parametrize("training", [True, False])
def test_a_batch_size_unknown_when_traced_is_split_when_it_runs(training):
    """Slices sized when the batch arrives: 5 rows in 2 shards, and 1 row, whose
    second shard is empty."""
    import tensorflow as tf

    sharded, whole = _pair("LSTM", 2, return_sequences=True)
    signature = [tf.TensorSpec((None, checks.STEPS, checks.FEATURES), "float32")]

    def gradients(layer):
        @tf.function(input_signature=signature)
        def step(x):
            with tf.GradientTape() as tape:
                tape.watch(x)
                outputs = layer(x, training=training)
                loss = tf.reduce_sum(outputs * tf.sin(outputs))
            return outputs, tape.gradient(loss, [x, *layer.trainable_variables])

        return step

    steps = {layer.batch_shards: gradients(layer) for layer in (sharded, whole)}
    for batch in (5, 1):
        x = tf.constant(checks.random_inputs(3, batch=batch))
        got, expected = steps[2](x), steps[1](x)
        assert _shards_named(sharded.execution_path) == 2, sharded.execution_path
        for a, b in zip(tf.nest.flatten(got), tf.nest.flatten(expected), strict=True):
            checks.assert_close(a, b, what=f"batch {batch}")


@TF_ONLY
def test_a_stateful_sharded_layer_carries_each_rows_state():
    import tensorflow as tf

    sharded, whole = _pair("GRU", 2, stateful=True, return_sequences=True)
    x = checks.random_inputs(13, batch=BATCH)
    outputs = {}
    for layer in (sharded, whole):
        layer.reset_state()
        call = tf.function(lambda inputs, layer=layer: layer(inputs))
        outputs[layer.batch_shards] = [call(x).numpy() for _ in range(2)]
    assert _shards_named(sharded.execution_path) == 2
    for first, second in zip(outputs[2], outputs[1], strict=True):
        checks.assert_close(first, second)
    # The second batch started from the first one's final state, row by row.
    assert np.abs(outputs[2][1] - outputs[2][0]).max() > 1e-3


@TF_ONLY
def test_default_is_one_shard_per_inter_op_thread_of_eight_rows_or_more(monkeypatch):
    import tensorflow as tf

    layer = GRU(checks.UNITS)

    def shards(batch, threads, signature_batch="same"):
        monkeypatch.setattr(_batch_shards, "_inter_op_threads", lambda: threads)
        x = checks.random_inputs(1, batch=batch)
        if signature_batch == "same":
            signature_batch = batch
        signature = [
            tf.TensorSpec((signature_batch, checks.STEPS, checks.FEATURES), "float32")
        ]
        tf.function(lambda x: layer(x), input_signature=signature)(x)
        return _shards_named(layer.execution_path)

    assert shards(16, threads=2) == 2
    assert shards(40, threads=4) == 4
    assert shards(24, threads=4) == 3  # at least 8 rows each
    assert shards(15, threads=2) == 1
    assert shards(64, threads=1) == 1
    # A batch size unknown when traced could be a single row: not split.
    assert shards(64, threads=2, signature_batch=None) == 1
    # An eager call runs its shards one after the other: not split.
    monkeypatch.setattr(_batch_shards, "_inter_op_threads", lambda: 2)
    layer(checks.random_inputs(1, batch=16))
    assert _shards_named(layer.execution_path) == 1
    # On a GPU one loop's kernels already run in parallel: not split.
    visible = tf.config.list_logical_devices
    monkeypatch.setattr(
        tf.config,
        "list_logical_devices",
        lambda kind=None: ["GPU:0"] if kind == "GPU" else visible(kind),
    )
    monkeypatch.setattr(layer, "_cudnn_blockers", lambda training: ["forced"])
    assert shards(16, threads=2) == 1


@TF_ONLY
@pytest.mark.parametrize(("threads", "expected"), [(2, 1), (4, 2)])
def test_the_directions_of_a_bidirectional_share_the_threads(
    monkeypatch, threads, expected
):
    """Its two loops run side by side already, so each direction gets half the
    threads (measured: docs/performance.md). The layer learns it is a direction
    from Keras' record of the enclosing layer calls (`_batch_shards.directions`)."""
    import tensorflow as tf

    monkeypatch.setattr(_batch_shards, "_inter_op_threads", lambda: threads)
    x = checks.random_inputs(2, batch=32)
    layers = {}
    for shards in (None, 1):
        layers[shards] = keras.layers.Bidirectional(
            GRU(checks.UNITS, return_sequences=True, batch_shards=shards)
        )
        layers[shards](x)
    layers[1].set_weights(layers[None].get_weights())
    outputs = {
        shards: tf.function(lambda x, both=both: both(x, training=True))(x)
        for shards, both in layers.items()
    }
    for direction in (layers[None].forward_layer, layers[None].backward_layer):
        assert _shards_named(direction.execution_path) == expected
    checks.assert_close(outputs[None], outputs[1])
    # A layer alone, with the same batch and threads, gets them all.
    alone = GRU(checks.UNITS)
    tf.function(alone)(x)
    assert _shards_named(alone.execution_path) == threads


@TF_ONLY
def test_more_shards_than_rows_is_one_shard_per_row():
    sharded, whole = _pair("SimpleRNN", 5)
    x = checks.random_inputs(4, batch=2)
    checks.assert_close(sharded(x), whole(x))
    assert _shards_named(sharded.execution_path) == 2


@pytest.mark.parametrize("name", LAYERS)
def test_batch_shards_is_checked_and_saved(name):
    layer_cls, _ = LAYERS[name]
    for wrong in (0, -2, True, 2.0, "2"):
        with pytest.raises(ValueError, match="`batch_shards` must be None or a posi"):
            layer_cls(3, batch_shards=wrong)
    layer = layer_cls(3, batch_shards=2)
    assert layer.get_config()["batch_shards"] == 2
    assert layer_cls.from_config(layer.get_config()).batch_shards == 2
    assert layer_cls(3).get_config()["batch_shards"] is None


@pytest.mark.skipif(keras.backend.backend() == "tensorflow", reason="other backends")
def test_other_backends_run_one_loop():
    """JAX's and PyTorch's CPU runtimes run one operation at a time: no split."""
    sharded, whole = _pair("GRU", 3, use_cudnn=False)
    x = checks.random_inputs(4, batch=BATCH)
    checks.assert_close(sharded(x), whole(x))
    assert _shards_named(sharded.execution_path) == 1, sharded.execution_path


MIRRORED = """
import sys
import tensorflow as tf
cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(
    cpu, [tf.config.LogicalDeviceConfiguration()] * 2
)
from rnnkit.layers import GRU, _batch_shards
_batch_shards._inter_op_threads = lambda: 2
x = tf.random.normal((32, 5, 3))
for devices in (["/cpu:0", "/cpu:1"], ["/cpu:0"]):
    strategy = tf.distribute.MirroredStrategy(devices)
    with strategy.scope():
        layer = GRU(4)
    strategy.run(tf.function(lambda x: layer(x)), (x,))
    print(len(devices), layer.execution_path)
"""


@TF_ONLY
def test_the_replicas_of_a_strategy_on_this_machine_share_the_threads():
    """Two replicas over this machine's CPUs run two loops side by side already."""
    from tests import preloaded

    result = preloaded.run(["-c", MIRRORED], timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    paths = dict(line.split(" ", 1) for line in result.stdout.splitlines())
    assert _shards_named(paths["2"]) == 1, paths["2"]
    assert _shards_named(paths["1"]) == 2, paths["1"]


def _fake_cgroup(root, files):
    """A cgroup mount under `root` holding `files` (relative path: text)."""
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


@pytest.mark.parametrize(
    ("files", "expected"),
    [
        ({"cpu.max": "200000 100000\n"}, 2),  # v2, limited
        ({"cpu.max": "150000 100000\n"}, 2),  # v2, 1.5 CPUs rounded up
        ({"cpu.max": "5000 100000\n"}, 1),  # v2, a twentieth: at least 1
        ({"cpu.max": "max 100000\n"}, None),  # v2, no quota
        ({"cpu/cpu.cfs_quota_us": "300000\n", "cpu/cpu.cfs_period_us": "100000\n"}, 3),
        ({"cpu,cpuacct/cpu.cfs_quota_us": "100000\n",
          "cpu,cpuacct/cpu.cfs_period_us": "50000\n"}, 2),  # v1, other mount name
        ({"cpu/cpu.cfs_quota_us": "-1\n", "cpu/cpu.cfs_period_us": "100000\n"}, None),
        ({"cpu/cpu.cfs_quota_us": "200000\n"}, None),  # v1 without its period
        ({"cpu.max": "garbled\n"}, None),
        ({}, None),  # no cgroup files at all
    ],
)  # fmt: skip
def test_cgroup_cpus_reads_the_quota_of_v2_and_v1(tmp_path, files, expected):
    membership = tmp_path / "proc-self-cgroup"
    membership.write_text("0::/\n")
    root = _fake_cgroup(tmp_path / "cgroup", files)
    assert _batch_shards.cgroup_cpus(root, membership) == expected


@pytest.mark.parametrize(
    ("membership", "files", "expected"),
    [
        # v2 on a host: a slice above the process's own cgroup sets the quota.
        ("0::/pods/a/job\n", {"cpu.max": "max 100000", "pods/a/cpu.max":
          "400000 100000", "pods/a/job/cpu.max": "max 100000"}, 4),
        # the smallest quota on the way up counts
        ("0::/pods/a/job\n", {"pods/cpu.max": "300000 100000",
          "pods/a/job/cpu.max": "100000 100000"}, 1),
        # a container: its own cgroup is the mount root, the host path absent
        ("0::/docker/0123\n", {"cpu.max": "200000 100000"}, 2),
        # v1: the cpu controller's line names the path in its hierarchy
        ("5:memory:/kube/pod\n4:cpu,cpuacct:/kube/pod\n",
         {"cpu,cpuacct/cpu.cfs_quota_us": "-1", "cpu,cpuacct/cpu.cfs_period_us":
          "100000", "cpu,cpuacct/kube/cpu.cfs_quota_us": "300000",
          "cpu,cpuacct/kube/cpu.cfs_period_us": "100000"}, 3),
        ("", {"a/cpu.max": "100000 100000"}, None),  # unreadable membership: root
    ],
)  # fmt: skip
def test_cgroup_cpus_reads_the_quotas_above_the_process_cgroup(
    tmp_path, membership, files, expected
):
    path = tmp_path / "proc-self-cgroup"
    path.write_text(membership)
    root = _fake_cgroup(tmp_path / "cgroup", files)
    assert _batch_shards.cgroup_cpus(root, path) == expected


@TF_ONLY
@pytest.mark.parametrize(
    ("files", "expected"),
    [
        ({"cpu.max": "200000 100000"}, 2),
        ({"cpu.max": "100000 100000"}, 1),
        ({"cpu/cpu.cfs_quota_us": "100000", "cpu/cpu.cfs_period_us": "100000"}, 1),
        ({"cpu.max": "max 100000"}, 64),
        ({"cpu/cpu.cfs_quota_us": "-1", "cpu/cpu.cfs_period_us": "100000"}, 64),
        ({}, 64),
    ],
)
def test_the_default_split_counts_the_cpus_a_cgroup_quota_grants(
    monkeypatch, tmp_path, files, expected
):
    """A container limited to 2 CPUs on a 64-core host: TensorFlow's inter-op pool
    (sized by the cores the process may be scheduled on) says 64; the layer splits
    the batch as for 2."""
    import tensorflow as tf

    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(64)))
    monkeypatch.setattr(
        tf.config.threading, "get_inter_op_parallelism_threads", lambda: 0
    )
    monkeypatch.setattr(
        _batch_shards, "CGROUP_ROOT", str(_fake_cgroup(tmp_path, files))
    )
    assert _batch_shards._inter_op_threads() == expected
    # A batch of 24 rows: 3 shards of 8 without a quota, as many as it grants.
    layer = GRU(checks.UNITS)
    tf.function(layer)(checks.random_inputs(1, batch=24))
    assert _shards_named(layer.execution_path) == min(expected, 3)
