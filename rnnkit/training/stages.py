"""Stages: runs of their own that a recipe's main fit starts from (`Recipe.prepare`).

A recipe whose model starts from another trained model (the sentiment classifier from
a language model) can train that model as a stage of the same `rnnkit run`:
`run_stage(recipe, config, run_dir, name)` trains it into `run_dir/stages/NAME`, a
complete run directory of the stage's recipe (config.toml, history, model, metrics,
run.json), and returns that folder. It is what makes the whole path resumable at every
stage: a stage finished before (its `run.json` is there) is kept, not retrained; one
that stopped is continued as `--resume` continues a run (from its last finished
epoch, or from the first when it stopped before finishing one). A stage's config must be
the one it was started with: another one (changed settings between attempts) is a
`ConfigError`, not a model trained half with each.
"""

from __future__ import annotations

import logging
from pathlib import Path

from rnnkit import config as config_lib
from rnnkit.errors import ConfigError
from rnnkit.recipe import Recipe, RecipeConfig
from rnnkit.training.run_dir import (
    CONFIG_FILE,
    RUN_FILE,
    STAGES_DIR,
)

log = logging.getLogger("rnnkit")


def stage_dir(run_dir: str | Path, name: str) -> Path:
    """The folder of stage `name` of the run in `run_dir`."""
    return Path(run_dir) / STAGES_DIR / name


def run_stage(
    recipe: Recipe, config: RecipeConfig, run_dir: str | Path, name: str
) -> Path:
    """Trains `recipe` with `config` as stage `name` of the run in `run_dir` (kept
    when finished before, resumed when interrupted); returns the stage's folder."""
    from rnnkit.training import runner

    folder = stage_dir(run_dir, name)
    recorded = folder / CONFIG_FILE
    if recorded.is_file():
        before = config_lib.load_toml(type(config), recorded).flat()
        changed = sorted(
            key for key, value in config.flat().items() if before.get(key) != value
        )
        if changed:
            raise ConfigError(
                f"stage {name!r} in {folder} was started with other settings "
                f"({', '.join(changed)}); run the settings it was started with, or "
                "start a new run directory"
            )
    if (folder / RUN_FILE).is_file():
        log.info("stage %s: finished before, kept (%s)", name, folder)
        return folder
    # A folder with anything in it (an epoch's backup, or only the config of an
    # attempt killed before its first epoch) is continued; an absent one is created.
    resume = folder.is_dir() and any(folder.iterdir())
    log.info(
        "stage %s: %s %s run into %s",
        name,
        "resuming the" if resume else "training a",
        recipe.name,
        folder,
    )
    runner.run(recipe, config, folder, resume=resume)
    return folder
