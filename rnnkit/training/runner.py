"""The one training loop: seeds, device and strategy, callbacks, and the run directory.

`run(recipe, config)` trains `recipe.build_model(config, data)` on
`recipe.load_data(config)` and writes the run directory:

    config.toml     the exact resolved config (re-runnable with `--config`), first
    history.csv     one row per epoch, rewritten after every epoch
    model.keras     the trained model (best validation weights)
    metrics.json    {"test": {system: {metric: value}}, "backtest": {...} if folds > 0}
    plots/          training_curves.png and the recipe's own figures
    tensorboard/    TensorBoard logs
    backup/         BackupAndRestore state while training runs (removed when it ends)
    run.json        written last: the "completed" marker (recipe, seed, device, timings,
                    versions)

Every file is written under a temporary name in the same folder and renamed into place,
so an interrupted run never leaves a half-written file under a final name.
"""

from __future__ import annotations

import contextlib
import csv
import dataclasses
import datetime
import json
import logging
import math
import platform
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rnnkit import config as config_lib
from rnnkit.errors import ConfigError, RnnkitError, TrainingError
from rnnkit.files import atomic_path, write_csv, write_json, write_text
from rnnkit.metrics import mean_table
from rnnkit.recipe import Recipe, RecipeConfig, RecipeData
from rnnkit.training import distributed

if TYPE_CHECKING:
    import keras

log = logging.getLogger("rnnkit")

CONFIG_FILE = "config.toml"
MODEL_FILE = "model.keras"
METRICS_FILE = "metrics.json"
HISTORY_FILE = "history.csv"
RUN_FILE = "run.json"
BACKUP_DIR = "backup"
PLOT_DIR = "plots"
TENSORBOARD_DIR = "tensorboard"


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


# -- Model files ---------------------------------------------------------------------


def save_model(model: keras.Model, path: str | Path) -> Path:
    """Saves `model` in the `.keras` format atomically."""
    with atomic_path(path) as temporary:
        model.save(temporary)
    return Path(path)


def load_model(path: str | Path) -> keras.Model:
    """Loads a `.keras` model in safe mode (no arbitrary code, e.g. no lambdas)."""
    import keras

    import rnnkit.layers  # noqa: F401 - registers the rnnkit layers for deserialization
    import rnnkit.losses  # noqa: F401 - the losses a saved compile config names
    import rnnkit.models  # noqa: F401 - and the custom pieces of the rnnkit models
    import rnnkit.optimizers  # noqa: F401 - and the optimizers

    path = Path(path)
    if not path.is_file():
        raise RnnkitError(f"no model file at {path}")
    return keras.saving.load_model(path, safe_mode=True)


def read_history(path: Path) -> list[dict[str, float]]:
    """The rows of a `history.csv` ([] if there is none)."""
    if not path.is_file():
        return []
    with path.open(newline="", encoding="utf-8") as handle:
        return [
            {key: float(value) for key, value in row.items()}
            for row in csv.DictReader(handle)
        ]


# -- Runtime: seed, device, precision, strategy --------------------------------------


def configure_runtime(train: config_lib.TrainConfig, one_device: bool = False) -> Any:
    """Seeds every generator, picks the device and precision; returns the strategy.

    Call it before building a model. Two runs in fresh processes with the same seed and
    device give identical weights and metrics on CPU. `one_device`: the model cannot
    be mirrored, so `train.strategy=auto` keeps one device even on several GPUs.
    """
    import keras

    keras.utils.set_random_seed(train.seed)
    keras.mixed_precision.set_global_policy(
        "mixed_float16" if train.mixed_precision else "float32"
    )
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
    return distributed.make_strategy(train)


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
    if distributed.is_multiworker(strategy):
        workers, index = distributed.cluster_from_environment()
        return (
            f"MultiWorkerMirroredStrategy, {strategy.num_replicas_in_sync} replicas "
            f"on {workers} workers; this is worker {index}, on {devices}"
        )
    return f"{type(strategy).__name__} over {devices}"


# -- Callbacks -------------------------------------------------------------------------


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


