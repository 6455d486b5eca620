"""The run directory: its files, how it is claimed, resumed and read back.

    config.toml     the exact resolved config (re-runnable with `--config`), first
    history.csv     one row per epoch, rewritten after every epoch
    model.keras     the trained model (best validation weights)
    metrics.json    {"test": {system: {metric: value}}, "backtest": {...} if folds > 0}
    plots/          training_curves.png and the recipe's own figures
    tensorboard/    TensorBoard logs
    backup/         BackupAndRestore state while training runs (removed when it ends)
    run.json        written last: the "completed" marker (recipe, seed, device, timings,
                    versions)
    stages/NAME/    a run directory of its own per stage before the main fit (a
                    pre-training run, `Recipe.prepare`; rnnkit.training.stages)

Every file is written under a temporary name in the same folder and renamed into place
(rnnkit.files), so an interrupted run never leaves a half-written file under a final
name. A directory with `config.toml` and no `run.json` is an interrupted run, which
`--resume` continues. New directories are claimed with one `mkdir` that fails when
the name is taken, so runs started together never share one; a directory given with
`--run-dir` is claimed by creating its empty `.claimed` file, which fails when another
run created it first. A finished run removes `.claimed` before it writes `run.json`.
"""

from __future__ import annotations

import contextlib
import csv
import datetime
import json
import logging
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rnnkit import config as config_lib
from rnnkit.errors import RnnkitError
from rnnkit.files import atomic_path, write_text
from rnnkit.recipe import Recipe, RecipeConfig

if TYPE_CHECKING:
    import keras

log = logging.getLogger("rnnkit")

CONFIG_FILE = "config.toml"
MODEL_FILE = "model.keras"
METRICS_FILE = "metrics.json"
HISTORY_FILE = "history.csv"
RUN_FILE = "run.json"
BACKUP_DIR = "backup"
# The runs of a recipe's stages before its main fit (`Recipe.prepare`), one folder each.
STAGES_DIR = "stages"
PLOT_DIR = "plots"
TENSORBOARD_DIR = "tensorboard"
CLAIM_FILE = ".claimed"


# -- Model and history files ---------------------------------------------------------


def save_model(model: keras.Model, path: str | Path) -> Path:
    """Saves `model` in the `.keras` format atomically."""
    with atomic_path(path) as temporary:
        model.save(temporary)
    return Path(path)


def load_model(path: str | Path) -> keras.Model:
    """Loads a `.keras` model in safe mode (no arbitrary code, e.g. no lambdas)."""
    import keras

    import rnnkit.layers  # noqa: F401 - registers the rnnkit layers for deserialization
    import rnnkit.losses  # noqa: F401 - the losses a saved compile config names
    import rnnkit.models  # noqa: F401 - and the custom pieces of the rnnkit models
    import rnnkit.optimizers  # noqa: F401 - and the optimizers

    path = Path(path)
    if not path.is_file():
        raise RnnkitError(f"no model file at {path}")
    return keras.saving.load_model(path, safe_mode=True)


def read_history(path: Path) -> list[dict[str, float]]:
    """The rows of a `history.csv` ([] if there is none)."""
    if not path.is_file():
        return []
    with path.open(newline="", encoding="utf-8") as handle:
        return [
            {key: float(value) for key, value in row.items()}
            for row in csv.DictReader(handle)
        ]


# -- Claiming, resuming and reading a run directory ----------------------------------


def claim_new_run_dir(root: Path, recipe_name: str) -> Path:
    """Creates and returns a new `root/<recipe>/<timestamp>` directory.

    The name is claimed by the `mkdir` itself, which fails when the directory
    exists, so two runs started in the same second (parallel tuning workers, a shell
    loop of `rnnkit run ... &`) never share one: the loser takes the next suffix
    (`<timestamp>-2`, `-3`, ...).
    """
    parent = root / recipe_name
    parent.mkdir(parents=True, exist_ok=True)
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    candidate, suffix = parent / stamp, 1
    while True:
        try:
            candidate.mkdir()
        except FileExistsError:
            suffix += 1
            candidate = parent / f"{stamp}-{suffix}"
        else:
            return candidate


def config_header(recipe_name: str) -> str:
    """The comment at the top of a written config.toml (`recipe_of` reads it)."""
    return (
        f"rnnkit recipe: {recipe_name}\n"
        f"Re-run with: rnnkit run {recipe_name} --config config.toml"
    )


def recipe_of(config_file: Path) -> str | None:
    """The recipe name recorded in the header of a written config.toml."""
    with contextlib.suppress(OSError):
        return _recipe_in(config_file.read_text(encoding="utf-8"))
    return None


def read_run_config(config_file: Path) -> tuple[str | None, dict[str, Any]]:
    """The recipe named in the header of a written config.toml and the file's tables,
    read once: `(None, {})` when there is no readable file, a one-line `ConfigError`
    when it is not valid TOML."""
    try:
        text = config_file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None, {}
    return _recipe_in(text), config_lib.parse_toml(text, config_file)


def _recipe_in(text: str) -> str | None:
    for line in text.splitlines():
        if line.startswith("# rnnkit recipe:"):
            return line.split(":", 1)[1].strip()
    return None


