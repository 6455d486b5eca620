"""Where the tests find the real datasets (`../shared/data` beside the checkout).

Locally a missing dataset skips the tests that need it, with the path as the reason.
In CI, `.ci/run` sets RNNKIT_REQUIRE_SHARED_DATA=1 and a missing dataset fails those
tests instead: a broken data path must not pass as a row of skips.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

SHARED_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"
REQUIRE_VARIABLE = "RNNKIT_REQUIRE_SHARED_DATA"


def require(path: Path) -> Path:
    """`path` if it exists; otherwise skip the test (locally) or fail it (in CI)."""
    if path.exists():
        return path
    message = f"shared data {path} is not available"
    if os.environ.get(REQUIRE_VARIABLE, "") not in ("", "0"):
        pytest.fail(f"{message}, and {REQUIRE_VARIABLE} requires it")
    pytest.skip(message)
