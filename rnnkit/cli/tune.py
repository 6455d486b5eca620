"""`rnnkit tune NAME`: search a recipe's hyperparameters (`rnnkit.tuning`), on one
machine or as the chief or a worker of a distributed search.

`rnnkit.tuning` imports the runner, so even its light `cluster` module is imported
only once a recipe is named: `rnnkit --help` lists this command without it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from rnnkit.cli._common import load_frameworks, user_errors
from rnnkit.cli._options import (
    DRY_RUN_OPTION,
    RecipeGroup,
    config_params,
    dry_run,
    field_options,
    resolve_config,
)
from rnnkit.errors import RnnkitError
from rnnkit.recipe import Recipe


def _cluster_role(params: dict[str, Any]) -> str | None:
    """Checks --chief, --worker and their options; "chief", "worker" or None."""
    from rnnkit.tuning import cluster as tuning_cluster

    chief, worker = params["chief"], params["worker"]
    if chief is not None:
        tuning_cluster.parse_address(chief)
    if worker is not None:
        tuning_cluster.check_worker_id(worker)
        if chief is None:
            raise RnnkitError(
                "--worker runs trials for a chief: give its address with "
                "--chief HOST:PORT"
            )
        wrong = [
            option
            for option, given in (
                ("--overwrite", params["overwrite"]),
                ("--worker-timeout", params["worker_timeout"] is not None),
            )
            if given
        ]
        if wrong:
            raise RnnkitError(
                f"{', '.join(wrong)} belongs to the chief's command, not a worker's"
            )
        if params["tuner"] == "hyperband" and params["tune_dir"] is None:
            raise RnnkitError(
                "a Hyperband worker continues trials from other workers' "
                "checkpoints: give it the chief's tuning folder on a shared "
                "filesystem (--tune-dir)"
            )
        return "worker"
    if params["connect_timeout"] is not None:
        raise RnnkitError("--connect-timeout is a worker's (--worker ID) option")
    if params["one_process"]:
        raise RnnkitError("--one-process is a worker's (--worker ID) option")
    if chief is None and params["worker_timeout"] is not None:
        raise RnnkitError("--worker-timeout is the chief's (--chief) option")
    return None if chief is None else "chief"


def _tune_dir(recipe: Recipe, params: dict[str, Any]) -> Path:
    return params["tune_dir"] or Path("runs") / recipe.name / "tuning"


def _dry_run(recipe: Recipe, params: dict[str, Any], role: str | None) -> None:
    if role == "worker":
        what = (
            f"without --dry-run it runs trials for the chief at "
            f"{params['chief']} as worker {params['worker']}"
        )
    else:
        what = (
            f"without --dry-run it searches {params['max_trials']} trial(s) "
            f"into {_tune_dir(recipe, params)}"
            + (f", served to workers at {params['chief']}" if role else "")
        )
    dry_run(recipe, params, what)


def _work_for_chief(recipe: Recipe, params: dict[str, Any]) -> None:
    from rnnkit import tuning
    from rnnkit.tuning import cluster as tuning_cluster

    with user_errors():
        ran = tuning.tune_worker(
            recipe,
            resolve_config(recipe, params),
            params["worker"],
            params["chief"],
            tuner=params["tuner"],
            executions_per_trial=params["executions_per_trial"],
            directory=params["tune_dir"],  # None: a temporary folder
            connect_timeout=params["connect_timeout"] or tuning_cluster.CONNECT_TIMEOUT,
            process_per_trial=not params["one_process"],
        )
    click.echo(
        f"\nWorker {ran.worker_id} ran {len(ran.trials)} trial(s) for the "
        f"chief at {ran.chief}:"
    )
    for trial in ran.trials:
        click.echo(
            f"  trial {trial.trial_id}: {trial.status} in {trial.seconds:g} s, "
            f"{trial.resident_mib:.0f} MiB resident at its end"
        )


def _search(recipe: Recipe, params: dict[str, Any]) -> None:
    load_frameworks()
    from rnnkit import tuning
    from rnnkit.tuning import cluster as tuning_cluster

    with user_errors():
        result = tuning.tune(
            recipe,
            resolve_config(recipe, params),
            tuner=params["tuner"],
            max_trials=params["max_trials"],
            executions_per_trial=params["executions_per_trial"],
            directory=_tune_dir(recipe, params),
            overwrite=params["overwrite"],
            chief=params["chief"],
            worker_timeout=params["worker_timeout"] or tuning_cluster.WORKER_TIMEOUT,
        )
    click.echo(
        f"\n{result.completed} trial(s) completed; best {recipe.objective} = "
        f"{result.best_score:.6g}"
    )
    values = ", ".join(f"{k}={v}" for k, v in result.best_values.items())
    click.echo(f"Best trial:  {result.best_trial_id} ({values})")
    click.echo(f"Best config: {result.best_config_path}")
    click.echo(f"Trials:      {result.trials_path}")
    best = result.best_config_path
    click.echo(f"Train it with: rnnkit run {recipe.name} --config {best}")


def tune_command(recipe: Recipe) -> click.Command:
    """`rnnkit tune NAME` for one recipe, with its config fields as options."""
    from rnnkit.tuning import cluster as tuning_cluster

    def callback(**params: Any) -> None:
        with user_errors():
            role = _cluster_role(params)
        if params.pop("dry_run"):
            _dry_run(recipe, params, role)
            return
        # Before TensorFlow starts and the data loads, so that these fail in seconds.
        with user_errors():
            if role == "worker":
                tuning_cluster.wait_for_chief(
                    tuning_cluster.parse_address(params["chief"]),
                    params["connect_timeout"] or tuning_cluster.CONNECT_TIMEOUT,
                )
            elif role == "chief":
                tuning_cluster.check_can_listen(
                    tuning_cluster.parse_address(params["chief"])
                )
        if role == "worker":  # a worker's trials run in processes of their own
            _work_for_chief(recipe, params)
        else:
            _search(recipe, params)

    params = [
        click.Option(
            ["--tuner"],
            type=click.Choice(["random", "hyperband", "bayesian"]),
            default="random",
            show_default=True,
            help="Keras Tuner search algorithm.",
        ),
        click.Option(
            ["--max-trials"],
            type=click.IntRange(min=1),
            default=10,
            show_default=True,
            help="Most configurations to try.",
        ),
        click.Option(
            ["--executions-per-trial"],
            type=click.IntRange(min=1),
            default=1,
            show_default=True,
            help="Trainings per configuration (their mean is the score).",
        ),
        click.Option(
            ["--tune-dir"],
            type=click.Path(file_okay=False, path_type=Path),
            help="Tuning state and results (default: runs/NAME/tuning); "
            "running again resumes it.",
        ),
        click.Option(
            ["--overwrite"], is_flag=True, help="Start afresh instead of resuming."
        ),
        click.Option(
            ["--chief"],
            metavar="HOST:PORT",
            help="Distributed search: alone, serve the search to workers at this "
            "address (this machine's); with --worker, the chief to run trials for.",
        ),
        click.Option(
            ["--worker"],
            metavar="ID",
            help="Run trials for the chief at --chief, as worker ID (e.g. 1). "
            "--tune-dir: where to keep its checkpoints (default: a temporary folder).",
        ),
        click.Option(
            ["--connect-timeout"],
            type=click.FloatRange(min=0, min_open=True),
            metavar="SECONDS",
            help="Worker: how long to wait for the chief, at the start and for each "
            f"request [default: {tuning_cluster.CONNECT_TIMEOUT:g}].",
        ),
        click.Option(
            ["--one-process"],
            is_flag=True,
            help="Worker: run every trial in the worker's own process instead of a "
            "fresh one each (no start-up per trial, but the memory grows from trial "
            "to trial).",
        ),
        click.Option(
            ["--worker-timeout"],
            type=click.FloatRange(min=0, min_open=True),
            metavar="SECONDS",
            help="Chief: how long to wait for a worker while no trial runs "
            f"[default: {tuning_cluster.WORKER_TIMEOUT:g}].",
        ),
        DRY_RUN_OPTION,
        *config_params(),
        *field_options(recipe.Config),
    ]
    return click.Command(
        recipe.name,
        callback=callback,
        params=params,
        help=f"{recipe.summary}\n\nSearches the recipe's search space with Keras Tuner "
        "and writes best.toml and trials.csv. Config options set the fixed values.",
        short_help=recipe.summary,
    )


@click.group(cls=RecipeGroup, command_for=tune_command)
def tune() -> None:
    """Tune a recipe's hyperparameters with Keras Tuner."""
