"""`rnnkit predict RUN_DIR INPUTS...`: the saved model of a run on new inputs."""

from __future__ import annotations

from pathlib import Path

import click

from rnnkit import config as config_lib
from rnnkit import registry
from rnnkit.cli._common import load_frameworks, user_errors
from rnnkit.errors import RnnkitError
from rnnkit.recipe import Recipe


@click.command(context_settings={"ignore_unknown_options": True})
@click.argument(
    "run_dir", type=click.Path(file_okay=False, exists=True, path_type=Path)
)
@click.argument("inputs", nargs=-1, type=click.UNPROCESSED)
def predict(run_dir: Path, inputs: tuple[str, ...]) -> None:
    """Predict with the saved model of RUN_DIR from INPUTS (files, texts, ...).

    A recipe may accept options among the INPUTS that set config values for the
    prediction (its `predict_options`), e.g. the translation recipe's
    `--beam N --n-best K`.
    """
    load_frameworks()
    from rnnkit.training import runner

    with user_errors():
        recipe, config, model = runner.load_run(run_dir, registry.load)
        texts, overrides = split_predict_options(recipe, list(inputs))
        lines = recipe.predict(model, texts, config.with_values(overrides))
    for line in lines:
        click.echo(line)


def split_predict_options(recipe: Recipe, args: list[str]) -> tuple[list[str], dict]:
    """Splits `rnnkit predict` arguments into inputs and the recipe's option values."""
    infos = {info.key: info for info in config_lib.fields_of(recipe.Config)}
    declared = ", ".join(f"--{name}" for name in recipe.predict_options) or "none"
    inputs, values = [], {}
    remaining = iter(args)
    for arg in remaining:
        if arg == "--":  # everything after it is input, even text that starts "--"
            inputs.extend(remaining)
            break
        if not arg.startswith("--"):
            inputs.append(arg)
            continue
        name, has_value, text = arg[2:].partition("=")
        if name not in recipe.predict_options:
            raise RnnkitError(
                f"no such option: --{name} (options of recipe {recipe.name!r} for "
                f"predict: {declared})"
            )
        if not has_value:
            text = next(remaining, None)
            if text is None:
                raise RnnkitError(f"option --{name} needs a value")
        key = recipe.predict_options[name]
        values[key] = config_lib.parse_text(infos[key], text)
    return inputs, values
