"""The one training loop: `run` trains a recipe and writes its run directory.

`run(recipe, config)` trains `recipe.build_model(config, data)` on
`recipe.load_data(config)` with the runner's callbacks (NaN stop, early stopping,
backup for `--resume`, TensorBoard, history.csv), evaluates the saved model, and writes
the run directory that rnnkit.training.run_dir describes, `run.json` last. Recipes
never call `fit` themselves; tuning trials train through `fit` and
`tuning_callbacks` too.

Its callbacks live in rnnkit.training.callbacks, the batching of the training split in
rnnkit.training.training_set. Where it trains comes from rnnkit.training.runtime
(seeds, device, strategy); several devices and machines from rnnkit.training.cluster,
strategies, text_split and multi_worker. The command line and the recipes reach the
run directory's names (`runner.load_run`, `runner.CONFIG_FILE`, ...) through this
module as well.
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
    RnnkitError,
    TrainingError,
    mark_run_dir,
)
from rnnkit.files import write_json, write_text
from rnnkit.metrics import mean_table
from rnnkit.recipe import Recipe, RecipeConfig, RecipeData
from rnnkit.training.callbacks import runner_callbacks
from rnnkit.training.cluster import cluster_from_environment
from rnnkit.training.multi_worker import fit_multiworker, weights_fingerprint
from rnnkit.training.run_dir import (
    CLAIM_FILE,
    CONFIG_FILE,
    HISTORY_FILE,
    METRICS_FILE,
    MODEL_FILE,
    PLOT_DIR,
    RUN_FILE,
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
from rnnkit.training.training_set import build_before_tracing, training_set

if TYPE_CHECKING:
    import keras

__all__ = [
    # The run, defined here.
    "RunResult",
    "backtest",
    "fit",
    "run",
    "tuning_callbacks",
    # Where they live is rnnkit.training.run_dir, .runtime, .training_set and
    # rnnkit.files.
    "build_before_tracing",
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


# -- Fit ---------------------------------------------------------------------------


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
    train = training_set(data.train, config)
    build_before_tracing(model, train)
    # A dataset shuffles itself (Keras warns if asked to shuffle one).
    return model.fit(train, shuffle=False, **common)


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
    if chief:
        # Before the runtime is set up for the main fit: a stage (a run of its own)
        # sets seeds and the dtype policy for itself, and a resumed run that skips
        # a finished stage must start the main fit from the same state.
        config = recipe.prepare(config, run_dir)
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
        if config.train.max_minutes > 0 and multiworker:
            raise ConfigError(
                "train.max_minutes stops each worker by its own clock, at different "
                "steps of a collective loop; set train.max_minutes=0 and limit "
                "train.epochs instead"
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

    model_path = save_model(recipe.inference_model(model), run_dir / MODEL_FILE)
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
    callback_list = runner_callbacks(
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
        callbacks = runner_callbacks(
            config, None, [], recipe.callbacks(config, fold_data)
        )
        history = fit(model, fold_data, config, callbacks, verbose)
        _check_finite(history, config)
        tables.append(recipe.evaluate(recipe.inference_model(model), fold_data, config))
    return {"folds": tables, "mean": mean_table(tables)}


def tuning_callbacks(config: RecipeConfig) -> list[keras.callbacks.Callback]:
    """The callbacks a tuning trial uses: NaN stop and early stopping."""
    return runner_callbacks(config, None, [])


def _timestamp(seconds: float) -> str:
    moment = datetime.datetime.fromtimestamp(seconds, tz=datetime.timezone.utc)
    return moment.isoformat(timespec="seconds")
