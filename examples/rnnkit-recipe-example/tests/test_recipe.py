"""The airline recipe against rnnkit's recipe contract (`rnnkit.testing`).

One call checks what rnnkit relies on: the config's TOML round trip, `check_config`,
the data splits, a model that reloads in safe mode, one epoch through rnnkit's runner,
the test table beside its baselines, and `predict`. A failure names its check.
"""

from pathlib import Path

from rnnkit_recipe_example.recipe import AirlineRecipe

from rnnkit.testing import check_recipe

SMOKE = Path(__file__).resolve().parents[1] / "rnnkit_recipe_example/configs/smoke.toml"


def test_recipe_contract(tmp_path):
    check_recipe(
        AirlineRecipe(),
        SMOKE,
        # What `rnnkit predict RUN_DIR` takes: data.window + 1 monthly counts.
        predict_inputs="340 318 362 348 363 435 491 505 404 359 310 337 360".split(),
        work_dir=tmp_path,
        skip=["export"],  # the recipe declares no export (it has no export_plan)
    )
