"""The order in which the suite's tests are handed out.

The longest tests first: pytest-xdist hands the tests to its workers in collection
order, so a two-minute test collected last would run alone at the end while the
other workers wait.
"""

from __future__ import annotations

# Tests that take a minute or more on a 2-core CPU, by node-id prefix (scheduled first;
# their order among themselves is the collection order).
LONGEST_FIRST = (
    "tests/test_notebooks.py::test_notebook_runs",
    "tests/test_docs.py::test_docs_shell_commands_run",
    "tests/test_docs.py::test_make_images_draws_every_picture",
    "tests/tuning/test_cluster.py::test_chief_and_two_workers_run_every_trial_once",
    "tests/training/test_resume.py::test_a_resumed_run_repeats_the_uninterrupted_run",
)


def pytest_collection_modifyitems(config, items):
    def first(item) -> bool:
        return item.nodeid.startswith(LONGEST_FIRST)

    items[:] = [item for item in items if first(item)] + [
        item for item in items if not first(item)
    ]
