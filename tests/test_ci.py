"""CI runs what the README tells a new user to run, and nothing else."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def readme_commands():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    first_block = re.search(r"```bash\n(.*?)```", readme, re.S)
    assert first_block, "README.md must open with a ```bash block of commands"
    return [line for line in first_block.group(1).splitlines() if line.strip()]


def test_readme_opens_with_install_and_test_commands():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert readme.index("```bash") < 200, "the commands must open the README"
    install, tests = readme_commands()
    assert install.startswith("pip install -e") and "rnnkit run" in install
    assert tests.startswith("pytest")


def test_ci_runs_the_readme_commands_verbatim():
    ci_lines = (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    for command in readme_commands():
        assert command in ci_lines, f"CI does not run README's {command!r}"


def test_ci_turns_missing_shared_data_into_failures(monkeypatch, tmp_path):
    import pytest

    from tests.shared_data import REQUIRE_VARIABLE, require

    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert f"export {REQUIRE_VARIABLE}=1" in ci
    missing = tmp_path / "no-such-dataset.csv"
    monkeypatch.setenv(REQUIRE_VARIABLE, "1")
    with pytest.raises(pytest.fail.Exception, match="no-such-dataset.csv"):
        require(missing)
    monkeypatch.delenv(REQUIRE_VARIABLE)
    with pytest.raises(pytest.skip.Exception, match="no-such-dataset.csv"):
        require(missing)
    assert require(tmp_path) == tmp_path


def test_the_tests_scheduled_first_exist_and_come_first():
    """tests/conftest.py hands out its longest tests first: each test, file or folder
    it names exists (a renamed one would silently go back in line), and the
    reordering puts them ahead of the rest in its order, each in collection order."""
    from types import SimpleNamespace

    from tests import conftest

    for prefix in conftest.LONGEST_FIRST:
        path, _, function = prefix.partition("::")
        assert (ROOT / path).exists(), prefix
        if function:
            source = (ROOT / path).read_text(encoding="utf-8")
            assert re.search(rf"^def {function}\(", source, re.M), prefix
    ids = [
        "tests/test_a.py::test_quick",
        conftest.LONGEST_FIRST[1] + "[one]",
        "tests/test_b.py::test_other",
        conftest.LONGEST_FIRST[0] + "[two]",
        conftest.LONGEST_FIRST[1] + "[three]",
    ]
    items = [SimpleNamespace(nodeid=nodeid) for nodeid in ids]
    conftest.pytest_collection_modifyitems(None, items)
    assert [item.nodeid for item in items] == [ids[3], ids[1], ids[4], ids[0], ids[2]]


def test_auto_starts_a_worker_more_than_the_cores_on_tensorflow(monkeypatch):
    """`-n auto` (README's test command): on TensorFlow one worker per usable core
    and one more, on JAX and PyTorch (the layer passes) one per core, unless
    PYTEST_XDIST_AUTO_NUM_WORKERS says otherwise (pytest-xdist reads it)."""
    import os

    from tests import conftest

    monkeypatch.delenv("PYTEST_XDIST_AUTO_NUM_WORKERS", raising=False)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)
    monkeypatch.delenv("KERAS_BACKEND", raising=False)
    assert conftest.pytest_xdist_auto_num_workers(None) == 3
    for backend, workers in (("tensorflow", 3), ("jax", 2), ("torch", 2)):
        monkeypatch.setenv("KERAS_BACKEND", backend)
        assert conftest.pytest_xdist_auto_num_workers(None) == workers, backend
    monkeypatch.setenv("PYTEST_XDIST_AUTO_NUM_WORKERS", "5")
    assert conftest.pytest_xdist_auto_num_workers(None) is None


@pytest.mark.parametrize(
    "command", [["check"], ["format", "--check"]], ids=["lint", "format"]
)
def test_the_code_is_ruff_clean(command):
    """`ruff check .` and `ruff format --check .` (the settings in pyproject.toml),
    notebooks included."""
    result = subprocess.run(
        [sys.executable, "-m", "ruff", *command, "."],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
