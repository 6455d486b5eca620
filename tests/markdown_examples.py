"""Runs the code blocks of Markdown pages (README.md, docs/) as a reader would.

```python blocks run in a fresh interpreter in an empty folder, a page's blocks in
one interpreter (each in its own namespace, in order). ```bash blocks run command by
command, in order, in one scratch folder per page where `recipes/` is the repository's
and `../shared` (the real data the smoke configs read) lies beside it, as in CI:
`rnnkit` commands in this process through click's CliRunner (one TensorFlow start-up
instead of one per command), `python -c` and `curl` in a subprocess, and `rnnkit serve
... &` as a server process that the block's later commands call and that ends with
the block. A recipe's smoke command
(`rnnkit run NAME --config recipes/NAME/configs/smoke.toml --run-dir runs/NAME/smoke`,
on several pages) is run once in the session for all of them (tests/smoke_runs.py),
and so is a block that stands on more than one page (README.md and a guide).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
import tempfile
import time
import urllib.request
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests import preloaded, smoke_runs

ROOT = Path(__file__).resolve().parents[1]
# pymdownx.snippets: a line `--8<-- "path"` stands for the file at path (from the root).
SNIPPET = re.compile(r'^--8<-- "([^"]+)"$', re.M)


def blocks(text: str, language: str) -> list[str]:
    """The fenced blocks of `language` in `text`, with snippet lines expanded."""
    found = re.findall(rf"^```{language}\n(.*?)^```", text, re.S | re.M)
    return [
        SNIPPET.sub(lambda m: (ROOT / m.group(1)).read_text(encoding="utf-8"), block)
        for block in found
    ]


def block_id(block: str) -> str:
    return block.strip().splitlines()[0][:50]


def run_python(sources: str | list[str], folder: Path) -> None:
    """Runs `sources` (one block or a page's blocks, in order) in one fresh
    interpreter in `folder`, each block in a namespace of its own, as a reader pasting
    a page's examples one after another into a Python session would."""
    sources = [sources] if isinstance(sources, str) else list(sources)
    driver = (
        "import json, sys\n"
        f"for number, source in enumerate(json.loads({json.dumps(sources)!r}), 1):\n"
        "    print(f'== block {number}', file=sys.stderr, flush=True)\n"
        "    code = compile(source, f'<block {number}>', 'exec')\n"
        "    exec(code, {'__name__': '__main__'})\n"
    )
    result = preloaded.run(
        ["-c", driver],
        cwd=folder,
        # Caches (captioning features, downloads) go to the scratch folder, never home.
        env={
            **os.environ,
            "MPLBACKEND": "Agg",
            "RNNKIT_DATA_DIR": str(folder / "rnnkit-data"),
        },
    )
    assert result.returncode == 0, result.stderr[-3000:]


def shell_commands(block: str) -> list[str]:
    joined = block.replace("\\\n", " ")
    return [line.strip() for line in joined.splitlines() if line.strip()]


def make_workdir(parent: Path) -> Path:
    """A scratch checkout: the repository's `recipes/`, and `../shared` beside it."""
    folder = parent / "rnnkit"
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
        from tests.recipes import test_captioning

        # Skipped locally without the data, failed in CI (RNNKIT_REQUIRE_SHARED_DATA).
        with zipfile.ZipFile(require(test_captioning.IMAGE_ZIP)) as archive:
            real_images = test_captioning.real_images
            (name,) = real_images(1, "Flickr_8k.testImages.txt")
            (workdir / "photo.jpg").write_bytes(
                archive.read(f"flickr8k_images_256/{name}")
            )
    resume = re.search(r"--resume (\S+)", command)
    if resume and not (workdir / resume.group(1)).exists():
        from rnnkit_recipes.stock.recipe import StockRecipe

        from rnnkit.training import runner
        from tests.stock_support import smoke_config
        from tests.training.test_runner import InterruptAt

        with pytest.raises(KeyboardInterrupt):
            runner.run(
                StockRecipe(),
                smoke_config(),
                workdir / resume.group(1),
                verbose=0,
                callbacks=[InterruptAt(1)],
            )


@functools.cache
def shared_blocks() -> frozenset[str]:
    """The ```bash blocks that stand on more than one page (README.md and docs/),
    the set-up block aside: each runs once in the session (`run_shell_block`)."""
    count: dict[str, int] = {}
    for page in (ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))):
        for block in set(blocks(page.read_text(encoding="utf-8"), "bash")[1:]):
            count[block] = count.get(block, 0) + 1
    return frozenset(block for block, pages in count.items() if pages > 1)


