"""CI runs what the README tells a new user to run, and nothing else."""

import re
from pathlib import Path

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
