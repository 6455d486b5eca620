"""The order in which the suite's tests are handed out.

The longest tests first: pytest-xdist shares the tests out among its workers in
collection order (setup.cfg's `--dist worksteal`: contiguous shares, and a worker
that runs out takes half of what another has left), so a two-minute test collected
last would run alone at the end while the other workers wait.
"""

from __future__ import annotations

import os
import sys

import pytest

# One thread per operation inside each test worker (and the processes it starts):
# pytest-xdist runs a worker per core (and one more, below), and two workers each
# spreading every matmul over both cores spent a seventh of the suite's CPU time
# contending for them (measured on the 2-core Xeon). Inter-op threads are left
# alone: recipe runs keep the batch-sharded path they take on a 2-core machine. Set
# before any test module imports TensorFlow; a value the caller exported wins.
os.environ.setdefault("TF_NUM_INTRAOP_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")
# On JAX every layer test compiles its functions through XLA, and the models are tiny:
# compiling dominates running. Without LLVM's optimisation passes (-O0; IEEE
# arithmetic kept, no fast-math, and XLA's own graph passes still run) the JAX pass
# took 158 s instead of 208 s, 291 instead of 390 CPU seconds (2-core Xeon), every
# test passing. Not on TensorFlow: there it gained nothing (1,058 s both ways), and
# `rnnkit evaluate` no longer reproduced a run's figures to the last bit. Flags the
# caller exported win.
if os.environ.get("KERAS_BACKEND") == "jax":
    os.environ.setdefault("XLA_FLAGS", "--xla_backend_optimization_level=0")
# `rnnkit run` loads the machine's `rnnkit calibrate` cache, which changes the loops
# the layers take: the suite runs without the developer's cache (an empty folder of
# its own, inherited by the processes tests start), as on a fresh
# machine. The calibration tests point RNNKIT_CACHE_DIR at folders of their own.
if "RNNKIT_CACHE_DIR" not in os.environ:
    import atexit
    import shutil
    import tempfile

    os.environ["RNNKIT_CACHE_DIR"] = tempfile.mkdtemp(prefix="rnnkit-test-cache-")
    # Removed when the process that made it ends (each xdist worker imports this
    # file with the controller's folder already set, so only the controller owns it).
    atexit.register(shutil.rmtree, os.environ["RNNKIT_CACHE_DIR"], ignore_errors=True)

# Tests (node-id prefixes: a test, a file or a folder) that hold the suite's longest
# tests (a quarter of a minute to three minutes each on a 2-core CPU), handed out first
# in this order; the rest follow in collection order. tests/training and tests/tuning,
# collected last, once left a worker alone with a minute of their tests at the end.
LONGEST_FIRST = (
    # Two processes trained, one killed, two resumed: a minute and more of waiting.
    "tests/training/test_multi_worker.py::"
    "test_a_dead_worker_stops_the_chief_and_resume_continues_on_both",
    "tests/test_notebooks.py::test_notebook_runs",
    "tests/test_docs.py::test_docs_shell_commands_run",
    "tests/test_docs.py::test_make_images_draws_every_picture",
    "tests/tuning/",
    "tests/training/",
    "tests/export/",
    "tests/serving/",
    "tests/recipes/test_precision.py",
    "tests/test_example_recipe.py",
    "tests/testing/test_recipe_checks.py",
)


@pytest.hookimpl(tryfirst=True)
def pytest_xdist_auto_num_workers(config):
    """`-n auto`: on TensorFlow, one worker more than the cores this process may
    use. A worker waits while the processes its test started work (killed runs,
    distributed workers, notebook kernels, fresh-process reloads) or sleeps out a
    timeout; with a worker per core that left a quarter of the 2-core CPU idle over
    the suite. On JAX and PyTorch, one worker per core: there only the layer tests
    run, in the worker itself, and a third worker on two cores only contended
    (docs/performance.md, "The test suite"). The variable pytest-xdist reads,
    PYTEST_XDIST_AUTO_NUM_WORKERS, still wins."""
    if os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS"):
        return None  # pytest-xdist's own hook reads it
    affinity = getattr(os, "sched_getaffinity", None)  # Linux; elsewhere all cores
    cores = len(affinity(0)) if affinity else os.cpu_count() or 1
    backend = os.environ.get("KERAS_BACKEND", "tensorflow")
    return cores + 1 if backend == "tensorflow" else cores


def pytest_collection_modifyitems(config, items):
    def rank(item) -> int:
        for number, prefix in enumerate(LONGEST_FIRST):
            if item.nodeid.startswith(prefix):
                return number
        return len(LONGEST_FIRST)

    items.sort(key=rank)  # stable: collection order within each rank


@pytest.fixture(scope="session", autouse=True)
def reload_process():
    """The worker's reload process (rnnkit/testing/_reload_child.py, started by the
    first fresh-process reload check) ends with the session."""
    yield
    reload = sys.modules.get("rnnkit.testing._reload")  # None: no check started one
    if reload is not None:
        reload.stop_reload_child()
