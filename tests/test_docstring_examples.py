"""The `>>>` examples of the top-level modules the API reference documents run."""

from __future__ import annotations

import pytest

from tests.docstring_examples import run_examples

MODULES = [
    "rnnkit.config",
    "rnnkit.decoding.sampling",
    "rnnkit.decoding.search",
    "rnnkit.layers.calibration",
    "rnnkit.losses",
    "rnnkit.optimizers",
]


@pytest.mark.parametrize("module_name", MODULES)
def test_docstring_examples_run(module_name):
    assert run_examples(module_name) > 0
