"""The `rnnkit` group (rnnkit/cli/__init__.py): commands found lazily, no heavy
imports before a command needs them, no recipe named in the launcher."""

from __future__ import annotations

import ast
import logging
import subprocess
import sys
from pathlib import Path

import click
import pytest

from rnnkit import registry
from rnnkit.cli import COMMANDS, main
from tests.cli_support import invoke

CLI_SOURCES = sorted((Path(__file__).parents[2] / "rnnkit" / "cli").glob("*.py"))


@pytest.mark.parametrize(
    "args", [["--help"], ["list"], ["run", "stock", "--help"]], ids=" ".join
)
def test_light_commands_import_neither_tensorflow_nor_keras(args):
    code = (
        "import sys; from rnnkit.cli import main\n"
        "try:\n    main(sys.argv[1:])\nexcept SystemExit:\n    pass\n"
        "heavy = [m for m in ('tensorflow', 'keras', 'jax') if m in sys.modules]\n"
        "print('HEAVY', heavy)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code, *args],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert "HEAVY []" in result.stdout


def test_every_command_is_listed_and_found_by_its_name():
    listed = [
        line.split()[0]
        for line in invoke("--help").output.split("Commands:")[1].splitlines()
        if line.strip()
    ]
    assert listed == sorted(COMMANDS)
    for name in COMMANDS:
        command = main.get_command(None, name)
        assert isinstance(command, click.Command) and command.name == name
    assert main.get_command(None, "nope") is None


def test_the_launcher_loads_no_recipe_by_name():
    names = set(registry.available())
    named = [
        f"{path.name}:{node.lineno} {node.value!r}"
        for path in CLI_SOURCES
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.Constant) and node.value in names
    ]
    assert not named, named


def test_every_command_shows_progress_notes_whatever_level_a_caller_left():
    """A caller in the same process that put rnnkit's logger back to NOTSET after a
    first command (tests/cli_support.Messages does) must not silence the next one's
    INFO notes: the launcher sets the level on every command, not only when it adds
    its handler."""
    logger = logging.getLogger("rnnkit")
    saved = logger.level
    try:
        for attempt in ("first command", "with the handler already added"):
            logger.setLevel(logging.NOTSET)  # effective level: the root's WARNING
            result = invoke("list")
            assert result.exit_code == 0, result.output
            assert logger.getEffectiveLevel() == logging.INFO, attempt
    finally:
        logger.setLevel(saved)
