"""`rnnkit --help` and `rnnkit list`."""

from __future__ import annotations

from tests.cli_support import invoke


def test_help_and_list():
    assert "run" in invoke("--help").output
    listing = invoke("list")
    assert listing.exit_code == 0
    assert any(line.startswith("stock ") for line in listing.output.splitlines())
    run_help = invoke("run", "--help").output
    assert "stock" in run_help
