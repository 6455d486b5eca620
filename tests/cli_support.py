"""Running the `rnnkit` launcher in-process, as the recipe tests do."""

from __future__ import annotations

from click.testing import CliRunner

from rnnkit.cli import main


def invoke(*args: str):
    return CliRunner().invoke(main, list(args))


def error_line(result) -> str:
    """The one "Error: ..." line of a failed command."""
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output
    errors = [line for line in result.output.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1, result.output
    return errors[0]
