"""The example plugin recipe installs as its own package and runs through `rnnkit`.

Runs the commands of docs/guides/own-recipe.md as written: `pip install` (here without
dependencies or build isolation, into a scratch folder put on the path, so nothing
is downloaded and the environment is left as it was), then `rnnkit list`, `run` and
`predict` in new processes (forked from one with TensorFlow imported,
tests/preloaded.py) that find the recipe through its entry point only.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys

from tests import preloaded
from tests.markdown_examples import ROOT, blocks, shell_commands

GUIDE = ROOT / "docs" / "guides" / "own-recipe.md"
EXAMPLE = ROOT / "examples" / "rnnkit-recipe-example"


def run(words: list[str], cwd, env) -> str:
    result = subprocess.run(
        words, cwd=cwd, env=env, capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0, f"{shlex.join(words)}\n{result.stderr[-3000:]}"
    return result.stdout


def test_example_recipe_installs_lists_runs_and_predicts(tmp_path):
    (block,) = blocks(GUIDE.read_text(encoding="utf-8"), "bash")
    commands = [shlex.split(command) for command in shell_commands(block)]
    shutil.copytree(
        EXAMPLE,
        tmp_path / "examples" / EXAMPLE.name,
        ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"),
    )
    site = tmp_path / "site-packages"
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "MPLBACKEND": "Agg"}
    outputs = {}
    for words in commands:
        command = words[1]  # install, list, run, predict
        if words[:2] == ["pip", "install"]:
            words = [
                sys.executable, "-m", "pip", "install", "--quiet", "--no-deps",
                "--no-build-isolation", "--no-index", "--target", str(site), *words[2:],
            ]  # fmt: skip
            outputs[command] = run(words, tmp_path, env)
        else:
            # The launcher in a new process forked from one with TensorFlow imported
            # (tests/preloaded.py), the folder on its path where PYTHONPATH puts it
            # (after the working folder): the recipe is found by its entry point.
            assert words[0] == "rnnkit", words
            launcher = (
                f"import sys; sys.path.insert(1, {str(site)!r}); "
                "from rnnkit.cli import main; main()"
            )
            result = preloaded.run(["-c", launcher, *words[1:]], cwd=tmp_path, env=env)
            assert result.returncode == 0, f"{command}\n{result.stderr[-3000:]}"
            outputs[command] = result.stdout

    assert (site / "rnnkit_recipe_example" / "recipe.py").is_file()
    assert "airline" in outputs["list"]
    assert "example plugin recipe" in outputs["list"]
    run_dir = tmp_path / "runs" / "airline" / "smoke"
    for name in ("run.json", "model.keras", "config.toml", "history.csv"):
        assert (run_dir / name).is_file(), name
    metrics = json.loads((run_dir / "metrics.json").read_text(encoding="utf-8"))
    test = metrics["test"]
    assert test["model"]["mae"] < test["training_mean"]["mae"], test
    assert "next month:" in outputs["predict"]