def _callbacks(
    config: RecipeConfig,
    run_dir: Path | None,
    history_rows: list[dict[str, float]],
    extra: Sequence[keras.callbacks.Callback] = (),
) -> list[keras.callbacks.Callback]:
    import keras

    callbacks: list[keras.callbacks.Callback] = [keras.callbacks.TerminateOnNaN()]
    if config.train.patience > 0:
        callbacks.append(
            keras.callbacks.EarlyStopping(
                monitor="val_loss",
                patience=config.train.patience,
                restore_best_weights=True,
            )
        )
    if run_dir is not None:
        callbacks += [
            keras.callbacks.BackupAndRestore(
                str(run_dir / BACKUP_DIR), double_checkpoint=True
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
    common.update(overrides)
    if isinstance(data.train, tuple):
        inputs, targets = data.train
        return model.fit(
            inputs,
            targets,
            batch_size=config.train.batch_size,
            shuffle=config.train.shuffle,
            **common,
        )
    # A dataset shuffles itself (Keras warns if asked to shuffle one).
    return model.fit(data.train, shuffle=False, **common)


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


def _new_run_dir(root: Path, recipe_name: str) -> Path:
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    candidate = root / recipe_name / stamp
    suffix = 1
    while candidate.exists():
        suffix += 1
        candidate = root / recipe_name / f"{stamp}-{suffix}"
    return candidate


def config_header(recipe_name: str) -> str:
    return (
        f"rnnkit recipe: {recipe_name}\n"
        f"Re-run with: rnnkit run {recipe_name} --config config.toml"
    )


def recipe_of(config_file: Path) -> str | None:
    """The recipe name recorded in the header of a written config.toml."""
    with contextlib.suppress(OSError):
        for line in config_file.read_text(encoding="utf-8").splitlines():
            if line.startswith("# rnnkit recipe:"):
                return line.split(":", 1)[1].strip()
    return None


def prepare_resume(recipe: Recipe, run_dir: Path) -> RecipeConfig:
    """The config of an interrupted run in `run_dir`, checked to be resumable."""
    if (run_dir / RUN_FILE).exists():
        raise RnnkitError(
            f"{run_dir} holds a completed run; there is nothing to resume"
        )
    config_file = run_dir / CONFIG_FILE
    if not config_file.is_file():
        raise RnnkitError(
            f"{run_dir} is not an rnnkit run directory (no {CONFIG_FILE})"
        )
    recorded = recipe_of(config_file)
    if recorded is not None and recorded != recipe.name:
        raise RnnkitError(
            f"{run_dir} is a run of recipe {recorded!r}, not {recipe.name!r}"
        )
    return config_lib.load_toml(recipe.Config, config_file)


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
    single = recipe.single_device(config)
    if single is not None and config.train.strategy in ("mirrored", "multiworker"):
        raise ConfigError(
            f"train.strategy={config.train.strategy}: {single}; use --strategy one "
            "(or auto)"
        )
    chief = (
        config.train.strategy != "multiworker"
        or distributed.cluster_from_environment()[1] == 0
    )
    if chief:
        run_dir = (
            Path(run_dir) if run_dir else _new_run_dir(Path(runs_root), recipe.name)
        )
        if resume:
            if not (run_dir / BACKUP_DIR).exists():
                log.info(
                    "no backup in %s; training starts from the first epoch", run_dir
                )
        elif run_dir.exists() and any(run_dir.iterdir()):
            raise RnnkitError(
                f"run directory {run_dir} is not empty; choose another --run-dir, "
                f"or continue it with --resume {run_dir}"
            )
        run_dir.mkdir(parents=True, exist_ok=True)
        write_text(
            run_dir / CONFIG_FILE,
            config_lib.to_toml(config, config_header(recipe.name)),
        )
        log.info("run directory: %s", run_dir)
    else:
        run_dir = None
        log.info(
            "not the chief: this worker writes nothing (the chief, worker 0, "
            "writes the run directory)"
        )

    automatic_strategy = configure_runtime(config.train, one_device=single is not None)
    strategy = strategy or automatic_strategy
    device = device_summary(strategy)
    multiworker = distributed.is_multiworker(strategy)
    log.info("training on %s, seed %d", device, config.train.seed)
    # train.batch_size is one replica's batch; data and steps use the global batch.
    per_replica = config.train.batch_size
    run_config = config
    if strategy is not None and strategy.num_replicas_in_sync > 1:
        log.info(
            "%s",
            distributed.describe_batch(
                per_replica, strategy, config.train.learning_rate
            ),
        )
        run_config = config.with_values(
            {"train.batch_size": per_replica * strategy.num_replicas_in_sync}
        )
        if config.evaluation.folds > 0 and multiworker:
            raise ConfigError(
                "evaluation.folds (the backtest) refits the model per fold, which "
                "the multi-worker loop does not do; set evaluation.folds=0"
            )
    config = run_config

    data = recipe.load_data(config)
    history_rows = read_history(run_dir / HISTORY_FILE) if resume and chief else []
    try:
        model = _build(recipe, config, data, strategy)
        callback_list = _callbacks(
            config,
            run_dir,
            history_rows,
            [*recipe.callbacks(config, data), *callbacks],
        )
        text_split = distributed.split_text_model(model, strategy)
        if multiworker:
            history = distributed.fit_multiworker(
                model, data, config, strategy, callback_list, verbose=verbose
            )
        elif text_split is not None:
            # Strings become token ids in the input pipeline; the replicas train the
            # rest of the model, whose layers are the whole model's.
            history = fit(
                text_split.model,
                dataclasses.replace(
                    data,
                    train=text_split.dataset(data.train),
                    validation=text_split.dataset(data.validation),
                ),
                config,
                callback_list,
                verbose=verbose,
            )
        else:
            history = fit(model, data, config, callback_list, verbose=verbose)
    except KeyboardInterrupt:
        log.info(
            "interrupted; continue with: rnnkit run %s --resume %s",
            recipe.name,
            run_dir,
        )
        raise
    _check_finite(history, config)
    fingerprint = None
    if multiworker:
        fingerprint = distributed.weights_fingerprint(model)
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
            "mixed_precision": config.train.mixed_precision,
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


def versions() -> dict[str, str]:
    """Versions of Python and the libraries a run depends on."""
    from importlib.metadata import PackageNotFoundError, version

    found = {"python": platform.python_version()}
    for name in ("rnnkit", "keras", "tensorflow", "numpy", "keras-tuner"):
        with contextlib.suppress(PackageNotFoundError):
            found[name] = version(name)
    return found


def load_run(
    run_dir: str | Path, load_recipe: Callable[[str], Recipe]
) -> tuple[Recipe, RecipeConfig, keras.Model]:
    """The recipe, config and model of a completed run directory."""
    run_dir = Path(run_dir)
    run_file = run_dir / RUN_FILE
    if not run_file.is_file():
        raise RnnkitError(
            f"{run_dir} is not a completed rnnkit run (no {RUN_FILE}); "
            "resume an interrupted run with `rnnkit run NAME --resume DIR`"
        )
    try:
        recipe_name = json.loads(run_file.read_text(encoding="utf-8"))["recipe"]
    except (ValueError, KeyError):
        raise RnnkitError(f"{run_file} is damaged (no recipe name)") from None
    recipe = load_recipe(recipe_name)
    config = config_lib.load_toml(recipe.Config, run_dir / CONFIG_FILE)
    return recipe, config, load_model(run_dir / MODEL_FILE)
