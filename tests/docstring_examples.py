"""Runs the `>>>` examples of rnnkit's docstrings as doctests."""

from __future__ import annotations

import doctest
import importlib

import keras
import numpy as np


def run_examples(module_name: str) -> int:
    """Runs every example in `module_name`; fails with doctest's report. Returns the
    number of examples run."""
    module = importlib.import_module(module_name)
    globs = {"np": np, "keras": keras}
    if keras.backend.backend() == "tensorflow":
        import tensorflow as tf

        globs["tf"] = tf
    finder = doctest.DocTestFinder(exclude_empty=True)
    runner = doctest.DocTestRunner(
        optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE
    )
    examples = 0
    failures: list[str] = []
    for test in finder.find(module, module_name, extraglobs=globs):
        if test.examples:
            examples += len(test.examples)
            runner.run(test, out=failures.append)
    results = runner.summarize(verbose=False)
    assert results.failed == 0, "".join(failures)
    return examples
