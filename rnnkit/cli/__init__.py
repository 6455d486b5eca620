"""The `rnnkit` launcher: list, run, evaluate, predict, tune, diagnose, calibrate,
export, serve, info.

One module per command (`rnnkit/cli/run.py`, ...), each a thin layer of options over
library code; `_options.py` turns a recipe's config fields into options. The package
stays light: a command's module is imported when the command is named (or listed by
`--help`), recipes are found through entry points and loaded only when named, and
TensorFlow is imported inside the commands that train or load a model, so
`rnnkit --help` and `rnnkit list` start fast.

Every recipe's config fields become options of `rnnkit run NAME` and `rnnkit tune NAME`
(`--model.units 64`), beside `--config FILE` and `--set key=value`; precedence is
defaults < config file < command line. Bad input ends with a one-line `Error: ...` and
a non-zero exit status, never a traceback; so does an unexpected exception in any
command, whose line says where its traceback was written (`rnnkit.cli._common`).
"""

from __future__ import annotations

import errno
import importlib
import logging
from typing import Any

import click

from rnnkit import __version__
from rnnkit._native_logs import quiet_native_logs
from rnnkit._optional import missing_dependency
from rnnkit.cli._common import unexpected_error

# Command name -> "module:attribute", imported when the command is named.
COMMANDS = {
    "calibrate": "rnnkit.cli.calibrate:calibrate",
    "diagnose": "rnnkit.cli.diagnose:diagnose",
    "ensemble": "rnnkit.cli.ensemble:ensemble",
    "evaluate": "rnnkit.cli.evaluate:evaluate",
    "export": "rnnkit.cli.export:export",
    "info": "rnnkit.cli.info:info",
    "list": "rnnkit.cli.list:list_recipes",
    "predict": "rnnkit.cli.predict:predict",
    "run": "rnnkit.cli.run:run",
    "serve": "rnnkit.cli.serve:serve",
    "tune": "rnnkit.cli.tune:tune",
}


class LazyGroup(click.Group):
    """A group whose commands live in modules imported on first use (click's
    "lazily loading subcommands" pattern)."""

    def __init__(self, *args: Any, lazy_commands: dict[str, str], **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.lazy_commands = lazy_commands

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *self.lazy_commands})

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name in self.commands or name not in self.lazy_commands:
            return super().get_command(ctx, name)
        module, _, attribute = self.lazy_commands[name].partition(":")
        command = getattr(importlib.import_module(module), attribute)
        self.add_command(command, name)
        return command

    def invoke(self, ctx: click.Context) -> Any:
        """Runs the command; an exception that it did not turn into a message
        becomes one line (`unexpected_error`), here once for every command."""
        try:
            return super().invoke(ctx)
        except (click.ClickException, click.exceptions.Exit, click.Abort):
            raise
        except OSError as error:
            if error.errno == errno.EPIPE:  # output piped into `head`: click's case
                raise
            raise unexpected_error(error, ctx) from None
        except Exception as error:
            missing = missing_dependency(error)  # an optional package's extra
            if missing is not None:
                raise click.ClickException(str(missing)) from None
            raise unexpected_error(error, ctx) from None


class _EchoHandler(logging.Handler):
    """Progress notes to whatever stderr is now (click's test runner swaps it)."""

    def emit(self, record: logging.LogRecord) -> None:
        click.echo(self.format(record), err=True)


@click.group(
    cls=LazyGroup,
    lazy_commands=COMMANDS,
    context_settings={"help_option_names": ["-h", "--help"]},
)
@click.version_option(__version__, prog_name="rnnkit")
@click.option(
    "--verbose",
    is_flag=True,
    help="Show TensorFlow's native start-up and runtime log lines (hidden by "
    "default), and the traceback of an unexpected error.",
)
@click.pass_context
def main(ctx: click.Context, verbose: bool) -> None:
    """Recurrent-network recipes for Keras: train, evaluate, predict and tune."""
    ctx.meta["rnnkit.verbose"] = verbose
    if not verbose:
        quiet_native_logs()
    logger = logging.getLogger("rnnkit")
    if not any(isinstance(h, _EchoHandler) for h in logger.handlers):
        logger.addHandler(_EchoHandler())
    # Every command shows rnnkit's progress notes, whatever a caller in the same
    # process (a test's log capture) left the level at after the first command.
    logger.setLevel(logging.INFO)
