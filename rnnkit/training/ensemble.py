"""`rnnkit ensemble RUN...`: several trained runs of one recipe as one model, written
and evaluated as a run of its own.

The recipe's `ensemble` hook makes the model (forecasting: the mean or the median of the
members' forecasts) and the config that feeds it; this module checks the runs, writes
the run directory as `rnnkit run` would (config.toml first, model.keras, metrics.json,
plots/, run.json last, each file under a temporary name until complete) and records the
members in run.json. Nothing is trained: each member keeps the weights it was chosen
with, so an ensemble is only as honest as the runs it is made of (their configurations
chosen on validation, none on the test split).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from rnnkit.errors import ConfigError
from rnnkit.files import write_json
from rnnkit.recipe import Recipe
from rnnkit.training.run_dir import (
    CLAIM_FILE,
    METRICS_FILE,
    MODEL_FILE,
    PLOT_DIR,
    RUN_FILE,
    load_model,
    load_run,
    open_run_dir,
    remove_run,
    save_model,
)
from rnnkit.training.runtime import versions

log = logging.getLogger("rnnkit")


def combine(
    run_dirs: Sequence[str | Path],
    load_recipe: Callable[[str], Recipe],
    run_dir: str | Path | None = None,
    *,
    runs_root: str | Path = "runs",
    how: str = "mean",
) -> tuple[Path, dict[str, Any]]:
    """Writes the ensemble of the completed runs `run_dirs` to `run_dir` (default
    `runs_root/<recipe>/<timestamp>`), their outputs combined by `how` ("mean" or
    "median"); returns its path and its metrics."""
    import keras

    started = time.time()
    if len(run_dirs) < 2:
        raise ConfigError(
            f"rnnkit ensemble combines two runs or more, received {len(run_dirs)}; "
            "give the run directories of the members"
        )
    if len({Path(d).resolve() for d in run_dirs}) < len(run_dirs):
        raise ConfigError("a run is given twice; give each member once")
    loaded = [load_run(d, load_recipe) for d in run_dirs]
    names = {recipe.name for recipe, _, _ in loaded}
    if len(names) > 1:
        raise ConfigError(
            f"the runs are of different recipes ({', '.join(sorted(names))}); an "
            "ensemble combines runs of one recipe"
        )
    recipe = loaded[0][0]
    models, configs = [m for _, _, m in loaded], [c for _, c, _ in loaded]
    # The mean needs no `combine` argument: a hook written before it existed takes
    # (models, configs); a recipe without the hook refuses in its own words.
    if how == "mean" or not recipe.combines:
        model, config = recipe.ensemble(models, configs)
    elif how in recipe.combines:
        model, config = recipe.ensemble(models, configs, combine=how)
    else:
        raise ConfigError(
            f"recipe {recipe.name!r} combines runs by their "
            f"{' or '.join(recipe.combines)} only (its `combines`); "
            f"drop --combine {how}"
        )
    created = not run_dir or not Path(run_dir).exists()
    header = (
        f"rnnkit recipe: {recipe.name}\n"
        f"An ensemble of {len(run_dirs)} runs (run.json names them): this config "
        "feeds and evaluates it.\nRemake it with: rnnkit ensemble "
        + " ".join(str(d) for d in run_dirs)
        + ("" if how == "mean" else f" --combine {how}")
    )
    run_dir = open_run_dir(
        recipe.name, config, run_dir, runs_root, resume=False, header=header
    )
    try:
        save_model(model, run_dir / MODEL_FILE)
        model = load_model(run_dir / MODEL_FILE)  # evaluated as it will be read
        keras.utils.set_random_seed(config.train.seed)
        data = recipe.load_data(config)
        metrics = {"test": recipe.evaluate(model, data, config)}
        write_json(run_dir / METRICS_FILE, metrics)
        recipe.write_plots(model, data, config, run_dir / PLOT_DIR)
        (run_dir / CLAIM_FILE).unlink(missing_ok=True)
        write_json(
            run_dir / RUN_FILE,
            {
                "recipe": recipe.name,
                "status": "completed",
                "ensemble_of": [str(Path(d)) for d in run_dirs],
                "combine": how,
                "seeds": [member.train.seed for _, member, _ in loaded],
                "wall_seconds": round(time.time() - started, 3),
                "versions": versions(),
                "files": sorted(
                    str(p.relative_to(run_dir))
                    for p in run_dir.rglob("*")
                    if p.is_file()
                ),
            },
        )
    except BaseException:  # nothing half-made stays: an ensemble has no --resume
        remove_run(run_dir, created)
        raise
    return run_dir, metrics


def require_shared(
    configs: Sequence[Any],
    keys: Sequence[str],
    why: str,
    comparable: Callable[[Any], Any] = repr,
) -> None:
    """For a recipe's `ensemble` hook: a one-line ConfigError naming the first of
    `keys` whose value differs between the members' `configs` (values compared as
    `comparable` makes them), `why` ending it: what members share and what to do."""
    for key in keys:
        values = [config.get(key) for config in configs]
        if len({comparable(value) for value in values}) > 1:
            raise ConfigError(
                f"the runs differ in {key} ({', '.join(map(str, values))}); {why}"
            )
