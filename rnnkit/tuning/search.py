"""A search over a recipe's search space with Keras Tuner (`tune`).

Each trial is a `RecipeHyperModel` build and fit (rnnkit.tuning.hypermodel: how
`recipe.search_space(hp, config)` becomes a trial's config, data and model). Keras
Tuner infers the direction of `recipe.objective` from its name (a loss is minimised, an
accuracy maximised).

The tuning folder keeps Keras Tuner's state, so running the same command again resumes
the search (`overwrite=True` starts afresh), and receives two results:

    best.toml    the best trial's full config: `rnnkit run NAME --config best.toml`
    trials.csv   one row per trial: id, status, objective score, hyperparameter values

Across machines, `tune(..., chief="HOST:PORT")` serves the search to workers instead
of running trials (rnnkit.tuning.cluster), and writes the same two files; the workers
run rnnkit.tuning.worker.tune_worker.
"""

from __future__ import annotations

import contextlib
import csv
import dataclasses
import io
import logging
import re
from pathlib import Path
from typing import Any

from rnnkit import config as config_lib
from rnnkit.errors import ConfigError, TrainingError
from rnnkit.files import write_text
from rnnkit.recipe import Recipe, RecipeConfig
from rnnkit.training.runtime import (
    calibrated,
    configure_runtime,
    keeps_dtype_policy,
)
from rnnkit.tuning import cluster

log = logging.getLogger("rnnkit")

TUNERS = ("random", "hyperband", "bayesian")
BEST_CONFIG_FILE = "best.toml"
TRIALS_FILE = "trials.csv"
# In the tuner's project folder (DIRECTORY/TUNER): the fixed settings the search was
# started with, which a resumed search must share (`check_same_search`).
FIXED_CONFIG_FILE = "fixed.toml"


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


def make_tuner(
    tuner: str,
    recipe: Recipe,
    config: RecipeConfig,
    verbose: int | str,
    max_trials: int,
    executions_per_trial: int,
    directory: Path,
    overwrite: bool,
) -> Any:
    """The Keras Tuner tuner `tuner` names, searching `recipe` around `config`."""
    import keras_tuner

    from rnnkit.tuning.hypermodel import RecipeHyperModel

    common = dict(
        hypermodel=RecipeHyperModel(recipe, config, verbose),
        objective=recipe.objective,
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


@calibrated
@keeps_dtype_policy
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
    recipe.check_config(config)  # before anything is written or trained
    address = None if chief is None else cluster.parse_address(chief)
    directory = Path(directory or Path("runs") / recipe.name / "tuning")
    check_one_device(config)
    if not overwrite:
        check_same_search(recipe, config, directory / tuner)
    configure_runtime(config.train)
    with (
        contextlib.nullcontext()
        if address is None
        else cluster.role(cluster.CHIEF_ID, address, worker_timeout)
    ):
        search = make_tuner(
            tuner,
            recipe,
            config,
            verbose,
            max_trials,
            executions_per_trial,
            directory,
            overwrite,
        )
        fixed = directory / tuner / FIXED_CONFIG_FILE
        if not fixed.exists():
            header = f"rnnkit recipe: {recipe.name}\nThe fixed settings of this search"
            write_text(fixed, config_lib.to_toml(config, header))
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


def check_same_search(recipe: Recipe, config: RecipeConfig, project: Path) -> None:
    """Refuses to resume the search saved in `project` with other fixed settings:
    its trials were scored under the old ones, and best.toml would pair their
    winner with the new ones."""
    fixed = project / FIXED_CONFIG_FILE
    if not fixed.exists():
        if (project / "oracle.json").exists():
            log.warning(
                "%s predates rnnkit's record of a search's fixed settings; resuming "
                "it with the current ones",
                project,
            )
        return
    saved = config_lib.load_toml(type(config), fixed).flat()
    current = config.flat()
    changed = [key for key in current if current[key] != saved.get(key)]
    if changed:
        shown = ", ".join(
            f"{key} {saved.get(key)!r} -> {current[key]!r}" for key in changed[:5]
        )
        more = f" and {len(changed) - 5} more" if len(changed) > 5 else ""
        raise ConfigError(
            f"the search in {project.parent} was started with other fixed settings "
            f"({shown}{more}); resume it with its own settings ({fixed}), or start "
            "afresh with --overwrite or another --tune-dir"
        )


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
    best_config_path = write_text(
        directory / BEST_CONFIG_FILE,
        config_lib.to_toml(
            best_config,
            f"rnnkit recipe: {recipe.name}\n"
            f"Best of {len(completed)} completed {tuner} trials: "
            f"{recipe.objective} = {score:.6g} (trial {best_trial.trial_id})\n"
            f"Train it with: rnnkit run {recipe.name} --config {BEST_CONFIG_FILE}",
        ),
    )
    trials_path = write_text(directory / TRIALS_FILE, _trials_csv(trials, recipe))
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


def check_one_device(config: RecipeConfig) -> None:
    """Trials train on one device each; a search spreads over machines by trials."""
    if config.train.strategy in ("mirrored", "multiworker"):
        raise ConfigError(
            f"train.strategy={config.train.strategy}: tuning trains each trial on "
            "one device; spread a search over machines with --chief HOST:PORT and "
            "--worker ID --chief HOST:PORT instead"
        )
