"""The `>>>` examples of the layer docstrings run as written (on every backend)."""

from __future__ import annotations

import pytest

from tests.docstring_examples import run_examples

MODULES = [
    "rnnkit.layers.simple_rnn",
    "rnnkit.layers.lstm",
    "rnnkit.layers.gru",
    "rnnkit.layers.min_rnn",
    "rnnkit.layers.rg_lru",
    "rnnkit.layers.hawk",
    "rnnkit.layers.bahdanau_attention",
    "rnnkit.layers.dot_product_attention",
    "rnnkit.layers.multi_head_attention",
    "rnnkit.layers.positional_encoding",
    "rnnkit.layers.transformer",
]


@pytest.mark.parametrize("module_name", MODULES)
def test_layer_docstring_examples_run(module_name):
    assert run_examples(module_name) > 0
