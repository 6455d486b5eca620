"""Every Python example in README.md runs as written."""

import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"
PYTHON_BLOCKS = re.findall(r"```python\n(.*?)```", README.read_text("utf-8"), re.S)


@pytest.mark.parametrize("source", PYTHON_BLOCKS, ids=lambda s: s.splitlines()[0][:40])
def test_readme_python_example_runs(source, tmp_path):
    result = subprocess.run(
        [sys.executable, "-c", source],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "MPLBACKEND": "Agg"},
    )
    assert result.returncode == 0, result.stderr[-3000:]


# -- Shell commands -------------------------------------------------------------------
# Every ```bash block after the opening one (which CI runs verbatim, see test_ci.py)
# runs in order, in one scratch folder where `recipes/` is the repository's, as a new
# user would type it. `rnnkit` commands run in this process through click's CliRunner
# (one TensorFlow start-up instead of one per command); `python -c` in a subprocess.

ROOT = README.parent
SHELL_BLOCKS = re.findall(r"```bash\n(.*?)```", README.read_text("utf-8"), re.S)[1:]


def shell_commands(block: str) -> list[str]:
    joined = block.replace("\\\n", " ")
    return [line.strip() for line in joined.splitlines() if line.strip()]


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    """A scratch checkout: `recipes/` is the repository's and `../shared` (the real
    data the smoke configs read) lies beside it, as in CI."""
    folder = tmp_path_factory.mktemp("readme") / "rnnkit"
    folder.mkdir()
    (folder / "recipes").symlink_to(ROOT / "recipes", target_is_directory=True)
    shared = ROOT.parent / "shared"
    if shared.is_dir():
        (folder.parent / "shared").symlink_to(shared, target_is_directory=True)
    return folder


def prepare(command: str, workdir: Path) -> None:
    """Creates what a command expects the user to have (their files, a broken run)."""
    from tests.shared_data import require
    from tests.stock_support import SP500_FILE, write_sp500_slice

    if "all_stocks_5yr.csv" in command:
        require(SP500_FILE)
        write_sp500_slice(workdir / "all_stocks_5yr.csv")
    if "photo.jpg" in command and not (workdir / "photo.jpg").exists():
        from tests.recipes.test_captioning import IMAGE_ZIP, real_images

        if not IMAGE_ZIP.is_file():
            pytest.skip(f"{IMAGE_ZIP} is not available")
        with zipfile.ZipFile(IMAGE_ZIP) as archive:
            (name,) = real_images(1, "Flickr_8k.testImages.txt")
            (workdir / "photo.jpg").write_bytes(
                archive.read(f"flickr8k_images_256/{name}")
            )
    resume = re.search(r"--resume (\S+)", command)
    if resume and not (workdir / resume.group(1)).exists():
        from rnnkit_recipes.stock.recipe import StockRecipe

        from rnnkit import runner
        from tests.stock_support import smoke_config
        from tests.test_runner import InterruptAt

        with pytest.raises(KeyboardInterrupt):
            runner.run(
                StockRecipe(),
                smoke_config(),
                workdir / resume.group(1),
                verbose=0,
                callbacks=[InterruptAt(1)],
            )


@pytest.mark.parametrize(
    "block", SHELL_BLOCKS, ids=lambda block: shell_commands(block)[0][:50]
)
def test_readme_shell_commands_run(block, workdir, monkeypatch):
    import shlex

    from click.testing import CliRunner

    from rnnkit.cli import main

    monkeypatch.chdir(workdir)
    for command in shell_commands(block):
        prepare(command, workdir)
        words = shlex.split(command)
        if words[0] == "rnnkit":
            result = CliRunner().invoke(main, words[1:], catch_exceptions=False)
            assert result.exit_code == 0, f"{command}\n{result.output[-3000:]}"
        elif words[0] == "python":
            completed = subprocess.run(
                [sys.executable, *words[1:]], capture_output=True, text=True
            )
            assert completed.returncode == 0, f"{command}\n{completed.stderr[-3000:]}"
        else:
            pytest.fail(f"README command this test cannot run: {command}")
