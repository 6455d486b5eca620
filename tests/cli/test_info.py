"""`rnnkit info`."""

from __future__ import annotations

from tests.cli_support import invoke


def test_info_shows_versions_and_devices():
    result = invoke("info")
    assert result.exit_code == 0
    assert "tensorflow" in result.output and "backend" in result.output
    assert "device       CPU" in result.output
