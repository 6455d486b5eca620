"""`rnnkit diagnose [RUN_DIR]`: gradient-flow diagnostics (`rnnkit.diagnostics`) of a
language-model run, or of fresh cells on a text."""

from __future__ import annotations

import datetime
from pathlib import Path
from typing import Any

import click

from rnnkit import registry
from rnnkit.cli._common import load_frameworks, user_errors
from rnnkit.errors import RnnkitError


@click.command()
@click.argument(
    "run_dir",
    required=False,
    type=click.Path(file_okay=False, exists=True, path_type=Path),
)
@click.option(
    "--cell",
    "cells",
    multiple=True,
    type=click.Choice(registry.recurrent_names()),
    help="Without RUN_DIR: a cell to compare (repeatable; default: all three).",
)
@click.option(
    "--data",
    "data_path",
    help="Without RUN_DIR: text to use (data.path of the "
    "language_model recipe; default: The Time Machine).",
)
@click.option(
    "--level",
    type=click.Choice(["char", "word"]),
    default="char",
    show_default=True,
    help="Without RUN_DIR: tokens.",
)
@click.option(
    "--units",
    type=click.IntRange(min=1),
    default=128,
    show_default=True,
    help="Without RUN_DIR: recurrent units.",
)
@click.option(
    "--steps",
    type=click.IntRange(min=0),
    default=300,
    show_default=True,
    help="Training steps (Adam) between the fresh and trained pictures.",
)
@click.option(
    "--window",
    type=click.IntRange(min=2),
    default=100,
    show_default=True,
    help="T: steps back from the loss at which gradients are measured.",
)
@click.option(
    "--clipnorm",
    type=click.FloatRange(min=0),
    default=1.0,
    show_default=True,
    help="Global clip norm while training (0: none).",
)
@click.option(
    "--learning-rate",
    type=click.FloatRange(min=0, min_open=True),
    default=0.002,
    show_default=True,
    help="Adam's step size.",
)
@click.option("--seed", type=click.IntRange(min=0), default=0, show_default=True)
@click.option(
    "--set",
    "assignments",
    multiple=True,
    metavar="KEY=VALUE",
    help="Set a config value of the run (or, without RUN_DIR, of the "
    "language_model recipe that reads the text), e.g. --set data.limit=50000 "
    "(repeatable).",
)
@click.option(
    "--output",
    type=click.Path(file_okay=False, path_type=Path),
    help="Where to write (default: RUN_DIR/diagnostics, or runs/diagnose/<time>).",
)
def diagnose(
    run_dir: Path | None,
    cells: tuple[str, ...],
    assignments: tuple[str, ...],
    **options: Any,
) -> None:
    """Gradient-flow diagnostics of a language model (RUN_DIR) or of fresh cells.

    Measures ||dL_T/dh_t|| against T - t on windows of real text, for freshly
    initialised and trained models (SimpleRNN, LSTM, GRU with --cell), with the
    sigma_max(W_hh)^(T-t) bound, sigma_max during training and the global gradient
    norm before and after clipping. Writes CSV and PNG files. Runs on the device at
    hand, whatever device and strategy the run trained with.
    """
    load_frameworks()
    import keras

    from rnnkit import config as config_lib
    from rnnkit import diagnostics
    from rnnkit.training import runner

    seed = options["seed"]
    with user_errors():
        if run_dir is not None and (cells or options["data_path"]):
            raise RnnkitError(
                "--cell and --data compare fresh cells; leave out RUN_DIR"
            )
        if run_dir is not None:
            recipe, config, model = runner.load_run(run_dir, registry.load)
            diagnostics.check_run(model, recipe.name, run_dir)
        else:
            recipe, config = diagnostics.text_recipe(
                registry.load, options["data_path"], options["level"], seed
            )
        config = config.with_values(
            config_lib.parse_assignments(recipe.Config, list(assignments))
        )
        keras.utils.set_random_seed(config.train.seed)
        data = recipe.load_data(config)
        if run_dir is not None:
            data = data.with_vocabulary(model.tokens)
            fresh, trained = diagnostics.fresh_and_trained(model)
            output = options["output"] or (run_dir / "diagnostics")
        else:
            fresh = diagnostics.fresh_language_models(
                data.tokens, cells or diagnostics.FRESH_CELLS, options["units"], seed
            )
            trained = {}
            stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
            output = options["output"] or Path("runs") / "diagnose" / stamp
        written = diagnostics.diagnose(
            fresh,
            data.train_ids,
            data.test_ids,
            output,
            trained=trained,
            window=options["window"],
            steps=options["steps"],
            learning_rate=options["learning_rate"],
            clipnorm=options["clipnorm"],
            seed=seed,
        )
    for path in written.values():
        click.echo(str(path))
