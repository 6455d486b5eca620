"""The one smoke run that the run, evaluate and predict tests read."""

from __future__ import annotations

import pytest

from tests.cli.support import invoke
from tests.stock_support import SMOKE_CONFIG


@pytest.fixture(scope="package")
def smoke_run(tmp_path_factory):
    """One completed smoke run of the stock recipe, shared by the read-only tests."""
    run_dir = tmp_path_factory.mktemp("cli") / "smoke"
    result = invoke(
        "run", "stock", "--config", str(SMOKE_CONFIG), "--run-dir", str(run_dir)
    )
    assert result.exit_code == 0, result.output
    return run_dir, result
