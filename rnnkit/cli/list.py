"""`rnnkit list`: the installed recipes, read from entry points without importing
Keras."""

from __future__ import annotations

import click

from rnnkit import registry


@click.command("list")
def list_recipes() -> None:
    """List the installed recipes with their one-line summaries."""
    rows = registry.summaries()
    if not rows:
        click.echo("No recipes are installed.")
        return
    width = max(len(name) for name, _ in rows)
    for name, summary in rows:
        click.echo(f"{name.ljust(width)}  {summary}")
