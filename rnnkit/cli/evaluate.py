"""`rnnkit evaluate RUN_DIR`: the saved model of a run on the test split again."""

from __future__ import annotations

from pathlib import Path

import click

from rnnkit import config as config_lib
from rnnkit import registry
from rnnkit.cli._common import load_frameworks, print_metrics, user_errors
from rnnkit.errors import ConfigError


@click.command()
@click.argument(
    "run_dir", type=click.Path(file_okay=False, exists=True, path_type=Path)
)
@click.option("--data", "data_path", help="Evaluate on this data instead (data.path).")
@click.option("--set", "assignments", multiple=True, metavar="KEY=VALUE")
@click.option(
    "--output",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Also write the metrics to this JSON file.",
)
def evaluate(
    run_dir: Path,
    data_path: str | None,
    assignments: tuple[str, ...],
    output: Path | None,
) -> None:
    """Evaluate the saved model of RUN_DIR on the test split (no retraining).

    The model runs on the device at hand: the run's train.device and train.strategy
    say where it trained, not where it is evaluated.
    """
    load_frameworks()
    import keras

    from rnnkit.training import runner

    with user_errors():
        recipe, config, model = runner.load_run(run_dir, registry.load)
        overrides = config_lib.parse_assignments(recipe.Config, list(assignments))
        if data_path is not None:
            overrides["data.path"] = data_path
        check_same_split(config, overrides)
        config = config.with_values(overrides)
        keras.utils.set_random_seed(config.train.seed)
        metrics = {"test": recipe.evaluate(model, recipe.load_data(config), config)}
        if output is not None:
            runner.write_json(output, metrics)
    print_metrics(metrics)


# The keys that say where a recipe cuts one source into train, validation and test.
SPLIT_KEYS = ("data.split_seed", "data.validation_fraction", "data.test_fraction")


def check_same_split(config: config_lib.RecipeConfig, overrides: dict) -> None:
    """Refuses overrides that would cut the run's own data another way: the test
    split would then hold text or images the model trained on."""
    if "data.path" in overrides and overrides["data.path"] != config.get("data.path"):
        return  # other data: its split is its own
    for key in SPLIT_KEYS:
        if key in overrides and overrides[key] != config.get(key):
            raise ConfigError(
                f"--set {key}={overrides[key]}: the run's data would be split "
                f"another way (it trained with {key}={config.get(key)}), so the "
                "test split would hold data the model trained on; evaluate on the "
                f"run's split (drop --set {key}) or on other data (--data PATH)"
            )
