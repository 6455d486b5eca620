"""Settings every test shares."""

from __future__ import annotations

import hashlib

import pytest


@pytest.fixture(autouse=True)
def _own_calibration_cache(request, monkeypatch, tmp_path_factory):
    """Each test reads and writes an XLA calibration cache of its own (none at
    first), never the user's: a cached measurement changes what the layers'
    `jit_compile=None` compiles (rnnkit.layers.calibration). The folder is made only
    when a test writes to it."""
    name = hashlib.sha1(request.node.nodeid.encode()).hexdigest()[:16]
    folder = tmp_path_factory.getbasetemp() / "calibration-caches" / name
    monkeypatch.setenv("RNNKIT_CACHE_DIR", str(folder))
