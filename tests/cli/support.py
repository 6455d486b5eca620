"""Running the `rnnkit` launcher in-process for the command tests."""

from __future__ import annotations

from click.testing import CliRunner

from rnnkit.cli import main


def invoke(*args: str):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)
