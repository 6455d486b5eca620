"""Keras Tuner over a recipe's search space.

Each trial draws values with `recipe.search_space(hp, config)`, which returns a whole
config; the trial then loads the data that config asks for (cached, since a search
space may change e.g. the window length), seeds every generator with `train.seed`,
builds the model with `recipe.build_model` and trains it through the runner's `fit`,
with the runner's NaN and early-stopping callbacks. Keras Tuner infers the direction of
`recipe.objective` from its name (a loss is minimised, an accuracy maximised).

The tuning folder keeps Keras Tuner's state, so running the same command again resumes
the search (`overwrite=True` starts afresh), and receives two results:

    best.toml    the best trial's full config: `rnnkit run NAME --config best.toml`
    trials.csv   one row per trial: id, status, objective score, hyperparameter values

Across machines, `tune(..., chief="HOST:PORT")` serves the search to workers instead
of running trials, and writes the same two files; `tune_worker` runs trials for it,
each in a fresh process (rnnkit/tuning/cluster.py has the plumbing).
"""

from __future__ import annotations

import contextlib
import csv
import dataclasses
import functools
import io
import json
import logging
import math
import multiprocessing
import os
import re
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rnnkit import config as config_lib
from rnnkit.errors import ClusterError, ConfigError, RnnkitError, TrainingError
from rnnkit.recipe import Recipe, RecipeConfig, RecipeData
from rnnkit.training import runner
from rnnkit.tuning import cluster

log = logging.getLogger("rnnkit")

TUNERS = ("random", "hyperband", "bayesian")
BEST_CONFIG_FILE = "best.toml"
TRIALS_FILE = "trials.csv"


@dataclasses.dataclass
class TuneResult:
    """Where the results went and what the best trial reached."""

    directory: Path
    best_config: RecipeConfig
    best_config_path: Path
    trials_path: Path
    best_score: float
    completed: int
    best_trial_id: str
    best_values: dict[str, Any]


@dataclasses.dataclass
class WorkerTrial:
    """A trial a worker ran: its status, seconds, and the worker process's resident
    memory when it ended (MiB)."""

    trial_id: str
    status: str
    seconds: float
    resident_mib: float


@dataclasses.dataclass
class WorkerResult:
    """The trials one worker ran, in the order it ran them."""

    worker_id: str
    chief: str
    trials: list[WorkerTrial]


def _make_hypermodel(recipe: Recipe, config: RecipeConfig, verbose: int | str) -> Any:
    import keras
    import keras_tuner

    data_cache: dict[str, RecipeData] = {}

    def data_for(trial_config: RecipeConfig) -> RecipeData:
        key = repr(trial_config.to_dict()["data"])
        if key not in data_cache:
            data_cache[key] = recipe.load_data(trial_config)
        return data_cache[key]

    class RecipeHyperModel(keras_tuner.HyperModel):
        """Builds and fits the recipe's model for one set of hyperparameters."""

        def build(self, hp: keras_tuner.HyperParameters) -> keras.Model:
            trial_config = recipe.search_space(hp, config)
            keras.utils.set_random_seed(trial_config.train.seed)
            return recipe.build_model(trial_config, data_for(trial_config))

        def fit(
            self,
            hp: keras_tuner.HyperParameters,
            model: keras.Model,
            *args: Any,
            callbacks: list | None = None,
            **kwargs: Any,
        ) -> keras.callbacks.History:
            trial_config = recipe.search_space(hp, config)
            history = runner.fit(
                model,
                data_for(trial_config),
                trial_config,
                [
                    *(callbacks or []),
                    *runner.tuning_callbacks(trial_config),
                    *recipe.callbacks(trial_config, data_for(trial_config)),
                ],
                **{"verbose": verbose, **kwargs},
            )
            losses = history.history.get("loss", [])
            if any(not math.isfinite(loss) for loss in losses):
                # A failed trial, so Keras Tuner neither ranks it nor retries forever.
                raise keras_tuner.errors.FailedTrialError(
                    "the training loss became NaN"
                )
            return history

    return RecipeHyperModel(name=recipe.name)


