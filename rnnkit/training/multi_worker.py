"""The training loop of a multi-worker run (`fit_multiworker`).

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

import hashlib
import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from rnnkit.errors import ConfigError
from rnnkit.training.strategies import cluster_error, is_chief, is_multiworker

if TYPE_CHECKING:
    import keras

    from rnnkit.recipe import RecipeConfig, RecipeData

log = logging.getLogger("rnnkit")


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
        raise cluster_error(error) from None


def _fit(model, data, config, strategy, callbacks, verbose, keras, tf):  # noqa: ANN001, ANN202, PLR0913
    from rnnkit import _keras_private

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
    _keras_private.clear_initial_epoch(model)  # BackupAndRestore sets it
    callback_list.on_train_begin()
    if is_multiworker(strategy):
        initial_epoch = _broadcast_state(model, strategy, tf)
    else:  # one process: every replica's variables were made from the same values
        initial_epoch = _keras_private.initial_epoch(model)
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
    # `Model.fit` takes more than one iterator of a dataset of known length each
    # epoch, and a dataset that draws a new order per iterator (a seeded shuffle)
    # draws it per iterator: the loop takes as many, so that a shuffled epoch reads
    # the order one process's `fit` reads.
    spare_iterators = (
        0  # arrays: the loop batches them itself
        if isinstance(data.train, tuple)
        else max((_keras_private.fit_iterators_per_epoch(data.train) or 1) - 1, 0)
    )
    for epoch in range(initial_epoch, config.train.epochs):
        callback_list.on_epoch_begin(epoch)
        for _ in range(spare_iterators if epoch > initial_epoch else 0):
            iter(train_set)
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
    from rnnkit._keras_private import symbolic_build
    from rnnkit.training.training_set import symbolic_batch

    build = symbolic_build(model)
    if build is None:
        log.info("the multi-worker loop logs the losses only (Keras changed)")
        return False
    if isinstance(split, tuple):
        batch = keras.tree.map_structure(lambda a: a[: config.train.batch_size], split)
    else:
        batch = symbolic_batch(split)
        if batch is None:
            log.info("the multi-worker loop logs the losses only (no element spec)")
            return False
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
    from rnnkit._keras_private import initial_epoch

    epoch = tf.constant(float(initial_epoch(model)))
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
