"""The recipes' smoke runs as the docs give them, each run once per test session.

`rnnkit run NAME --config recipes/NAME/configs/smoke.toml --run-dir runs/NAME/smoke`
stands in README.md and in several docs pages, and the recipe tests need the same
trained run. `smoke_run(tmp_path_factory, NAME)` runs that command once in the session
(tests/shared_once.py: the first worker that asks runs it, the others wait and read)
in a scratch checkout like the docs tests' (`recipes/` and `../shared` beside it,
tests/markdown_examples.py), through the launcher in-process, and keeps its exit code,
its output and its rnnkit log messages beside the run directory. What it wrote is
read-only for the tests that share it: a page that goes on with the run (`rnnkit
predict runs/NAME/smoke ...`) copies it into its own scratch folder first.
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.shared_once import made_once

COMMAND = (
    "rnnkit run {name} --config recipes/{name}/configs/smoke.toml "
    "--run-dir runs/{name}/smoke"
)
PATTERN = re.compile(
    r"rnnkit run (\w+) --config recipes/\1/configs/smoke\.toml --run-dir runs/\1/smoke"
)
RESULT_FILE = "result.json"


@dataclass(frozen=True)
class SmokeRun:
    run_dir: Path  # runs/NAME/smoke in the scratch checkout the command ran in
    exit_code: int
    output: str
    messages: list[str]


def recipe_of(command: str) -> str | None:
    """NAME when `command` is the smoke command of recipe NAME, word for word."""
    match = PATTERN.fullmatch(" ".join(command.split()))
    return match.group(1) if match else None


def _run(folder: Path, name: str) -> None:
    from click.testing import CliRunner

    from rnnkit.cli import main
    from tests.cli_support import Messages
    from tests.markdown_examples import make_workdir

    workdir = make_workdir(folder)
    words = shlex.split(COMMAND.format(name=name))
    with pytest.MonkeyPatch.context() as patch, Messages() as messages:
        patch.chdir(workdir)
        # Caches (captioning features) go to the scratch folder, as in the docs tests.
        patch.setenv("RNNKIT_DATA_DIR", str(workdir / "rnnkit-data"))
        result = CliRunner().invoke(main, words[1:], catch_exceptions=False)
    record = {
        "exit_code": result.exit_code,
        "output": result.output,
        "messages": messages,
    }
    (folder / RESULT_FILE).write_text(json.dumps(record), encoding="utf-8")


def smoke_run(tmp_path_factory, name: str) -> SmokeRun:
    """Recipe `name`'s smoke command, run once in the session (see the module)."""
    folder = made_once(tmp_path_factory, f"smoke-run-{name}", lambda f: _run(f, name))
    record = json.loads((folder / RESULT_FILE).read_text(encoding="utf-8"))
    return SmokeRun(
        run_dir=folder / "rnnkit" / "runs" / name / "smoke",
        exit_code=record["exit_code"],
        output=record["output"],
        messages=record["messages"],
    )