def _run_shared_block(block: str, workdir: Path, tmp_path_factory) -> None:
    """`block`, which stands on several pages, run once in the session in a scratch
    checkout of its own; what it wrote is copied into `workdir`. A block that needs
    what an earlier block of its page wrote fails there, loudly."""
    from tests.shared_once import made_once

    def make(folder: Path) -> None:
        with pytest.MonkeyPatch.context() as patch:
            run_shell_block(block, make_workdir(folder), patch, tmp_path_factory, False)

    name = hashlib.sha1(block.encode("utf-8")).hexdigest()[:12]
    made = made_once(tmp_path_factory, f"block-{name}", make) / "rnnkit"
    for path in made.iterdir():
        if path.name == "recipes":
            continue
        # Into folders an earlier block of the page made (runs/), never over a file.
        files = [path] if path.is_file() else path.rglob("*")
        for file in (f for f in files if f.is_file()):
            target = workdir / file.relative_to(made)
            assert not target.exists(), f"{target.relative_to(workdir)} exists already"
        if path.is_dir():
            shutil.copytree(path, workdir / path.name, dirs_exist_ok=True)
        else:
            shutil.copyfile(path, workdir / path.name)


def run_shell_block(
    block: str, workdir: Path, monkeypatch, tmp_path_factory=None, share=True
) -> None:
    """Runs `block`'s commands in `workdir`. With `tmp_path_factory`, a recipe's smoke
    command (tests/smoke_runs.py) is the session's one run of it, copied here, and so
    is a block that stands on several pages (`shared_blocks`)."""

    if share and tmp_path_factory is not None and block in shared_blocks():
        _run_shared_block(block, workdir, tmp_path_factory)
        return
    monkeypatch.chdir(workdir)
    # Caches (captioning features, downloads) go to the scratch folder, never home.
    monkeypatch.setenv("RNNKIT_DATA_DIR", str(workdir / "rnnkit-data"))
    with background_servers() as start:
        for command in shell_commands(block):
            _run_command(command, workdir, tmp_path_factory, start)


def _run_command(command: str, workdir: Path, tmp_path_factory, start) -> None:
    from click.testing import CliRunner

    from rnnkit.cli import main

    prepare(command, workdir)
    words = shlex.split(command)
    recipe = smoke_runs.recipe_of(command)
    if recipe and tmp_path_factory is not None:
        shared = smoke_runs.smoke_run(tmp_path_factory, recipe)
        assert shared.exit_code == 0, f"{command}\n{shared.output[-3000:]}"
        target = workdir / "runs" / recipe / "smoke"
        assert not target.exists(), f"{command}: {target} exists already"
        shutil.copytree(shared.run_dir, target, symlinks=True)
    elif words[0] == "rnnkit" and words[-1] == "&":  # a server, until the block ends
        start(words[:-1], workdir)
    elif words[0] == "rnnkit":
        result = CliRunner().invoke(main, words[1:], catch_exceptions=False)
        assert result.exit_code == 0, f"{command}\n{result.output[-3000:]}"
    elif words[0] == "python":
        completed = preloaded.run(words[1:])
        assert completed.returncode == 0, f"{command}\n{completed.stderr[-3000:]}"
    elif words[0] == "curl":
        completed = subprocess.run(
            words, cwd=workdir, capture_output=True, text=True, timeout=300
        )
        assert completed.returncode == 0, f"{command}\n{completed.stderr[-3000:]}"
    else:
        pytest.fail(f"a command this test cannot run: {command}")


@contextlib.contextmanager
def background_servers() -> Iterator:
    """`start(words, workdir)` runs `rnnkit serve ... &` as a process and waits until
    its /health answers; the processes end with the block."""
    processes = []

    def start(words: list[str], workdir: Path) -> None:
        port = words[words.index("--port") + 1] if "--port" in words else "8000"
        log = tempfile.TemporaryFile("w+")
        process = subprocess.Popen(
            words, cwd=workdir, stdout=log, stderr=subprocess.STDOUT, text=True
        )
        processes.append((process, log))
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            if process.poll() is not None:
                log.seek(0)
                pytest.fail(f"{' '.join(words)} ended: {log.read()[-3000:]}")
            with contextlib.suppress(OSError):
                url = f"http://127.0.0.1:{port}/health"
                with urllib.request.urlopen(url, timeout=2) as answer:
                    if answer.status == 200:
                        return
            time.sleep(0.3)
        pytest.fail(f"{' '.join(words)}: no answer on port {port} in 300 s")

    try:
        yield start
    finally:
        for process, log in processes:
            process.terminate()
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
            log.close()
