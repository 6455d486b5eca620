"""`rnnkit diagnose [RUN_DIR]`: gradient-flow diagnostics (`rnnkit.diagnostics`) of a
language-model run, of fresh cells on a text, or (`--task adding,copy`) of fresh cells
trained on the long-range memory tasks."""

from __future__ import annotations

import datetime
from pathlib import Path
from typing import Any

import click

from rnnkit import registry
from rnnkit.cli._common import load_frameworks, user_errors
from rnnkit.errors import RnnkitError


@click.command()
@click.option(
    "--task",
    default="text",
    show_default=True,
    help="text: next-token gradients on a text (or RUN_DIR); adding, copy, "
    "selective_copy, mqar or a comma-separated list of them: the memory tasks "
    "(rnnkit.diagnostics.memory_tasks).",
)
@click.option(
    "--lengths",
    help="Memory tasks: comma-separated T (sequence length of adding, delay of "
    "copy, data steps of selective_copy, key-value pairs of mqar); default adding "
    "10,25,50,100,200, copy 5,10,20, selective_copy 16,32,64, mqar 4,8,16 "
    "(--quick: 20, 5, 12 and 4).",
)
@click.option(
    "--cells",
    "cell_list",
    help="Memory tasks: comma-separated recurrent layers, or transformer (a small "
    "causal Transformer) (default: simple_rnn,lstm,gru).",
)
@click.option(
    "--clip",
    type=click.Choice(["both", "on", "off"]),
    default="both",
    show_default=True,
    help="Memory tasks: train with global-norm clipping (--clipnorm), without, or "
    "both, side by side.",
)
@click.option(
    "--quick",
    is_flag=True,
    help="Memory tasks: small models and budget (seconds; tests, notebooks).",
)
@click.option(
    "--all-lengths",
    is_flag=True,
    help="Memory tasks: train every length, also after a cell failed a shorter one.",
)
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
    help="Without RUN_DIR: recurrent units (default: 128; memory tasks: adding 64, "
    "copy, selective_copy and mqar 128, --quick 32).",
)
@click.option(
    "--steps",
    type=click.IntRange(min=0),
    help="Training steps (Adam) between the fresh and trained pictures (default: "
    "300); memory tasks: the budget of each model (default: adding 2000, copy "
    "selective_copy and mqar 3000; --quick 400).",
)
@click.option(
    "--layers",
    type=click.IntRange(min=1),
    help="Memory tasks: recurrent layers stacked (default: 1), or the Transformer's "
    "blocks (default: 2).",
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
    help="Global clip norm while training (0: none); with --task, the norm of the "
    "clipped arm (--clip off trains without).",
)
@click.option(
    "--learning-rate",
    type=click.FloatRange(min=0, min_open=True),
    help="Adam's step size (default: 0.002; memory tasks 0.01).",
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

    With --task adding,copy,selective_copy,mqar: trains fresh cells on the adding
    problem, the copy-memory task, selective copying and associative recall at each
    of --lengths, with and without clipping (--clip), and writes the test error
    against each task's baseline, the steps to solve, and ||dL/dh_t|| and
    sigma_max(W_hh) of the trained models (minutes; --quick: seconds;
    docs/guides/diagnostics.md has the measured time).
    """
    if options["task"] != "text":
        _memory_tasks(run_dir, cells, assignments, options)
        return
    memory_only = ("lengths", "cell_list", "quick", "all_lengths", "layers")
    given = [name for name in memory_only if options[name]]
    if given or options["clip"] != "both":
        flag = "--" + (given[0] if given else "clip").replace("_list", "s")
        raise click.UsageError(
            f"{flag.replace('_', '-')} is for the memory tasks: add --task adding,copy"
        )
    for name, default in TEXT_DEFAULTS.items():
        if options[name] is None:
            options[name] = default
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


TEXT_DEFAULTS = {"units": 128, "steps": 300, "learning_rate": 0.002}


def _memory_tasks(
    run_dir: Path | None,
    cells: tuple[str, ...],
    assignments: tuple[str, ...],
    options: dict[str, Any],
) -> None:
    """`--task adding,copy`: `rnnkit.diagnostics.memory_report.memory_sweep`."""
    import dataclasses

    load_frameworks()
    from rnnkit.diagnostics import memory_report, memory_tasks

    with user_errors():
        if run_dir is not None or assignments or options["data_path"]:
            raise RnnkitError(
                "--task adding/copy trains fresh cells on generated data; leave out "
                "RUN_DIR, --set and --data"
            )
        if not options["clipnorm"]:
            raise RnnkitError(
                "--clipnorm 0 with --task: the clipped arm needs a norm above 0; "
                "train without clipping with --clip off"
            )
        tasks = memory_tasks.parse_list(options["task"], "--task", memory_tasks.TASKS)
        known = [*registry.recurrent_names(), memory_tasks.TRANSFORMER]
        names = (
            memory_tasks.parse_list(options["cell_list"], "--cells", known)
            if options["cell_list"]
            else list(cells or memory_tasks.CELLS)
        )
        preset = memory_tasks.QUICK if options["quick"] else memory_tasks.DEFAULT
        lengths = (
            memory_tasks.parse_lengths(options["lengths"])
            if options["lengths"]
            else memory_tasks.QUICK_LENGTHS
            if options["quick"]
            else memory_tasks.DEFAULT_LENGTHS
        )
        chosen = {
            "units": options["units"],
            "layers": options["layers"],
            "steps": options["steps"],
            "learning_rate": options["learning_rate"],
        }
        settings = {
            task: dataclasses.replace(
                preset[task],
                seed=options["seed"],
                clipnorm=options["clipnorm"],
                **{key: value for key, value in chosen.items() if value is not None},
            )
            for task in tasks
        }
        stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
        output = options["output"] or Path("runs") / "diagnose" / f"memory-{stamp}"
        memory_report.check_writable(output)
        clips = {"both": (True, False), "on": (True,), "off": (False,)}
        written = memory_report.memory_sweep(
            tasks,
            names,
            lengths,
            output,
            settings,
            clips=clips[options["clip"]],
            all_lengths=options["all_lengths"],
            log=click.echo,
        )
    for path in written.values():
        click.echo(str(path))