def _make_tuner(
    tuner: str,
    hypermodel: Any,
    objective: str,
    config: RecipeConfig,
    max_trials: int,
    executions_per_trial: int,
    directory: Path,
    overwrite: bool,
) -> Any:
    import keras_tuner

    common = dict(
        hypermodel=hypermodel,
        objective=objective,
        seed=config.train.seed,
        executions_per_trial=executions_per_trial,
        directory=str(directory),
        project_name=tuner,
        overwrite=overwrite,
    )
    if tuner == "random":
        return keras_tuner.RandomSearch(max_trials=max_trials, **common)
    if tuner == "bayesian":
        return keras_tuner.BayesianOptimization(max_trials=max_trials, **common)
    if tuner == "hyperband":
        search = keras_tuner.Hyperband(max_epochs=config.train.epochs, **common)
        # Hyperband sizes its brackets from max_epochs; cap the number of trials too.
        search.oracle.max_trials = max_trials
        return search
    raise ConfigError(f"unknown tuner {tuner!r}; choose one of {', '.join(TUNERS)}")


def tune(
    recipe: Recipe,
    config: RecipeConfig,
    tuner: str = "random",
    max_trials: int = 10,
    executions_per_trial: int = 1,
    directory: str | Path | None = None,
    overwrite: bool = False,
    verbose: int | str = "auto",
    chief: str | None = None,
    worker_timeout: float = cluster.WORKER_TIMEOUT,
) -> TuneResult:
    """Searches `recipe.search_space` and writes best.toml and trials.csv.

    Args:
        recipe: the recipe instance.
        config: the fixed values; the search space overrides some of them per trial.
        tuner: "random", "hyperband" or "bayesian".
        max_trials: most configurations to try.
        executions_per_trial: trainings per configuration, averaged.
        directory: tuning state and results; default `runs/<recipe>/tuning`.
        overwrite: start afresh instead of resuming the search in `directory`.
        verbose: Keras `fit` verbosity of each trial.
        chief: "HOST:PORT" to serve the search to workers (`tune_worker`) there
            instead of running the trials in this process.
        worker_timeout: with `chief`, seconds to wait, while no trial runs, for a
            worker to ask for one.

    Raises:
        TrainingError: if no trial completed.
        ClusterError: with `chief`, if it cannot listen at that address or no
            worker came within `worker_timeout`.
    """
    if tuner not in TUNERS:
        raise ConfigError(f"unknown tuner {tuner!r}; choose one of {', '.join(TUNERS)}")
    address = None if chief is None else cluster.parse_address(chief)
    directory = Path(directory or Path("runs") / recipe.name / "tuning")
    _check_one_device(config)
    runner.configure_runtime(config.train)
    with (
        contextlib.nullcontext()
        if address is None
        else cluster.role(cluster.CHIEF_ID, address, worker_timeout)
    ):
        search = _make_tuner(
            tuner,
            _make_hypermodel(recipe, config, verbose),
            recipe.objective,
            config,
            max_trials,
            executions_per_trial,
            directory,
            overwrite,
        )
        if address is None:
            log.info("tuning %s with %s search in %s", recipe.name, tuner, directory)
            try:
                search.search(verbose=1 if verbose == "auto" else verbose)
            except RuntimeError as error:
                # Keras Tuner stops after several consecutive failed trials.
                log.info("tuning stopped: %s", str(error).strip().splitlines()[0])
        else:
            log.info(
                "chief of a %s search of %s at %s, results in %s; waiting for workers",
                tuner,
                recipe.name,
                address,
                directory,
            )
            # What Keras Tuner's `search` does on the chief, with a serving loop that
            # ends (see rnnkit.tuning.cluster).
            search.oracle.verbose = 1 if verbose == "auto" else verbose
            search.save()
            stopped = cluster.serve_oracle(search.oracle, address, worker_timeout)
            if stopped:
                log.info("tuning stopped: %s", stopped)
    return _report(search, recipe, config, tuner, directory)


