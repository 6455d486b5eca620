"""What every command shares: one-line errors, the quiet framework import, the
metrics table. Light: imports neither Keras nor TensorFlow.

Errors end in one line, never in a bare traceback:

- bad input (`RnnkitError`, an unreadable file) is `Error: ...` with what to change,
  through `user_errors` around a command's body;
- anything else is a bug or a case rnnkit does not handle yet: `unexpected_error`
  (called once, by the `rnnkit` group for every command) prints what failed and
  where, and writes the full traceback to a file that the line names: the run
  directory of the run that failed when there is one (`traceback.log`), else
  `logs/` of rnnkit's cache folder (`log_dir`). `rnnkit --verbose` also prints the
  traceback. `KeyboardInterrupt` is left to click ("Aborted!").
"""

from __future__ import annotations

import contextlib
import datetime
import os
import traceback
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click

from rnnkit._native_logs import import_frameworks_quietly
from rnnkit._optional import missing_dependency
from rnnkit.errors import RnnkitError, run_dir_of
from rnnkit.files import write_text

# ctx.meta key (meta is shared by a command's context and its parents'): the context
# of the innermost command that entered `user_errors`, for what failed and its run.
COMMAND_KEY = "rnnkit.command"
TRACEBACK_FILE = "traceback.log"


@contextlib.contextmanager
def user_errors() -> Iterator[None]:
    """Turns bad-input errors into click's one-line `Error: ...` (exit status 1)."""
    context = click.get_current_context(silent=True)
    if context is not None:
        context.meta[COMMAND_KEY] = context
    try:
        yield
    except RnnkitError as error:
        raise click.ClickException(str(error)) from None
    except ModuleNotFoundError as error:  # an optional package: which extra brings it
        missing = missing_dependency(error)
        if missing is None:
            raise
        raise click.ClickException(str(missing)) from None
    except OSError as error:  # unreadable file, disk full, ...
        raise click.ClickException(
            f"{error.strerror or error}: {error.filename}"
        ) from None


def log_dir() -> Path:
    """Where a command without a run directory writes the traceback of an unexpected
    error: `logs/` in `$RNNKIT_CACHE_DIR`, else in `$XDG_CACHE_HOME/rnnkit`, else in
    `~/.cache/rnnkit` (the cache folder of the layers' speed calibration)."""
    folder = os.environ.get("RNNKIT_CACHE_DIR")
    if not folder:
        base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
        folder = Path(base) / "rnnkit"
    return Path(folder) / "logs"


def _run_in_progress(command: click.Context | None) -> Path | None:
    """The run directory that the failed command was writing: `--resume` or
    `--run-dir` when it exists and holds no finished run (`run.json`). A finished
    run that `evaluate` or `predict` read is left as it is."""
    if command is None:
        return None
    for name in ("resume", "run_dir"):
        folder = command.params.get(name)
        if (
            folder
            and Path(folder).is_dir()
            and not (Path(folder) / "run.json").exists()
        ):
            return Path(folder)
    return None


def _first_line(error: BaseException) -> str:
    lines = str(error).strip().splitlines()
    return f"{type(error).__name__}: {lines[0]}" if lines else type(error).__name__


def unexpected_error(error: Exception, root: click.Context) -> click.ClickException:
    """The one line for an exception that no command turned into an error message;
    writes the traceback (see the module docstring) and, with `--verbose`, prints it.
    """
    command = root.meta.get(COMMAND_KEY)
    # The words after the program's name, which is "main" under click's test runner.
    words = (
        command.command_path.split()[1:]
        if command is not None
        else [root.invoked_subcommand or ""]
    )
    what = " ".join(["rnnkit", *words]).strip()
    frames = traceback.extract_tb(error.__traceback__)
    # The innermost frame as folder/file:line ("training/runner.py:278").
    where = (
        f" at {'/'.join(Path(frames[-1].filename).parts[-2:])}:{frames[-1].lineno}"
        if frames
        else ""
    )
    text = "".join(traceback.format_exception(error))
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    run_dir = run_dir_of(error) or _run_in_progress(command)
    path = (
        run_dir / TRACEBACK_FILE
        if run_dir is not None
        else log_dir() / f"rnnkit-{stamp}-{os.getpid()}.log"
    )
    verbose = bool(root.params.get("verbose"))
    try:
        write_text(path, f"{what} ({stamp})\n{text}")
        saved = f"the full traceback is in {path}"
    except OSError as write_error:
        saved = f"the traceback could not be written to {path} ({write_error})"
        verbose = True  # nowhere else to find it
    if verbose:
        click.echo(text, err=True, nl=False)
        shown = "; it is printed above"
    else:
        shown = "; `rnnkit --verbose ...` prints it"
    return click.ClickException(
        f"{what} failed{where}: {_first_line(error)} (unexpected: a bug or a case "
        f"rnnkit does not handle yet); {saved}{shown}"
    )


def load_frameworks() -> None:
    """Imports TensorFlow and Keras, without their native start-up lines unless
    `rnnkit --verbose` was given (see rnnkit/_native_logs.py)."""
    context = click.get_current_context(silent=True)
    if context is None or not context.meta.get("rnnkit.verbose", False):
        import_frameworks_quietly()


def print_metrics(metrics: dict[str, Any]) -> None:
    """The test metrics (and backtest folds) of a run as tables, or the validation
    metrics of `rnnkit evaluate --split validation`."""
    from rnnkit.metrics import format_table

    for split in ("validation", "test"):
        if split in metrics:
            click.echo(
                f"\n{split.capitalize()} metrics (model vs baselines, on the same "
                f"{split} split):"
            )
            click.echo(format_table(metrics[split]))
    if "backtest" in metrics:
        folds = metrics["backtest"]["folds"]
        for index, table in enumerate(folds, start=1):
            click.echo(f"\nBacktest fold {index}/{len(folds)}:")
            click.echo(format_table(table))
        click.echo(f"\nBacktest mean over {len(folds)} folds:")
        click.echo(format_table(metrics["backtest"]["mean"]))
