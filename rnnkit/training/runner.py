"""The one training loop: `run` trains a recipe and writes its run directory.

`run(recipe, config)` trains `recipe.build_model(config, data)` on
`recipe.load_data(config)` with the runner's callbacks (NaN stop, early stopping,
backup for `--resume`, TensorBoard, history.csv), evaluates the saved model, and writes
the run directory that rnnkit.training.run_dir describes, `run.json` last. Recipes
never call `fit` themselves; tuning trials train through `fit` and
`tuning_callbacks` too.

Where it trains comes from rnnkit.training.runtime (seeds, device, strategy); several
devices and machines from rnnkit.training.cluster, strategies, text_split and
multi_worker. The command line and the recipes reach the run directory's names
(`runner.load_run`, `runner.CONFIG_FILE`, ...) through this module as well.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import logging
import math
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rnnkit.errors import (
    ConfigError,
    DataError,
    RnnkitError,
    TrainingError,
    mark_run_dir,
)
from rnnkit.files import atomic_path, write_csv, write_json, write_text
from rnnkit.metrics import mean_table
from rnnkit.recipe import Recipe, RecipeConfig, RecipeData
from rnnkit.training.cluster import cluster_from_environment
from rnnkit.training.multi_worker import fit_multiworker, weights_fingerprint
from rnnkit.training.run_dir import (
    BACKUP_DIR,
    CLAIM_FILE,
    CONFIG_FILE,
    HISTORY_FILE,
    METRICS_FILE,
    MODEL_FILE,
    PLOT_DIR,
    RUN_FILE,
    TENSORBOARD_DIR,
    config_header,
    discard_unstarted,
    load_model,
    load_run,
    open_run_dir,
    prepare_resume,
    read_history,
    recipe_of,
    save_model,
)
from rnnkit.training.runtime import (
    calibrated,
    configure_runtime,
    device_summary,
    keeps_dtype_policy,
    stop_on_sigterm,
    versions,
)
from rnnkit.training.strategies import describe_batch, is_multiworker
from rnnkit.training.text_split import split_text_model

if TYPE_CHECKING:
    import keras

__all__ = [
    # The run, defined here.
    "RunResult",
    "backtest",
    "fit",
    "run",
    "tuning_callbacks",
    # Where they live is rnnkit.training.run_dir, .runtime and rnnkit.files.
    "CONFIG_FILE",
    "HISTORY_FILE",
    "METRICS_FILE",
    "MODEL_FILE",
    "PLOT_DIR",
    "RUN_FILE",
    "config_header",
    "configure_runtime",
    "device_summary",
    "load_model",
    "load_run",
    "prepare_resume",
    "read_history",
    "recipe_of",
    "save_model",
    "versions",
    "write_json",
    "write_text",
]

log = logging.getLogger("rnnkit")


@dataclasses.dataclass
class RunResult:
    """What `run` produced: where, and the figures it wrote to `metrics.json`."""

    run_dir: Path | None
    metrics: dict[str, Any]
    history: list[dict[str, float]]
    # False on a multi-worker run's workers other than the chief: they write nothing
    # (run_dir None, no test metrics) and report the fingerprint of their weights.
    chief: bool = True
    weights_fingerprint: str | None = None


# -- Callbacks and fit ---------------------------------------------------------------


def _history_callback(
    path: Path, rows: list[dict[str, float]]
) -> keras.callbacks.Callback:
    import keras

    class HistoryFile(keras.callbacks.Callback):
        """Rewrites history.csv after every epoch, keeping the rows of earlier runs."""

        def on_epoch_end(self, epoch: int, logs: dict | None = None) -> None:
            row = {"epoch": float(epoch + 1)}
            row.update({k: float(v) for k, v in (logs or {}).items()})
            rows[:] = [r for r in rows if r["epoch"] < epoch + 1] + [row]
            write_csv(path, rows)

    return HistoryFile()


RESUME_STATE_FILE = "resume_state.json"  # in the backup folder
# Its name in runs interrupted before 2026-11-28, still read when resuming them.
_OLD_RESUME_STATE_FILE = "random_state.json"


def _resume_state_callback(
    path: Path, train_data: Any, early_stopping: Any = None
) -> keras.callbacks.Callback:
    """Saves, beside `BackupAndRestore`'s backup, what it leaves out: the state of
    the random streams of training and of early stopping. A resumed run then continues
    them where they stood; without this it replays the masks (dropout, recurrent
    dropout) and batch orders of its first epochs, so that those epochs' training loss
    reads low and the model sees those draws twice, and its early stopping starts
    counting afresh.

    - The seed generators of the model's layers (dropout masks; every rnnkit layer
      draws from its own): their states are not in the backup's weights. Written
      after each epoch with the epoch's number, the previous epoch's kept beside them
      (the backup falls back to the previous epoch's weights when the last are
      damaged), and restored only into a backup of the same epoch. Not saved: Keras's
      global generator (`keras.random.*` with `seed=None`).
    - A `tf.data` training set that reshuffles each epoch (arrays become one in
      `training_set`): each iterator taken from it draws the next order, so a run
      resumed after epoch k first takes as many as `fit` had taken on one device
      (`_keras_private.fit_iterators_per_epoch`; no elements are read). `train_data`
      None (the multi-worker loop): orders start again.
    - `early_stopping`'s count of epochs without improvement, its best loss and the
      best epoch's weights (`best.<epoch>.npz` beside the state), which it resets when
      training begins: else a run resumed after its best epoch would stop later and
      restore the best of the resumed epochs only.
    Must come after `BackupAndRestore` and `early_stopping` among the callbacks; a
    test compares a resumed run's history and test figures with an uninterrupted
    one's."""
    import keras
    import numpy as np

    from rnnkit import _keras_private

    def states(model: keras.Model) -> list[Any]:
        return [v for v in model.variables if v.name == "seed_generator_state"]

    class ResumeState(keras.callbacks.Callback):
        def __init__(self):
            super().__init__()
            self.last: dict[str, Any] = {}  # the entry written last (or restored)

        def on_epoch_end(self, epoch: int, logs: dict | None = None) -> None:
            if not path.parent.is_dir():  # BackupAndRestore writes the folder
                return
            saved = self.last
            current = {
                "epoch": epoch + 1,
                "seed_generators": [
                    np.asarray(v.numpy()).tolist() for v in states(self.model)
                ],
            }
            if early_stopping is not None:
                current["early_stopping"] = self._early_stopping_state(epoch, saved)
            write_json(path, {**current, "previous": saved})
            self.last = current
            kept = {
                entry.get("early_stopping", {}).get("weights")
                for entry in (current, saved)
            }
            for old in path.parent.glob("best.*.npz"):
                if old.name not in kept:
                    old.unlink()

        def _early_stopping_state(self, epoch: int, saved: dict) -> dict[str, Any]:
            weights = saved.get("early_stopping", {}).get("weights")
            if early_stopping.best_weights is not None and (
                early_stopping.best_epoch == epoch or weights is None
            ):
                weights = f"best.{early_stopping.best_epoch + 1}.npz"
                with atomic_path(path.parent / weights) as temporary:
                    with open(temporary, "wb") as handle:
                        np.savez(handle, *early_stopping.best_weights)
            best = early_stopping.best
            return {
                "wait": int(early_stopping.wait),
                "best": None if best is None else float(best),
                "best_epoch": int(early_stopping.best_epoch),
                "weights": weights,
            }

        def _restore_early_stopping(self, state: dict[str, Any]) -> None:
            early_stopping.wait = state["wait"]
            early_stopping.best = state["best"]
            early_stopping.best_epoch = state["best_epoch"]
            if state["weights"] is not None:
                with np.load(path.parent / state["weights"]) as arrays:
                    early_stopping.best_weights = [
                        arrays[f"arr_{i}"] for i in range(len(arrays.files))
                    ]

        def on_train_begin(self, logs: dict | None = None) -> None:
            epoch = _keras_private.initial_epoch(self.model)
            if not epoch:
                return
            saved = _read_resume_state(path)
            variables = states(self.model)
            for entry in (saved, saved.get("previous") or {}):
                values = entry.get("seed_generators", ())
                if entry.get("epoch") == epoch and len(values) == len(variables):
                    for variable, value in zip(variables, values, strict=True):
                        variable.assign(np.asarray(value, dtype=variable.dtype))
                    if early_stopping is not None and "early_stopping" in entry:
                        self._restore_early_stopping(entry["early_stopping"])
                    self.last = {k: v for k, v in entry.items() if k != "previous"}
                    break
            else:
                log.warning(
                    "the backup holds no random state of epoch %d: the resumed "
                    "epochs draw the first epochs' dropout masks again",
                    epoch,
                )
            if hasattr(train_data, "as_numpy_iterator"):  # a tf.data.Dataset
                per_epoch = _keras_private.fit_iterators_per_epoch(train_data)
                for _ in range(epoch * (per_epoch or 0)):
                    iter(train_data)

    return ResumeState()


