"""The runner of README and docs commands (tests/markdown_examples.py) itself."""

import pytest

from tests import markdown_examples
from tests.recipes import test_captioning
from tests.shared_data import REQUIRE_VARIABLE


def outcome_of(command, folder):
    """The exception `prepare` ends with (a skip must not pass as the outcome)."""
    try:
        markdown_examples.prepare(command, folder)
    except BaseException as error:  # noqa: BLE001 - pytest's outcomes are BaseException
        return error
    return None


def test_a_command_that_needs_missing_shared_data_fails_when_ci_requires_it(
    monkeypatch, tmp_path
):
    monkeypatch.setattr(test_captioning, "IMAGE_ZIP", tmp_path / "missing.zip")
    command = "rnnkit predict runs/captioning/smoke photo.jpg"
    monkeypatch.setenv(REQUIRE_VARIABLE, "1")
    failed = outcome_of(command, tmp_path)
    assert isinstance(failed, pytest.fail.Exception), failed
    assert "missing.zip" in str(failed)
    monkeypatch.delenv(REQUIRE_VARIABLE)
    skipped = outcome_of(command, tmp_path)
    assert isinstance(skipped, pytest.skip.Exception), skipped
