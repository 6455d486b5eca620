"""Training on several devices and machines: the strategy, and the multi-worker loop.

`train.strategy` picks a `tf.distribute` strategy (`make_strategy`):

- `auto`: `MirroredStrategy` over all visible GPUs when there are several, else one
  device;
- `one`: one device;
- `mirrored`: `MirroredStrategy` over the GPUs of `train.devices`, or over all visible
  GPUs (`runner.run(..., strategy=...)` takes any other strategy, such as one over
  logical CPU devices, which is how the tests mirror without GPUs);
- `multiworker`: `MultiWorkerMirroredStrategy` over the machines that `TF_CONFIG` lists
  (`write_tf_config` writes it from `--workers` and `--worker-index`).

A model that reads raw strings (the sentiment classifier's `TextVectorization`) is cut
under `MirroredStrategy` by `split_text_model`: TensorFlow cannot hand strings to the
replicas of one process, so its first layer runs in the input pipeline and the rest on
the replicas, sharing the whole model's layers.

`train.batch_size` is the batch of one replica: the global batch of a step is that
times the replicas in sync, and the learning rate is never changed to match.

Keras 3 `Model.fit` fails under `MultiWorkerMirroredStrategy` (keras-team/keras#20585),
so `fit_multiworker` trains with a loop of its own: one `strategy.run` per step, the
per-example losses reduced over the global batch (`tf.nn.compute_average_loss` with the
examples counted on every worker), the gradients all-reduced by the Keras optimizer, the
dataset sharded by data (each worker takes its part of every global batch, so a step
sees the same examples as one process with the same global batch would). The same Keras
callbacks run around it (early stopping, TerminateOnNaN, the recipe's own), and on the
chief only those that write (history, TensorBoard, the backup that `--resume` reads).
Workers write nothing: the chief's state is broadcast to them when training starts, so
a resumed run needs the backup on the chief's machine only.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from rnnkit.errors import ClusterError, ConfigError
from rnnkit.tuning.cluster import parse_address

if TYPE_CHECKING:
    import keras

    from rnnkit import config as config_lib
    from rnnkit.recipe import RecipeConfig, RecipeData

log = logging.getLogger("rnnkit")

TF_CONFIG = "TF_CONFIG"


# -- The cluster -----------------------------------------------------------------------


def write_tf_config(workers: str, index: int) -> dict[str, Any]:
    """Sets `TF_CONFIG` for worker `index` of `workers` ("HOST:PORT,HOST:PORT,...").

    Worker 0 is the chief. Returns the value written.
    """
    addresses = [part.strip() for part in workers.split(",") if part.strip()]
    if not addresses:
        raise ConfigError(
            "--workers expects HOST:PORT,HOST:PORT,... (one per machine, the chief "
            f"first), e.g. 10.0.0.5:12345,10.0.0.6:12345; got {workers!r}"
        )
    for address in addresses:
        parse_address(address, "--workers")
    if len(set(addresses)) != len(addresses):
        raise ConfigError(f"--workers lists an address twice: {workers!r}")
    if not 0 <= index < len(addresses):
        raise ConfigError(
            f"--worker-index {index} is not one of 0..{len(addresses) - 1} for the "
            f"{len(addresses)} addresses of --workers (0 is the chief)"
        )
    value = {
        "cluster": {"worker": addresses},
        "task": {"type": "worker", "index": index},
    }
    os.environ[TF_CONFIG] = json.dumps(value)
    return value


def cluster_from_environment() -> tuple[int, int]:
    """(number of workers, this worker's index) from `TF_CONFIG`, checked."""
    text = os.environ.get(TF_CONFIG, "").strip()
    fix = (
        "give every machine the same --workers HOST:PORT,... and its own "
        "--worker-index (0 for the chief), or set TF_CONFIG"
    )
    if not text:
        raise ConfigError(f"train.strategy=multiworker needs the cluster: {fix}")
    try:
        value = json.loads(text)
        cluster = value["cluster"]
        task = value["task"]
        kind, index = task["type"], int(task["index"])
        workers = list(cluster.get("chief", [])) + list(cluster.get("worker", []))
    except (ValueError, KeyError, TypeError) as error:
        raise ConfigError(
            f"TF_CONFIG is not a cluster description ({error}); {fix}"
        ) from None
    if kind not in ("chief", "worker"):
        raise ConfigError(
            f"TF_CONFIG task type {kind!r}: rnnkit trains with chief and worker "
            "tasks only (no parameter servers or evaluators)"
        )
    if "chief" in cluster and kind == "worker":
        index += len(cluster["chief"])
    if not 0 <= index < len(workers):
        raise ConfigError(f"TF_CONFIG task index {index} is outside the cluster; {fix}")
    return len(workers), index


# -- The strategy ------------------------------------------------------------------


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
        addresses = json.loads(os.environ[TF_CONFIG])["cluster"]
        others = [*addresses.get("chief", []), *addresses.get("worker", [])][1:]
        _wait_for_listeners(others, train.worker_timeout, joined)
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
        raise _cluster_error(error) from None


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
    try:
        from tensorflow.compiler.xla.tsl.protobuf import coordination_config_pb2
        from tensorflow.python.distribute import multi_worker_util
        from tensorflow.python.eager import context
        from tensorflow.python.training import server_lib

        cluster = multi_worker_util.normalize_cluster_spec(
            server_lib.ClusterSpec(json.loads(os.environ[TF_CONFIG])["cluster"])
        )
        if context.context().coordination_service is not None:
            return
        context.context().configure_coordination_service(
            service_type="standalone",
            service_leader=multi_worker_util.coordination_leader(cluster),
            coordinated_jobs=[
                coordination_config_pb2.CoordinatedJob(
                    name=job, num_tasks=cluster.num_tasks(job)
                )
                for job in ("chief", "worker")
                if job in cluster.jobs
            ],
            cluster_register_timeout_in_ms=int(seconds * 1000),
        )
    except (ImportError, AttributeError, TypeError, ValueError):
        log.debug("cannot set the registration timeout; TensorFlow's default applies")


@dataclasses.dataclass(frozen=True)
class TextSplit:
    """A text model cut in two for `MirroredStrategy`: the layer that turns strings
    into numbers (run in the input pipeline, on the host) and the rest of the model
    (trained on the replicas). Both share their layers with the whole model, so
    training `model` trains the whole one, which is what is saved."""

    preprocessing: keras.layers.Layer
    model: keras.Model

    def dataset(self, split: Any) -> Any:
        """`split` (a batched dataset of `(texts, targets[, weights])`, or a tuple of
        arrays) with the texts turned into numbers; None stays None."""
        import tensorflow as tf

        if split is None:
            return None
        if not isinstance(split, tf.data.Dataset):
            return (self._numbers(split[0]), *split[1:])
        layer = self.preprocessing

        def numbers(inputs: Any, *rest: Any) -> tuple[Any, ...]:
            return (layer(inputs), *rest)

        return split.map(numbers, num_parallel_calls=tf.data.AUTOTUNE)

    def _numbers(self, texts: Any) -> Any:
        import keras

        return keras.ops.convert_to_numpy(self.preprocessing(texts))


def split_text_model(model: keras.Model, strategy: Any) -> TextSplit | None:
    """For a model that reads strings, on several replicas of one process
    (`MirroredStrategy`): the model cut after its string-reading layer, compiled as
    `model` is; `None` when no cut is needed (one replica, multi-worker, numbers in).

    TensorFlow cannot hand string tensors to the replicas of one process
    (tensorflow/tensorflow#80951: Keras `fit` fails on a `TextVectorization` inside
    the model), so the strings become token ids in the input pipeline instead, the
    usual place for preprocessing under a distribution strategy. A model whose strings
    are read by more than one layer (or by a layer that is not its first) cannot be
    cut: a `ConfigError` names `--strategy one` and `multiworker`.
    """
    if (
        strategy is None
        or strategy.num_replicas_in_sync < 2
        or is_multiworker(strategy)
    ):
        return None
    inputs = getattr(model, "inputs", None) or []
    texts = [t for t in inputs if str(getattr(t, "dtype", "")) == "string"]
    if not texts:
        return None
    readers = [
        layer
        for layer in model.layers
        if type(layer).__name__ != "InputLayer"
        and any(t is texts[0] for t in _inputs_of(layer))
    ]
    if (
        len(inputs) != 1
        or len(readers) != 1
        or readers[0].weights
        or str(getattr(readers[0].output, "dtype", "")) == "string"
    ):
        raise ConfigError(
            "this recipe's model reads text in a way that cannot be moved into the "
            "input pipeline, and TensorFlow cannot mirror string inputs over several "
            "devices of one process (tensorflow/tensorflow#80951); use --strategy "
            "one, or --strategy multiworker with one process per device"
        )
    import keras

    preprocessing = readers[0]
    with strategy.scope():
        core = keras.Model(
            preprocessing.output, model.outputs, name=f"{model.name}_core"
        )
        # The same optimizer object: its state is the whole model's when it is saved.
        settings = keras.saving.deserialize_keras_object(model.get_compile_config())
        settings["optimizer"] = model.optimizer
        core.compile(**settings)
    log.info(
        "mirrored text model: %s runs in the input pipeline, the rest on the replicas",
        preprocessing.name,
    )
    return TextSplit(preprocessing, core)


def _inputs_of(layer: keras.layers.Layer) -> list[Any]:
    try:
        value = layer.input
    except (AttributeError, ValueError):
        return []
    return list(value) if isinstance(value, list | tuple) else [value]


def is_multiworker(strategy: Any) -> bool:
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


def _cluster_error(error: BaseException) -> BaseException:
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


# -- The multi-worker training loop ------------------------------------------------


def fit_multiworker(
    model: keras.Model,
    data: RecipeData,
    config: RecipeConfig,
    strategy: Any,
    callbacks: Sequence[keras.callbacks.Callback],
    verbose: int | str = "auto",
) -> keras.callbacks.History:
    """Trains `model` (built under `strategy.scope()`) as `runner.fit` would with
    `Model.fit`, with a loop that works under `MultiWorkerMirroredStrategy`.

    `config.train.batch_size` is the global batch here (the runner multiplies it).
    Logged per epoch: `loss`, the compiled metrics and, with validation data, their
    `val_` twins; the metrics are summed over every replica, as `fit` does.
    """
    import keras
    import tensorflow as tf

    try:
        return _fit(model, data, config, strategy, callbacks, verbose, keras, tf)
    except tf.errors.OpError as error:
        raise _cluster_error(error) from None


def _fit(model, data, config, strategy, callbacks, verbose, keras, tf):  # noqa: ANN001, ANN202, PLR0913
    train_set = _distributed(strategy, data.train, config, training=True)
    validation_set = (
        _distributed(strategy, data.validation, config, training=False)
        if data.validation is not None
        else None
    )
    loss_fn = _per_example_loss(model, keras)
    optimizer = model.optimizer
    with strategy.scope():
        if not optimizer.built:
            optimizer.build(model.trainable_variables)

    callback_list = keras.callbacks.CallbackList(
        list(callbacks),
        add_history=True,
        add_progbar=verbose != 0 and is_chief(strategy),
        model=model,
        verbose=1 if verbose == "auto" else verbose,
        epochs=config.train.epochs,
        steps=_steps(data.train, config.train.batch_size),
    )
    model.stop_training = False
    model._initial_epoch = None  # noqa: SLF001 - BackupAndRestore sets it
    callback_list.on_train_begin()
    if is_multiworker(strategy):
        initial_epoch = _broadcast_state(model, strategy, tf)
    else:  # one process: every replica's variables were made from the same values
        initial_epoch = int(model._initial_epoch or 0)  # noqa: SLF001
    if initial_epoch:
        log.info("resuming after epoch %d (the chief's backup)", initial_epoch)

    steps: dict[tuple[int, ...], Callable] = {}
    metrics = _build_metrics(model, data.train, config, strategy, keras)

    def train_step() -> Callable:
        key = tuple(id(v) for v in model.trainable_variables)
        if key not in steps:
            steps[key] = _train_step(model, optimizer, loss_fn, strategy, tf, metrics)
        return steps[key]

    evaluate = _evaluate_step(model, loss_fn, strategy, tf, metrics)
    logs: dict[str, float] = {}
    for epoch in range(initial_epoch, config.train.epochs):
        callback_list.on_epoch_begin(epoch)
        step = train_step()
        model.reset_metrics()
        total, count = 0.0, 0
        for batch_index, batch in enumerate(train_set):
            callback_list.on_train_batch_begin(batch_index)
            loss_sum, examples = step(batch)
            total += float(loss_sum)
            count += int(examples)
            callback_list.on_train_batch_end(batch_index, {"loss": total / count})
            if model.stop_training:
                break
        logs = {"loss": total / max(count, 1), **_metric_logs(model, metrics)}
        if validation_set is not None and not model.stop_training:
            model.reset_metrics()
            total, count = 0.0, 0
            for batch in validation_set:
                loss_sum, examples = evaluate(batch)
                total += float(loss_sum)
                count += int(examples)
            logs["val_loss"] = total / max(count, 1)
            logs.update(
                {f"val_{k}": v for k, v in _metric_logs(model, metrics).items()}
            )
        callback_list.on_epoch_end(epoch, logs)
        if model.stop_training:
            break
    callback_list.on_train_end(logs)
    return model.history


def _steps(split: Any, batch_size: int) -> int | None:
    if isinstance(split, tuple):
        return -(-len(split[0]) // batch_size)
    cardinality = int(split.cardinality())
    return cardinality if cardinality >= 0 else None


def _distributed(
    strategy: Any, split: Any, config: RecipeConfig, training: bool
) -> Any:
    import tensorflow as tf

    if isinstance(split, tuple):
        dataset = tf.data.Dataset.from_tensor_slices(split)
        if training and config.train.shuffle:
            dataset = dataset.shuffle(
                len(split[0]), seed=config.train.seed, reshuffle_each_iteration=True
            )
        dataset = dataset.batch(config.train.batch_size)
    elif isinstance(split, tf.data.Dataset):
        dataset = split
    else:
        raise ConfigError(
            "train.strategy=multiworker trains on arrays or a tf.data.Dataset; this "
            f"recipe gives {type(split).__name__}"
        )
    options = tf.data.Options()
    # Every worker reads the whole dataset in the same order and keeps its part of
    # each global batch, so a step sees what one process with that batch would.
    options.experimental_distribute.auto_shard_policy = (
        tf.data.experimental.AutoShardPolicy.DATA
    )
    return strategy.experimental_distribute_dataset(dataset.with_options(options))


def _per_example_loss(model: keras.Model, keras: Any) -> Any:
    """The compiled loss, unreduced: one value per example (or per token)."""
    loss = model.loss
    if isinstance(loss, dict | list | tuple):
        raise ConfigError(
            "train.strategy=multiworker trains models with one loss; this recipe's "
            "model has several"
        )
    if isinstance(loss, str) or not isinstance(loss, keras.losses.Loss):
        function = keras.losses.get(loss)
        if isinstance(function, keras.losses.Loss):
            loss = function
        else:
            from rnnkit._keras_private import LossFunctionWrapper

            return LossFunctionWrapper(function, reduction=None)
    settings = loss.get_config()
    settings["reduction"] = None
    return type(loss).from_config(settings)


def _weights_and_count(loss_fn: Any, y: Any, values: Any, tf: Any) -> tuple[Any, Any]:
    """Per-element values (flat) and how many count: examples, or the tokens that are
    not `ignore_class` for per-token losses."""
    if values.shape.rank is not None and values.shape.rank > 1:
        ignore = getattr(loss_fn, "ignore_class", None)
        weights = tf.ones_like(values)
        if ignore is not None:
            weights = tf.cast(tf.not_equal(tf.cast(y, tf.int64), ignore), values.dtype)
            weights = tf.reshape(weights, tf.shape(values))
        return tf.reshape(values * weights, [-1]), tf.cast(
            tf.reduce_sum(weights), tf.int32
        )
    return values, tf.shape(values)[0]


def _build_metrics(model, split, config, strategy, keras):  # noqa: ANN001
    """Creates the compiled metrics' variables (summed over replicas when read) under
    the strategy; False when the model has none or they cannot be built here."""
    if not getattr(model, "compiled", False) or not model.get_compile_config().get(
        "metrics"
    ):
        return False
    # Keras builds them from symbolic inputs in `fit` (a private method; without it
    # the loop logs the losses only). Symbolic, so no batch is drawn from the data.
    build = getattr(model, "_symbolic_build", None)
    if build is None:
        log.info("the multi-worker loop logs the losses only (Keras changed)")
        return False
    if isinstance(split, tuple):
        batch = keras.tree.map_structure(lambda a: a[: config.train.batch_size], split)
    else:
        batch = keras.tree.map_structure(
            lambda spec: keras.KerasTensor(spec.shape, spec.dtype.name),
            split.element_spec,
        )
    with strategy.scope():
        build(data_batch=batch)
    return True


def _metric_logs(model: keras.Model, metrics: bool) -> dict[str, float]:
    """The compiled metrics, summed over every replica of every worker (a collective
    read on each worker, in the same order)."""
    if not metrics:
        return {}
    results = model.get_metrics_result()
    return {k: float(v) for k, v in results.items() if k != "loss"}


def _train_step(model, optimizer, loss_fn, strategy, tf, metrics):  # noqa: ANN001, ANN202, PLR0913
    import keras

    def replica_step(batch: Any) -> tuple[Any, Any]:
        x, y, sample_weight = keras.utils.unpack_x_y_sample_weight(batch)
        context = tf.distribute.get_replica_context()
        with tf.GradientTape() as tape:
            predictions = model(x, training=True)
            values = tf.cast(loss_fn(y, predictions, sample_weight), tf.float32)
            values, count = _weights_and_count(loss_fn, y, values, tf)
            total = context.all_reduce(tf.distribute.ReduceOp.SUM, count)
            loss = tf.nn.compute_average_loss(values, global_batch_size=total)
            if model.losses:
                loss += tf.nn.scale_regularization_loss(tf.add_n(model.losses))
            scaled = optimizer.scale_loss(loss)
        gradients = tape.gradient(scaled, model.trainable_variables)
        optimizer.apply_gradients(
            zip(gradients, model.trainable_variables, strict=True)
        )
        if metrics:
            model.compute_metrics(x, y, predictions, sample_weight)
        # Its share of the global loss times the global count: the sum over the
        # replicas is the global loss sum.
        return loss * tf.cast(total, tf.float32), count

    return _summed_over_replicas(replica_step, strategy, tf)


def _evaluate_step(model, loss_fn, strategy, tf, metrics):  # noqa: ANN001, ANN202
    import keras

    def replica_step(batch: Any) -> tuple[Any, Any]:
        x, y, sample_weight = keras.utils.unpack_x_y_sample_weight(batch)
        predictions = model(x, training=False)
        values = tf.cast(loss_fn(y, predictions, sample_weight), tf.float32)
        if metrics:
            model.compute_metrics(x, y, predictions, sample_weight)
        values, count = _weights_and_count(loss_fn, y, values, tf)
        return tf.reduce_sum(values), count

    return _summed_over_replicas(replica_step, strategy, tf)


def _summed_over_replicas(replica_step: Callable, strategy: Any, tf: Any) -> Callable:
    """A compiled step: `replica_step` on every replica, its outputs summed."""

    @tf.function
    def step(batch: Any) -> tuple[Any, Any]:
        outputs = strategy.run(replica_step, args=(batch,))
        return tuple(
            strategy.reduce(tf.distribute.ReduceOp.SUM, value, axis=None)
            for value in outputs
        )

    return step


def _broadcast_state(model: keras.Model, strategy: Any, tf: Any) -> int:
    """Gives every worker the chief's weights, optimizer state and initial epoch
    (restored from its backup on `--resume`); returns that epoch."""
    epoch = tf.constant(float(model._initial_epoch or 0))  # noqa: SLF001
    variables = list(model.variables) + list(model.optimizer.variables)

    @tf.function
    def broadcast(epoch: Any) -> Any:
        def replica_fn(epoch: Any) -> Any:
            context = tf.distribute.get_replica_context()
            first = tf.equal(context.replica_id_in_sync_group, 0)
            own = [_value(v) for v in variables] + [tf.cast(epoch, tf.float64)]
            mine = [tf.where(first, t, tf.zeros_like(t)) for t in own]
            summed = context.all_reduce(tf.distribute.ReduceOp.SUM, mine)
            for variable, value in zip(variables, summed[:-1], strict=True):
                variable.assign(tf.cast(value, variable.dtype))
            return summed[-1]

        return strategy.reduce(
            tf.distribute.ReduceOp.MEAN,
            strategy.run(replica_fn, args=(epoch,)),
            axis=None,
        )

    return int(round(float(broadcast(epoch))))


def _value(variable: Any) -> Any:
    import tensorflow as tf

    # One batched all-reduce needs one dtype: float64 holds float32 weights and the
    # integer counters (the optimizer's iterations, seed states) exactly.
    return tf.cast(tf.convert_to_tensor(variable), tf.float64)


def weights_fingerprint(model: keras.Model) -> str:
    """A short SHA-256 of every weight's bytes, to compare models across workers."""
    digest = hashlib.sha256()
    for weight in model.weights:
        digest.update(weight.path.encode())
        digest.update(memoryview(weight.numpy()).tobytes())
    return digest.hexdigest()[:16]


def describe_batch(per_replica: int, strategy: Any, learning_rate: float) -> str:
    replicas = strategy.num_replicas_in_sync
    return (
        f"global batch {per_replica * replicas} = {per_replica} per replica x "
        f"{replicas} replica(s); learning rate {learning_rate:g}, not scaled"
    )
