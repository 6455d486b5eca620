"""`rnnkit run NAME`: train a recipe into a run directory (`rnnkit.training.runner`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from rnnkit.cli._common import load_frameworks, print_metrics, user_errors
from rnnkit.cli._options import (
    DRY_RUN_OPTION,
    RecipeGroup,
    config_params,
    dry_run,
    field_options,
    given_config_params,
    resolve_config,
)
from rnnkit.errors import RnnkitError
from rnnkit.recipe import Recipe


def _cluster_options(params: dict[str, Any]) -> str | None:
    """Writes TF_CONFIG from --workers/--worker-index; a line saying which worker."""
    workers, index = params.pop("workers"), params.pop("worker_index")
    if workers is None and index is None:
        return None
    with user_errors():
        if workers is None or index is None:
            raise RnnkitError(
                "--workers and --worker-index go together: every machine gets the "
                "same --workers HOST:PORT,... and its own --worker-index (0: chief)"
            )
        from rnnkit.training.cluster import write_tf_config

        cluster = write_tf_config(workers, index)
    count = len(cluster["cluster"]["worker"])
    role = "the chief" if index == 0 else "a worker"
    return f"worker {index} of {count} ({role}) in TF_CONFIG"


def _dry_run(recipe: Recipe, params: dict[str, Any], cluster_line: str | None) -> None:
    if cluster_line is not None:
        click.echo(f"Dry run: {cluster_line}")
    run_dir = params["resume"] or params["run_dir"]
    where = run_dir or f"runs/{recipe.name}/<timestamp>"
    if params["resume"] is None and run_dir and any(Path(run_dir).glob("*")):
        with user_errors():
            raise RnnkitError(
                f"run directory {run_dir} is not empty; choose another "
                f"--run-dir, or continue it with --resume {run_dir}"
            )
    dry_run(recipe, params, f"without --dry-run it trains into {where}")


def _train(recipe: Recipe, params: dict[str, Any], strategy: str | None) -> None:
    load_frameworks()
    from rnnkit.training import runner

    with user_errors():
        resume = params["resume"]
        if resume is not None:
            given = given_config_params(params)
            if given or params["run_dir"] is not None:
                raise RnnkitError(
                    "--resume continues a run with its own config.toml; leave out "
                    + ", ".join(given or ["--run-dir"])
                )
            config = runner.prepare_resume(recipe, resume)
            if strategy is not None and strategy != config.train.strategy:
                raise RnnkitError(
                    f"--resume continues a run with its own config.toml "
                    f"(train.strategy={config.train.strategy}); leave out "
                    "--strategy"
                )
            run_dir = resume
        else:
            config = resolve_config(recipe, params)
            run_dir = params["run_dir"]
        result = runner.run(recipe, config, run_dir, resume=resume is not None)
    if not result.chief:
        click.echo(
            f"\nTrained as a worker; weights fingerprint "
            f"{result.weights_fingerprint} (the chief's is the same). The chief "
            "wrote the run directory and the test metrics."
        )
        return
    print_metrics(result.metrics)
    click.echo(f"\nRun directory: {result.run_dir}")


def run_command(recipe: Recipe) -> click.Command:
    """`rnnkit run NAME` for one recipe, with its config fields as options."""

    def callback(**params: Any) -> None:
        cluster_line = _cluster_options(params)
        if params["strategy"] is None and cluster_line is not None:
            params["strategy"] = "multiworker"
        strategy = params.pop("strategy")
        if strategy is not None and params["resume"] is None:
            params["assignments"] = (
                *params["assignments"],
                f"train.strategy={strategy}",
            )
        if params.pop("dry_run"):
            _dry_run(recipe, params, cluster_line)
        else:
            _train(recipe, params, strategy)

    params = [
        *config_params(),
        click.Option(
            ["--run-dir"],
            type=click.Path(file_okay=False, path_type=Path),
            help="Where to write the run (default: runs/NAME/<timestamp>).",
        ),
        click.Option(
            ["--resume"],
            type=click.Path(file_okay=False, exists=True, path_type=Path),
            help="Continue the interrupted run in this directory.",
        ),
        click.Option(
            ["--strategy"],
            type=click.Choice(["auto", "one", "mirrored", "multiworker"]),
            help="Shortcut for train.strategy: how to spread training over devices "
            "and machines.",
        ),
        click.Option(
            ["--workers"],
            metavar="HOST:PORT,...",
            help="The machines of a multi-worker run, the chief first; the same on "
            "every machine (writes TF_CONFIG; implies --strategy multiworker).",
        ),
        click.Option(
            ["--worker-index"],
            type=click.IntRange(min=0),
            help="This machine's place in --workers (0: the chief, which writes the "
            "run directory).",
        ),
        DRY_RUN_OPTION,
        *field_options(recipe.Config),
    ]
    return click.Command(
        recipe.name,
        callback=callback,
        params=params,
        help=f"{recipe.summary}\n\nTrains, evaluates on the test split and writes "
        "a run directory. Config options below override --config and --set.",
        short_help=recipe.summary,
    )


@click.group(cls=RecipeGroup, command_for=run_command)
def run() -> None:
    """Train a recipe and report its test metrics next to the baselines'."""