def prepare_resume(recipe: Recipe, run_dir: Path) -> RecipeConfig:
    """The config of an interrupted run in `run_dir`, checked to be resumable."""
    if (run_dir / RUN_FILE).exists():
        raise RnnkitError(
            f"{run_dir} holds a completed run; there is nothing to resume"
        )
    config_file = run_dir / CONFIG_FILE
    if not config_file.is_file():
        raise RnnkitError(
            f"{run_dir} is not an rnnkit run directory (no {CONFIG_FILE})"
        )
    recorded = recipe_of(config_file)
    if recorded is not None and recorded != recipe.name:
        raise RnnkitError(
            f"{run_dir} is a run of recipe {recorded!r}, not {recipe.name!r}"
        )
    return config_lib.load_toml(recipe.Config, config_file)


def _claim(run_dir: Path) -> None:
    """Takes the (empty) directory `run_dir` for one run: two runs given the same
    `--run-dir` at the same instant both find it empty; only one creates the file."""
    try:
        (run_dir / CLAIM_FILE).open("x").close()
    except FileExistsError:
        raise RnnkitError(
            f"run directory {run_dir} was just taken by another run; choose another "
            "--run-dir"
        ) from None


def open_run_dir(
    recipe_name: str,
    config: RecipeConfig,
    run_dir: str | Path | None,
    runs_root: str | Path,
    resume: bool,
    header: str | None = None,
) -> Path:
    """Makes the run directory and writes its config.toml; returns its path.

    `run_dir`, or a new one under `runs_root`; it must be empty unless `resume`
    continues the interrupted run in it. `header`: config.toml's comment (default
    `config_header`; it must begin with the recipe line `recipe_of` reads).
    """
    if not run_dir:
        run_dir = claim_new_run_dir(Path(runs_root), recipe_name)
    else:
        run_dir = Path(run_dir)
        if resume:
            # A killed process leaves the temporary file of a write in progress
            # (rnnkit.files names them `.NAME.tmp-PID.SUFFIX`): never a final name,
            # so nothing reads it; the resumed run removes it.
            for stale in run_dir.rglob(".*.tmp-*"):
                if stale.is_file():
                    stale.unlink()
            if not (run_dir / BACKUP_DIR).exists():
                log.info(
                    "no backup in %s; training starts from the first epoch", run_dir
                )
        elif run_dir.exists() and [p.name for p in run_dir.iterdir()] == [CLAIM_FILE]:
            raise RnnkitError(
                f"run directory {run_dir} holds only {CLAIM_FILE}: another run has "
                "claimed it, or one stopped before writing anything; choose another "
                "--run-dir, or delete the folder"
            )
        elif run_dir.exists() and any(run_dir.iterdir()):
            raise RnnkitError(
                f"run directory {run_dir} is not empty; choose another --run-dir, "
                f"or continue it with --resume {run_dir}"
            )
        run_dir.mkdir(parents=True, exist_ok=True)
        if not resume:
            _claim(run_dir)
    write_text(
        run_dir / CONFIG_FILE,
        config_lib.to_toml(config, header or config_header(recipe_name)),
    )
    log.info("run directory: %s", run_dir)
    return run_dir


def trained_anything(run_dir: Path) -> bool:
    """Whether the run in `run_dir` finished an epoch (its history, its backup or its
    model is there), or one of its stages did (`Recipe.prepare`): before that, the
    folder holds nothing a user would keep."""
    stages = run_dir / STAGES_DIR
    return any(
        (run_dir / name).exists() for name in (HISTORY_FILE, BACKUP_DIR, MODEL_FILE)
    ) or (stages.is_dir() and any(trained_anything(s) for s in stages.iterdir()))


def discard_unstarted(run_dir: Path, created: bool) -> bool:
    """Removes what a run that failed before its first epoch wrote to `run_dir` (the
    folder too when the run `created` it), so a failed attempt leaves nothing that
    looks like a run; returns whether it did. A run that trained is kept."""
    if trained_anything(run_dir):
        return False
    remove_run(run_dir, created)
    log.info("the run stopped before its first epoch: %s removed", run_dir)
    return True


def remove_run(run_dir: Path, created: bool) -> None:
    """Removes `run_dir` (when this process `created` it) or everything in it (a
    --run-dir the user made is left as empty as it was)."""
    if created:
        shutil.rmtree(run_dir, ignore_errors=True)
        return
    for path in run_dir.iterdir():
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)


def load_run(
    run_dir: str | Path, load_recipe: Callable[[str], Recipe]
) -> tuple[Recipe, RecipeConfig, keras.Model]:
    """The recipe, config and model of a completed run directory."""
    run_dir = Path(run_dir)
    run_file = run_dir / RUN_FILE
    if not run_file.is_file() and (run_dir / CONFIG_FILE).is_file():
        raise RnnkitError(
            f"{run_dir} is not a completed rnnkit run (no {RUN_FILE}); "
            "resume an interrupted run with `rnnkit run NAME --resume DIR`"
        )
    if not run_file.is_file():
        # Also a run stopped between claiming its directory and writing its config:
        # there is nothing that --resume could continue.
        raise RnnkitError(
            f"{run_dir} is not a completed rnnkit run (no {RUN_FILE}) and holds no "
            f"run to resume (no {CONFIG_FILE}); start the run again"
        )
    try:
        recipe_name = json.loads(run_file.read_text(encoding="utf-8"))["recipe"]
    except (ValueError, KeyError):
        raise RnnkitError(f"{run_file} is damaged (no recipe name)") from None
    recipe = load_recipe(recipe_name)
    config = config_lib.load_toml(recipe.Config, run_dir / CONFIG_FILE)
    return recipe, config, load_model(run_dir / MODEL_FILE)