def _report(
    search: Any, recipe: Recipe, config: RecipeConfig, tuner: str, directory: Path
) -> TuneResult:
    """Writes best.toml and trials.csv from the oracle's trials."""
    import keras_tuner

    trials = list(search.oracle.trials.values())
    completed = [
        t for t in trials if t.status == keras_tuner.engine.trial.TrialStatus.COMPLETED
    ]
    if not completed:
        failed = [t for t in trials if t.message]
        reason = _error_line(failed[-1].message) if failed else "none ran"
        raise TrainingError(
            f"no tuning trial completed ({len(trials)} tried in {directory}); "
            f"last failure: {reason}"
        )

    best_trial = search.oracle.get_best_trials(1)[0]
    best_config = recipe.search_space(best_trial.hyperparameters, config)
    score = float(best_trial.score)
    best_config_path = runner.write_text(
        directory / BEST_CONFIG_FILE,
        config_lib.to_toml(
            best_config,
            f"rnnkit recipe: {recipe.name}\n"
            f"Best of {len(completed)} completed {tuner} trials: "
            f"{recipe.objective} = {score:.6g} (trial {best_trial.trial_id})\n"
            f"Train it with: rnnkit run {recipe.name} --config {BEST_CONFIG_FILE}",
        ),
    )
    trials_path = runner.write_text(
        directory / TRIALS_FILE, _trials_csv(trials, recipe)
    )
    return TuneResult(
        directory=directory,
        best_config=best_config,
        best_config_path=best_config_path,
        trials_path=trials_path,
        best_score=score,
        completed=len(completed),
        best_trial_id=best_trial.trial_id,
        best_values=dict(best_trial.hyperparameters.values),
    )


def tune_worker(
    recipe: Recipe,
    config: RecipeConfig,
    worker_id: str,
    chief: str,
    tuner: str = "random",
    executions_per_trial: int = 1,
    directory: str | Path | None = None,
    connect_timeout: float = cluster.CONNECT_TIMEOUT,
    verbose: int | str = "auto",
    process_per_trial: bool = True,
) -> WorkerResult:
    """Runs the trials that the chief at `chief` ("HOST:PORT") hands out, until it
    has no more.

    Give it the recipe, config, `tuner` and `executions_per_trial` the chief has: the
    trial's hyperparameters come from the chief, the fixed values from `config`.

    Args:
        worker_id: this worker's id among the chief's workers. A worker restarted
            with the id of one that died in a trial runs that trial again.
        directory: where this worker keeps its trial checkpoints (the chief's folder
            on a shared filesystem, needed for Hyperband); default a temporary
            folder, removed at the end.
        connect_timeout: seconds to wait for the chief, at the start and for each
            request.
        process_per_trial: run each trial in a fresh process, which returns all of
            its memory when it ends (one process keeps growing: see
            benchmarks/tuning_memory.py); `recipe` and `config` must then pickle.

    Raises:
        ClusterError: if the chief does not answer within `connect_timeout`, or a
            trial's process dies.
    """
    cluster.check_worker_id(worker_id)
    address = cluster.parse_address(chief)
    if tuner not in TUNERS:
        raise ConfigError(f"unknown tuner {tuner!r}; choose one of {', '.join(TUNERS)}")
    if tuner == "hyperband" and directory is None:
        raise ConfigError(
            "a Hyperband worker continues trials from other workers' checkpoints: "
            "give it the chief's tuning folder on a shared filesystem (--tune-dir)"
        )
    cluster.wait_for_chief(address, connect_timeout)
    log.info("worker %s of the chief at %s", worker_id, address)
    with contextlib.ExitStack() as stack:
        if directory is None:
            directory = stack.enter_context(
                tempfile.TemporaryDirectory(prefix=f"rnnkit-worker-{worker_id}-")
            )
        work = functools.partial(
            _work,
            recipe,
            config,
            worker_id,
            address,
            tuner,
            executions_per_trial,
            Path(directory),
            connect_timeout,
            verbose,
        )
        if not process_per_trial:
            trials, _ = work(one_trial=False)
            return WorkerResult(worker_id, str(address), trials)
        trials = []
        scratch = Path(stack.enter_context(tempfile.TemporaryDirectory()))
        spawn = multiprocessing.get_context("spawn")
        while True:
            report = scratch / f"trial-{len(trials)}.json"
            process = spawn.Process(
                target=_trial_process, args=(report, work), daemon=True
            )
            process.start()
            process.join()
            outcome = json.loads(report.read_text()) if report.is_file() else {}
            if "error" in outcome:
                raise ClusterError(outcome["error"])
            if process.exitcode != 0 or not outcome:
                raise ClusterError(
                    f"worker {worker_id}: the process of a trial ended with exit "
                    f"status {process.exitcode} (its error is above); started again "
                    "with the same id, the worker runs that trial again"
                )
            trials.extend(WorkerTrial(**trial) for trial in outcome["trials"])
            if outcome["stopped"]:
                return WorkerResult(worker_id, str(address), trials)


class _OneTrialDone(Exception):
    """Ends a worker's Keras Tuner loop after one trial, before it asks for another."""


