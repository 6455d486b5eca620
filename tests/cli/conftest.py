"""The one smoke run that the run, evaluate and predict tests read."""

from __future__ import annotations

import pytest

from tests import smoke_runs


@pytest.fixture(scope="package")
def smoke_run(tmp_path_factory):
    """The stock recipe's smoke command of the docs, run once in the session
    (tests/smoke_runs.py): its run directory (read-only) and what it printed."""
    shared = smoke_runs.smoke_run(tmp_path_factory, "stock")
    assert shared.exit_code == 0, shared.output
    return shared.run_dir, shared.output
