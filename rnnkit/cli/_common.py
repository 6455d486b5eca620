"""What every command shares: one-line errors, the quiet framework import, the
metrics table. Light: imports neither Keras nor TensorFlow."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import click

from rnnkit._native_logs import import_frameworks_quietly
from rnnkit.errors import RnnkitError


@contextlib.contextmanager
def user_errors() -> Iterator[None]:
    """Turns bad-input errors into click's one-line `Error: ...` (exit status 1)."""
    try:
        yield
    except RnnkitError as error:
        raise click.ClickException(str(error)) from None
    except OSError as error:  # unreadable file, disk full, ...
        raise click.ClickException(
            f"{error.strerror or error}: {error.filename}"
        ) from None


def load_frameworks() -> None:
    """Imports TensorFlow and Keras, without their native start-up lines unless
    `rnnkit --verbose` was given (see rnnkit/_native_logs.py)."""
    context = click.get_current_context(silent=True)
    if context is None or not context.meta.get("rnnkit.verbose", False):
        import_frameworks_quietly()


def print_metrics(metrics: dict[str, Any]) -> None:
    """The test metrics (and backtest folds) of a run as tables."""
    from rnnkit.metrics import format_table

    click.echo("\nTest metrics (model vs baselines, on the same test split):")
    click.echo(format_table(metrics["test"]))
    if "backtest" in metrics:
        folds = metrics["backtest"]["folds"]
        for index, table in enumerate(folds, start=1):
            click.echo(f"\nBacktest fold {index}/{len(folds)}:")
            click.echo(format_table(table))
        click.echo(f"\nBacktest mean over {len(folds)} folds:")
        click.echo(format_table(metrics["backtest"]["mean"]))
