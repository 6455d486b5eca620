"""`rnnkit evaluate RUN_DIR`: the saved model of a run on the test split again (or
on the validation split, where the recipe defines it)."""

from __future__ import annotations

from pathlib import Path

import click

from rnnkit import config as config_lib
from rnnkit import registry
from rnnkit.cli._common import load_frameworks, print_metrics, user_errors
from rnnkit.recipe import Recipe


@click.command()
@click.argument(
    "run_dir", type=click.Path(file_okay=False, exists=True, path_type=Path)
)
@click.option("--data", "data_path", help="Evaluate on this data instead (data.path).")
@click.option(
    "--split",
    type=click.Choice(["test", "validation"]),
    default="test",
    show_default=True,
    help="The split to score; validation compares runs or ensembles without "
    "looking at the test split (recipes that define it: forecasting).",
)
@click.option("--set", "assignments", multiple=True, metavar="KEY=VALUE")
@click.option(
    "--output",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Also write the metrics to this JSON file.",
)
def evaluate(
    run_dir: Path,
    data_path: str | None,
    split: str,
    assignments: tuple[str, ...],
    output: Path | None,
) -> None:
    """Evaluate the saved model of RUN_DIR on the test split (no retraining).

    --split validation scores the validation split instead, where the recipe
    defines it, to choose among runs without looking at the test split.

    The model runs on the device at hand: the run's train.device and train.strategy
    say where it trained, not where it is evaluated.
    """
    load_frameworks()
    import keras

    from rnnkit.training import runner
    from rnnkit.training.run_dir import CONFIG_FILE

    with user_errors():
        recipe, config, model = runner.load_run(run_dir, registry.load)
        overrides = config_lib.parse_assignments(recipe.Config, list(assignments))
        if data_path is not None:
            overrides["data.path"] = data_path
        recipe.check_same_split(
            config, overrides, config_lib.toml_keys(run_dir / CONFIG_FILE)
        )
        config = config.with_values(overrides)
        keras.utils.set_random_seed(config.train.seed)
        if (
            split == "validation"
            and type(recipe).evaluate_validation is Recipe.evaluate_validation
        ):  # the base hook's one-line refusal, before the data is loaded for it
            recipe.evaluate_validation(model, None, config)
        score = recipe.evaluate if split == "test" else recipe.evaluate_validation
        metrics = {split: score(model, recipe.load_data(config), config)}
        if output is not None:
            runner.write_json(output, metrics)
    print_metrics(metrics)
