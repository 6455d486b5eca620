"""Small trained runs of the recipes, shared by the export tests (one per recipe).

Stock and the language model: the session's smoke runs. The others: the recipe's
smoke config cut further (fewer examples, one epoch, no slow baselines): the export
tests need a trained model of the recipe's architecture, not a good one. Translation
and the language model have a Transformer run too.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.cli_support import invoke
from tests.export.support import stop_children
from tests.shared_once import made_once
from tests.smoke_runs import smoke_run

ROOT = Path(__file__).resolve().parents[2]

# The recipes whose export tests take the session's smoke run itself (trained anyway
# for the docs and recipe tests, tests/smoke_runs.py): a run of their own, cut to one
# epoch, would cost as much again.
SMOKE = {"stock", "language_model"}
QUICK = {
    # The language model's Transformer run starts from these options.
    "language_model": ["--set", "train.epochs=1", "--set", "data.limit=8000"],
    "sentiment": [
        "--set",
        "data.limit=200",
        "--set",
        "train.epochs=1",
        "--set",
        "evaluation.baselines=false",
        # Every kind of dropout in the exported graph (the smoke config has
        # embedding and output dropout): the inference graph must drop none.
        "--set",
        "model.recurrent_dropout=0.1",
    ],  # fmt: skip
    "translation": [
        "--set",
        "data.limit=120",
        "--set",
        "train.epochs=1",
        "--set",
        "evaluation.beam_width=1",
        "--set",
        "evaluation.heatmaps=0",
    ],  # fmt: skip
    # Five quick epochs at a high rate: greedy captions that end at different
    # lengths (some at the end token, some at the length limit), as the export's
    # greedy loop must reproduce.
    "captioning": [
        "--set",
        "data.limit=16",
        "--set",
        "train.epochs=5",
        "--set",
        "train.learning_rate=0.01",
        "--set",
        "evaluation.beam_width=1",
        "--set",
        "evaluation.overlays=0",
    ],  # fmt: skip
}
# The Transformer runs: the quick runs with a one-block Transformer of d = 16.
TINY_TRANSFORMER = [
    "--set", "model.architecture=transformer",
    "--set", "model.model_dim=16",
    "--set", "model.num_heads=2",
    "--set", "model.feedforward_dim=32",
]  # fmt: skip
QUICK["translation_transformer"] = [*QUICK["translation"], *TINY_TRANSFORMER]
QUICK["language_model_transformer"] = [
    *QUICK["language_model"],
    *TINY_TRANSFORMER,
    "--set",
    "train.bptt=16",  # the Transformer's context: its cache's positions
]
# Hawk's blocks of minLSTM: the step carries each block's convolution inputs too.
QUICK["language_model_hawk"] = [
    *QUICK["language_model"],
    "--set", "model.block=hawk",
    "--set", "model.cell_type=minlstm",
    "--set", "model.embedding_dim=16",
    "--set", "model.units=16",
]  # fmt: skip


def trained_run(folder: Path, name: str) -> Path:
    """The run `name` of QUICK: a recipe, or RECIPE_transformer (RECIPE_hawk)."""
    recipe = name.removesuffix("_transformer").removesuffix("_hawk")
    run_dir = folder / name
    config = ROOT / "recipes" / recipe / "configs" / "smoke.toml"
    # The captioning run's decoded images go to the test's folder, not the user's.
    cache = ["--set", f"data.cache_dir={folder / 'cache'}"]
    result = invoke(
        "run", recipe, "--config", str(config), "--run-dir", str(run_dir),
        *QUICK[name], *(cache if recipe == "captioning" else []),
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    return run_dir


@pytest.fixture(scope="package")
def runs(tmp_path_factory):
    """{run name (a recipe, RECIPE_transformer or RECIPE_hawk): run directory}, each
    trained on first use, once in the session (made_once: pytest-xdist hands a recipe's
    export tests to several workers). The tests read the runs and export to their
    own folders."""

    def get(name: str) -> Path:
        if name in SMOKE:
            run = smoke_run(tmp_path_factory, name)
            assert run.exit_code == 0, run.output[-3000:]
            return run.run_dir
        folder = made_once(
            tmp_path_factory, f"export-run-{name}", lambda f: trained_run(f, name)
        )
        return folder / name

    return get


@pytest.fixture(scope="package", autouse=True)
def runtime_processes():
    """The fresh runtime processes of run_fresh (support.py) live for the package."""
    yield
    stop_children()
