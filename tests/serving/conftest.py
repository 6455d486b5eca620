"""The served runs: the session's smoke runs of sentiment and translation (trained
anyway for the docs and recipe tests), served from Keras in this process, and copies
of them served from their ONNX exports (written into the copy, as `rnnkit serve
--runtime onnx` writes into a run directory)."""

from __future__ import annotations

import contextlib
import shutil
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.process_support import free_port
from tests.shared_once import made_once
from tests.smoke_runs import smoke_run

RECIPES = ("sentiment", "translation")


def run_dir(tmp_path_factory, name: str) -> Path:
    run = smoke_run(tmp_path_factory, name)
    assert run.exit_code == 0, run.output[-3000:]
    return run.run_dir


@pytest.fixture(scope="session")
def smoke_runs(tmp_path_factory) -> dict[str, Path]:
    return {name: run_dir(tmp_path_factory, name) for name in RECIPES}


@pytest.fixture(scope="session")
def keras_models(smoke_runs):
    from rnnkit import serving

    return serving.load_all([f"{k}={v}" for k, v in smoke_runs.items()], "keras")


@pytest.fixture(scope="session")
def onnx_models(tmp_path_factory, smoke_runs):
    """The runs' copies with their ONNX exports, exported once in the session."""
    from rnnkit import serving

    def exported(folder: Path) -> None:
        for name, source in smoke_runs.items():
            shutil.copytree(source, folder / name)
            serving.load(folder / name, "onnx")  # writes export/onnx

    folder = made_once(tmp_path_factory, "serving-onnx-runs", exported)
    return serving.load_all([str(folder / name) for name in RECIPES], "onnx")


@pytest.fixture(scope="session")
def keras_client(keras_models):
    from fastapi.testclient import TestClient

    from rnnkit import serving

    return TestClient(serving.create_app(keras_models), raise_server_exceptions=False)


@pytest.fixture(scope="session")
def onnx_client(onnx_models):
    from fastapi.testclient import TestClient

    from rnnkit import serving

    return TestClient(serving.create_app(onnx_models), raise_server_exceptions=False)


@contextlib.contextmanager
def live_server(app) -> Iterator[str]:
    """`app` behind uvicorn on a free loopback port, in a thread; its URL."""
    import uvicorn

    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning")
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(10)
