"""The `>>>` examples of the model and library docstrings run as written."""

from __future__ import annotations

import pytest

from tests.docstring_examples import run_examples

MODULES = [
    "rnnkit.models.encoder_decoder",
    "rnnkit.models.sequence_classifier",
    "rnnkit.models.text_standardizer",
    "rnnkit.models.sequence_regressor",
    "rnnkit.models.forecaster",
    "rnnkit.models.language_model",
    "rnnkit.models.image_captioner",
    "rnnkit.optimizers",
]


@pytest.mark.parametrize("module_name", MODULES)
def test_model_docstring_examples_run(module_name):
    assert run_examples(module_name) > 0
