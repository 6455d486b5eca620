"""`rnnkit ensemble RUN_DIR RUN_DIR...`: trained runs of one recipe as one model (the
mean or the median of their forecasts, the mean of a classifier's probabilities),
written and evaluated as a run (`rnnkit.training.ensemble`)."""

from __future__ import annotations

from pathlib import Path

import click

from rnnkit import registry
from rnnkit.cli._common import load_frameworks, print_metrics, user_errors


@click.command()
@click.argument(
    "run_dirs",
    nargs=-1,
    required=True,
    type=click.Path(file_okay=False, exists=True, path_type=Path),
)
@click.option(
    "--run-dir",
    "output",
    type=click.Path(file_okay=False, path_type=Path),
    help="Where to write the ensemble's run (default: runs/RECIPE/<timestamp>).",
)
@click.option(
    "--combine",
    type=click.Choice(["mean", "median"]),
    default="mean",
    show_default=True,
    help="How the members' outputs are combined, each value on its own; choose on "
    "the validation split (rnnkit evaluate --split validation).",
)
def ensemble(run_dirs: tuple[Path, ...], output: Path | None, combine: str) -> None:
    """Combine the trained runs RUN_DIR... of one recipe into one model.

    Forecasting runs: the ensemble forecasts the mean (or the median) of the members'
    quantiles (members may differ in model and input length; they must share the data,
    the horizon and the quantiles). Sentiment runs: the mean of the members' class
    probabilities (members may differ in model; they must share the data, train.seed,
    which cuts the validation split, and the text settings). Nothing is retrained.
    The result is a run directory like any other, evaluated on the members' test
    split: rnnkit evaluate, predict and export take it.
    """
    load_frameworks()
    from rnnkit.training import ensemble as ensemble_lib

    with user_errors():
        run_dir, metrics = ensemble_lib.combine(
            list(run_dirs), registry.load, output, how=combine
        )
    click.echo(f"ensemble of {len(run_dirs)} runs written to {run_dir}")
    print_metrics(metrics)
