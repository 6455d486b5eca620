"""Running the `rnnkit` launcher in-process, as the launcher's, recipe and export
tests do."""

from __future__ import annotations

import logging

from click.testing import CliRunner

from rnnkit.cli import main


def invoke(*args: str):
    """`rnnkit ARGS` through click's runner. An rnnkit error is the command's exit
    code and "Error: ..." line, as a user sees it; any other exception is raised,
    so that a failing test shows where it came from."""
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def error_line(result) -> str:
    """The one "Error: ..." line of a failed command."""
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output
    errors = [line for line in result.output.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1, result.output
    return errors[0]


class Messages:
    """Collects the rnnkit log messages while it is active."""

    def __enter__(self):
        self.messages = []
        self.handler = logging.Handler()
        self.handler.emit = lambda record: self.messages.append(record.getMessage())
        self.logger = logging.getLogger("rnnkit")
        self.level = self.logger.level
        self.logger.setLevel(logging.INFO)
        self.logger.addHandler(self.handler)
        return self.messages

    def __exit__(self, *_):
        self.logger.removeHandler(self.handler)
        self.logger.setLevel(self.level)
