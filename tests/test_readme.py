"""Every example in README.md runs as written (helpers: tests/markdown_examples.py)."""

import re

import pytest

from tests.markdown_examples import (
    ROOT,
    block_id,
    blocks,
    make_workdir,
    run_python,
    run_shell_block,
    shell_commands,
)

README = ROOT / "README.md"
TEXT = README.read_text("utf-8")
PYTHON_BLOCKS = blocks(TEXT, "python")
# The opening ```bash block is the set-up, which CI runs verbatim (see test_ci.py);
# the others run in order, in one scratch folder.
SHELL_BLOCKS = blocks(TEXT, "bash")[1:]


@pytest.mark.parametrize("source", PYTHON_BLOCKS, ids=block_id)
def test_readme_python_example_runs(source, tmp_path):
    run_python(source, tmp_path)


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    return make_workdir(tmp_path_factory.mktemp("readme"))


@pytest.mark.parametrize(
    "block", SHELL_BLOCKS, ids=lambda block: shell_commands(block)[0][:50]
)
def test_readme_shell_commands_run(block, workdir, monkeypatch, tmp_path_factory):
    run_shell_block(block, workdir, monkeypatch, tmp_path_factory)


def test_readme_links_into_the_docs():
    """The README is the short tour: it points at the docs pages that exist."""
    linked = set(re.findall(r"\]\((docs/[^)#]+)", TEXT))
    assert linked, "README.md links to no docs page"
    for path in linked:
        assert (ROOT / path).is_file(), f"README.md links to missing {path}"