def _trial_process(report: Path, work: Callable[..., Any]) -> None:
    """A trial's process: runs one trial (or learns that none is left) into `report`."""
    from rnnkit._native_logs import import_frameworks_quietly

    # gRPC's informational lines (e.g. the chief closing the connection at the end).
    os.environ.setdefault("GRPC_VERBOSITY", "ERROR")
    import_frameworks_quietly()
    try:
        trials, stopped = work(one_trial=True)
        outcome = {
            "trials": [dataclasses.asdict(trial) for trial in trials],
            "stopped": stopped,
        }
    except RnnkitError as error:
        outcome = {"error": str(error)}
    runner.write_text(report, json.dumps(outcome))


def _work(
    recipe: Recipe,
    config: RecipeConfig,
    worker_id: str,
    address: cluster.Address,
    tuner: str,
    executions_per_trial: int,
    directory: Path,
    connect_timeout: float,
    verbose: int | str,
    one_trial: bool,
) -> tuple[list[WorkerTrial], bool]:
    """Keras Tuner's worker loop in this process: the trials it ran, and whether the
    chief said that none is left (else it stopped after one, with `one_trial`)."""
    import grpc

    _check_one_device(config)
    runner.configure_runtime(config.train)
    # A worker's tuner keeps no state of its own (its oracle is the chief's); left
    # in place, Keras Tuner would print "Reloading Tuner" before every trial.
    (directory / tuner / f"{worker_id}.json").unlink(missing_ok=True)
    with cluster.role(worker_id, address, connect_timeout):
        search = _make_tuner(
            tuner,
            _make_hypermodel(recipe, config, verbose),
            recipe.objective,
            config,
            1,  # the chief's oracle decides how many trials run
            executions_per_trial,
            directory,
            False,  # never: the folder may be the chief's
        )
        ran: list[WorkerTrial] = []
        began = time.monotonic()

        # Keras Tuner's own hooks around each trial of its loop.
        def pre_create_trial() -> None:
            nonlocal began
            if one_trial and ran:
                raise _OneTrialDone
            began = time.monotonic()

        def on_trial_end(trial: Any) -> None:
            end_trial(trial)
            seconds = round(time.monotonic() - began, 1)
            ran.append(
                WorkerTrial(trial.trial_id, trial.status, seconds, _resident_mib())
            )

        end_trial = search.on_trial_end
        search.pre_create_trial = pre_create_trial
        search.on_trial_end = on_trial_end
        try:
            search.search(verbose=1 if verbose == "auto" else verbose)
        except _OneTrialDone:
            return ran, False
        except grpc.RpcError as error:
            raise cluster.rpc_error(error, address, connect_timeout) from None
    return ran, True


def _resident_mib() -> float:
    """This process's resident memory now (Linux), else its peak so far, in MiB."""
    try:
        with open("/proc/self/statm") as statm:
            pages = int(statm.read().split()[1])
        return round(pages * os.sysconf("SC_PAGE_SIZE") / 2**20, 1)
    except OSError:
        import resource

        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return round(peak / (2**20 if sys.platform == "darwin" else 2**10), 1)


def _error_line(traceback_text: str) -> str:
    """The "SomeError: message" line of a trial's traceback (else its last line)."""
    lines = [line.strip() for line in traceback_text.strip().splitlines()]
    errors = [line for line in lines if re.match(r"^[\w.]+(Error|Exception)\b", line)]
    return (errors or lines or ["unknown error"])[-1]


def _trials_csv(trials: list[Any], recipe: Recipe) -> str:
    names: list[str] = []
    for trial in trials:
        names.extend(n for n in trial.hyperparameters.values if n not in names)
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(["trial_id", "status", recipe.objective, *names])
    for trial in sorted(trials, key=lambda t: t.trial_id):
        score = "" if trial.score is None else repr(float(trial.score))
        values = [trial.hyperparameters.values.get(n, "") for n in names]
        writer.writerow([trial.trial_id, trial.status, score, *values])
    return buffer.getvalue()


def _check_one_device(config: RecipeConfig) -> None:
    """Trials train on one device each; a search spreads over machines by trials."""
    if config.train.strategy in ("mirrored", "multiworker"):
        raise ConfigError(
            f"train.strategy={config.train.strategy}: tuning trains each trial on "
            "one device; spread a search over machines with --chief HOST:PORT and "
            "--worker ID --chief HOST:PORT instead"
        )
