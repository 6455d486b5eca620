"""A worker of a distributed search (`tune_worker`): it runs the chief's trials.

The chief (`rnnkit.tuning.tune(..., chief="HOST:PORT")`) hands out trials through
Keras Tuner's own chief/worker mode (rnnkit.tuning.cluster); a worker builds and trains
each as `tune` would in one process. By default each trial runs in a fresh process,
which returns all of its memory when it ends.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import logging
import multiprocessing
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rnnkit.errors import ClusterError, ConfigError, RnnkitError
from rnnkit.files import write_text
from rnnkit.recipe import Recipe, RecipeConfig
from rnnkit.training.runtime import (
    calibrated,
    configure_runtime,
    keeps_dtype_policy,
)
from rnnkit.tuning import cluster
from rnnkit.tuning.search import TUNERS, check_one_device, make_tuner

log = logging.getLogger("rnnkit")


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


@calibrated
@keeps_dtype_policy
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
    write_text(report, json.dumps(outcome))


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

    check_one_device(config)
    configure_runtime(config.train)
    # A worker's tuner keeps no state of its own (its oracle is the chief's); left
    # in place, Keras Tuner would print "Reloading Tuner" before every trial.
    (directory / tuner / f"{worker_id}.json").unlink(missing_ok=True)
    with cluster.role(worker_id, address, connect_timeout):
        search = make_tuner(
            tuner,
            recipe,
            config,
            verbose,
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