def _read_resume_state(path: Path) -> dict[str, Any]:
    import json

    for candidate in (path, path.with_name(_OLD_RESUME_STATE_FILE)):
        try:
            return json.loads(candidate.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
    return {}


def _callbacks(
    config: RecipeConfig,
    run_dir: Path | None,
    history_rows: list[dict[str, float]],
    extra: Sequence[keras.callbacks.Callback] = (),
    train_data: Any = None,
) -> list[keras.callbacks.Callback]:
    import keras

    callbacks: list[keras.callbacks.Callback] = [keras.callbacks.TerminateOnNaN()]
    early_stopping = None
    if config.train.patience > 0:
        early_stopping = keras.callbacks.EarlyStopping(
            monitor="val_loss",
            patience=config.train.patience,
            restore_best_weights=True,
        )
        callbacks.append(early_stopping)
    if run_dir is not None:
        callbacks += [
            keras.callbacks.BackupAndRestore(
                str(run_dir / BACKUP_DIR), double_checkpoint=True
            ),
            _resume_state_callback(
                run_dir / BACKUP_DIR / RESUME_STATE_FILE, train_data, early_stopping
            ),
            keras.callbacks.TensorBoard(
                log_dir=str(run_dir / TENSORBOARD_DIR), write_graph=False
            ),
            _history_callback(run_dir / HISTORY_FILE, history_rows),
        ]
    return callbacks + list(extra)


def fit(
    model: keras.Model,
    data: RecipeData,
    config: RecipeConfig,
    callbacks: Sequence[keras.callbacks.Callback],
    verbose: int | str = "auto",
    **overrides: Any,
) -> keras.callbacks.History:
    """`model.fit` on the train split with the validation split, as the config says.

    `overrides` are further `fit` arguments (Keras Tuner's `epochs`/`initial_epoch`).
    """
    common = dict(
        epochs=config.train.epochs,
        validation_data=data.validation,
        callbacks=list(callbacks),
        verbose=verbose,
    )
    if isinstance(data.validation, tuple):
        common["validation_batch_size"] = config.train.batch_size
    common.update(overrides)
    # A dataset shuffles itself (Keras warns if asked to shuffle one).
    return model.fit(training_set(data.train, config), shuffle=False, **common)


def training_set(train: Any, config: RecipeConfig) -> Any:
    """The training split as `fit` takes it: a `tf.data.Dataset` unchanged; a tuple
    `(x, y[, sample_weight])` of arrays (or dicts / tuples of them) as batches of
    `train.batch_size`, in a new order each epoch when `train.shuffle` (the orders
    drawn from `train.seed`).

    Keras's own shuffling of arrays draws one order for every epoch once a global
    seed is set (it re-creates its `tf.random.shuffle` with each epoch's iterator,
    Keras 3.15 on TensorFlow), so a seeded run saw the same batches every epoch.
    The order is drawn as `tf.data` reshuffles it, which the resume callback moves on
    with the epochs (the shuffle fills its buffer one index at a time: about a second
    an epoch per million examples). As in Keras, lists are tuples, whole batches are
    gathered at once, the arrays ride in the pipeline's elements (not as graph
    constants, which stop at 2 GB), and floating-point arrays become Keras's float
    type."""
    if not isinstance(train, tuple):
        return train
    import keras
    import tensorflow as tf

    parts = list(keras.tree.lists_to_tuples(train))
    while parts and parts[-1] is None:  # (x, y, None): no sample weights
        parts.pop()

    def tensor(array: Any) -> Any:
        value = tf.convert_to_tensor(array)
        if value.dtype.is_floating:
            value = tf.cast(value, keras.backend.floatx())
        return value

    try:
        tensors = tf.nest.map_structure(tensor, tuple(parts))
    except (TypeError, ValueError) as error:
        raise DataError(
            f"the training split is not arrays that can be batched ({error}): give "
            "(inputs, targets) as numpy arrays, or dicts or tuples of them"
        ) from None
    leaves = tf.nest.flatten(tensors)
    counts = {int(leaf.shape[0]) if leaf.shape.rank else 0 for leaf in leaves}
    if len(counts) != 1:
        raise DataError(
            f"the training split's arrays hold different numbers of examples "
            f"({', '.join(map(str, sorted(counts)))}): give inputs and targets one "
            "row per example"
        )
    (count,) = counts
    if count == 0:
        raise DataError(
            "the training split holds no examples: check the data source and the "
            "split fractions"
        )
    indices = tf.data.Dataset.range(count)
    if config.train.shuffle:
        indices = indices.shuffle(
            count, seed=config.train.seed, reshuffle_each_iteration=True
        )
    whole = tf.data.Dataset.from_tensors(tensors)

    def gather(batch: Any, tensors: Any) -> Any:
        return tf.nest.map_structure(lambda t: tf.gather(t, batch), tensors)

    return (
        tf.data.Dataset.zip(indices.batch(config.train.batch_size), whole.repeat())
        .map(gather, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
        .prefetch(tf.data.AUTOTUNE)
    )


def _check_finite(history: keras.callbacks.History, config: RecipeConfig) -> None:
    losses = history.history.get("loss", [])
    for epoch, loss in enumerate(losses, start=1):
        if not math.isfinite(loss):
            raise TrainingError(
                f"the training loss became NaN in epoch {epoch}; training stopped. "
                f"Try a lower train.learning_rate (now {config.train.learning_rate}) "
                "or check the data for extreme or missing values"
            )


# -- The run -----------------------------------------------------------------------


@calibrated
@keeps_dtype_policy
def run(
    recipe: Recipe,
    config: RecipeConfig,
    run_dir: str | Path | None = None,
    *,
    resume: bool = False,
    runs_root: str | Path = "runs",
    verbose: int | str = "auto",
    strategy: Any = None,
    callbacks: Sequence[keras.callbacks.Callback] = (),
) -> RunResult:
    """Trains, evaluates and writes the run directory; returns what it wrote.

    Args:
        recipe: the recipe instance.
        config: the resolved config (see `rnnkit.config.resolve`).
        run_dir: where to write; default `runs_root/<recipe>/<timestamp>`. It must not
            hold a run already unless `resume` is set.
        resume: continue the interrupted run in `run_dir` from its last finished epoch.
        runs_root: parent of the default run directories.
        verbose: Keras `fit` verbosity ("auto" shows the progress bar).
        strategy: a `tf.distribute` strategy to use instead of the automatic choice
            (default strategy, or `MirroredStrategy` over several visible GPUs).
        callbacks: extra Keras callbacks for the main fit.
    """
    started = time.time()
    recipe.check_config(config)
    single = recipe.single_device(config)
    if single is not None and config.train.strategy in ("mirrored", "multiworker"):
        raise ConfigError(
            f"train.strategy={config.train.strategy}: {single}; use --strategy one "
            "(or auto)"
        )
    chief = config.train.strategy != "multiworker" or cluster_from_environment()[1] == 0
    with stop_on_sigterm():
        if chief:
            # A run that fails before its first epoch leaves no folder behind
            # (an interrupted one keeps it: --resume continues it).
            created = not resume and (not run_dir or not Path(run_dir).exists())
            run_dir = open_run_dir(recipe.name, config, run_dir, runs_root, resume)
        else:
            run_dir = None
            log.info(
                "not the chief: this worker writes nothing (the chief, worker 0, "
                "writes the run directory)"
            )
        try:
            return _train_and_write(
                recipe,
                config,
                run_dir,
                started=started,
                resume=resume,
                verbose=verbose,
                strategy=strategy,
                callbacks=callbacks,
                one_device=single is not None,
            )
        except KeyboardInterrupt:
            if run_dir is not None:
                log.info(
                    "interrupted; continue with: rnnkit run %s --resume %s",
                    recipe.name,
                    run_dir,
                )
            raise
        except Exception as error:
            if run_dir is None:
                raise
            if not resume and discard_unstarted(run_dir, created):
                raise  # an unexpected error's traceback goes to the log folder
            if not isinstance(error, RnnkitError):
                mark_run_dir(error, run_dir)  # its traceback belongs there
            raise


def _train_and_write(
    recipe: Recipe,
    config: RecipeConfig,
    run_dir: Path | None,
    *,
    started: float,
    resume: bool,
    verbose: int | str,
    strategy: Any,
    callbacks: Sequence[keras.callbacks.Callback],
    one_device: bool,
) -> RunResult:
    """Everything `run` does once the run directory is claimed (None: not the chief,
    which writes nothing)."""
    chief = run_dir is not None
    automatic_strategy = configure_runtime(config.train, one_device=one_device)
    strategy = strategy or automatic_strategy
    device = device_summary(strategy)
    multiworker = is_multiworker(strategy)
    log.info("training on %s, seed %d", device, config.train.seed)
    # train.batch_size is one replica's batch; data and steps use the global batch.
    if strategy is not None and strategy.num_replicas_in_sync > 1:
        per_replica = config.train.batch_size
        log.info(
            "%s", describe_batch(per_replica, strategy, config.train.learning_rate)
        )
        config = config.with_values(
            {"train.batch_size": per_replica * strategy.num_replicas_in_sync}
        )
        if config.evaluation.folds > 0 and multiworker:
            raise ConfigError(
                "evaluation.folds (the backtest) refits the model per fold, which "
                "the multi-worker loop does not do; set evaluation.folds=0"
            )

    data = recipe.load_data(config)
    history_rows = read_history(run_dir / HISTORY_FILE) if resume and chief else []
    model = _build(recipe, config, data, strategy)
    history = _train_run(
        recipe, model, data, config, strategy, run_dir, history_rows, callbacks, verbose
    )
    _check_finite(history, config)
    fingerprint = None
    if multiworker:
        fingerprint = weights_fingerprint(model)
        log.info("weights fingerprint: %s (the same on every worker)", fingerprint)
    if not chief:
        return RunResult(
            run_dir=None,
            metrics={},
            history=[
                {
                    "epoch": float(i + 1),
                    **{k: float(v[i]) for k, v in history.history.items()},
                }
                for i in range(len(history.history.get("loss", [])))
            ],
            chief=False,
            weights_fingerprint=fingerprint,
        )

    model_path = save_model(model, run_dir / MODEL_FILE)
    # Evaluate the reloaded model: this proves the saved file is complete and that
    # `rnnkit evaluate` will report exactly these figures.
    model = load_model(model_path)
    metrics: dict[str, Any] = {"test": recipe.evaluate(model, data, config)}
    if config.evaluation.folds > 0:
        metrics["backtest"] = backtest(recipe, config, data, strategy, verbose)
    write_json(run_dir / METRICS_FILE, metrics)

    plot_dir = run_dir / PLOT_DIR
    if history_rows:
        from rnnkit import plots

        plots.training_curves(
            history_rows, plot_dir / "training_curves.png", title=recipe.name
        )
    recipe.write_plots(model, data, config, plot_dir)

    # The claim kept other runs out of a directory that might have looked empty; a
    # finished run's directory is full, and its listing holds only what it made.
    (run_dir / CLAIM_FILE).unlink(missing_ok=True)
    finished = time.time()
    write_json(
        run_dir / RUN_FILE,
        {
            "recipe": recipe.name,
            "status": "completed",
            "started": _timestamp(started),
            "finished": _timestamp(finished),
            "wall_seconds": round(finished - started, 3),
            "epochs": len(history_rows),
            "seed": config.train.seed,
            "device": device,
            "replicas": strategy.num_replicas_in_sync if strategy is not None else 1,
            "global_batch_size": config.train.batch_size,
            "weights_fingerprint": fingerprint,
            "precision": config.train.dtype_policy(),
            "resumed": resume,
            "versions": versions(),
            "files": sorted(
                str(p.relative_to(run_dir)) for p in run_dir.rglob("*") if p.is_file()
            ),
        },
    )
    return RunResult(
        run_dir=run_dir,
        metrics=metrics,
        history=history_rows,
        weights_fingerprint=fingerprint,
    )


def _train_run(
    recipe: Recipe,
    model: keras.Model,
    data: RecipeData,
    config: RecipeConfig,
    strategy: Any,
    run_dir: Path | None,
    history_rows: list[dict[str, float]],
    callbacks: Sequence[keras.callbacks.Callback],
    verbose: int | str,
) -> keras.callbacks.History:
    """The run's training with its callbacks. The set it trains on is made once, here
    (the resume callback moves its orders on), and dropped on return: it holds a copy
    of array splits, not kept through evaluation."""
    multiworker = is_multiworker(strategy)
    train_data = None if multiworker else training_set(data.train, config)
    callback_list = _callbacks(
        config,
        run_dir,
        history_rows,
        [*recipe.callbacks(config, data), *callbacks],
        train_data=train_data,
    )
    return _train(
        model,
        data if multiworker else dataclasses.replace(data, train=train_data),
        config,
        strategy,
        callback_list,
        verbose,
    )


def _train(
    model: keras.Model,
    data: RecipeData,
    config: RecipeConfig,
    strategy: Any,
    callbacks: list[keras.callbacks.Callback],
    verbose: int | str,
) -> keras.callbacks.History:
    """`fit`, or the multi-worker loop, or `fit` on a text model's numeric part."""
    if is_multiworker(strategy):
        return fit_multiworker(
            model, data, config, strategy, callbacks, verbose=verbose
        )
    text_split = split_text_model(model, strategy)
    if text_split is None:
        return fit(model, data, config, callbacks, verbose=verbose)
    # Strings become token ids in the input pipeline; the replicas train the rest of
    # the model, whose layers are the whole model's.
    return fit(
        text_split.model,
        dataclasses.replace(
            data,
            train=text_split.dataset(data.train),
            validation=text_split.dataset(data.validation),
        ),
        config,
        callbacks,
        verbose=verbose,
    )


def _build(
    recipe: Recipe, config: RecipeConfig, data: RecipeData, strategy: Any
) -> keras.Model:
    scope = strategy.scope() if strategy is not None else contextlib.nullcontext()
    with scope:
        return recipe.build_model(config, data)


def backtest(
    recipe: Recipe,
    config: RecipeConfig,
    data: RecipeData,
    strategy: Any = None,
    verbose: int | str = "auto",
) -> dict[str, Any]:
    """Walk-forward backtest: a fresh model trained and evaluated on every fold."""
    import keras

    folds = list(recipe.backtest_folds(data, config))
    tables = []
    for index, fold_data in enumerate(folds, start=1):
        log.info("backtest fold %d/%d", index, len(folds))
        keras.utils.set_random_seed(config.train.seed)
        model = _build(recipe, config, fold_data, strategy)
        callbacks = _callbacks(config, None, [], recipe.callbacks(config, fold_data))
        history = fit(model, fold_data, config, callbacks, verbose)
        _check_finite(history, config)
        tables.append(recipe.evaluate(model, fold_data, config))
    return {"folds": tables, "mean": mean_table(tables)}


def tuning_callbacks(config: RecipeConfig) -> list[keras.callbacks.Callback]:
    """The callbacks a tuning trial uses: NaN stop and early stopping."""
    return _callbacks(config, None, [])


def _timestamp(seconds: float) -> str:
    moment = datetime.datetime.fromtimestamp(seconds, tz=datetime.timezone.utc)
    return moment.isoformat(timespec="seconds")
