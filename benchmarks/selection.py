"""Model selection on the validation split, then the chosen configuration over several
seeds: the protocol every quality benchmark in this folder follows (issue 34).

1. Each candidate configuration trains once, with the first seed. The candidates are
   compared on a validation figure of the epoch that early stopping kept (the epoch
   with the lowest validation loss), never on the test split; an exact tie (accuracy
   on a few thousand examples ties often) goes to the lower validation loss when the
   records hold one.
2. The best candidate trains again with each further seed. Its test figures are
   reported as mean and sample standard deviation over all its seeds.

Finished runs are recorded in `selection.json` in the output folder, so an interrupted
selection resumes where it stopped; a run trained through `train_resumable` records
the CPU models its epochs ran on (`cpus`, in the order first used: a resumed run may
span machines, and its seconds per epoch then mix them). A run with no record
continues from its last finished epoch when its directory holds an interrupted run of
the same config with a backup (`interrupted_run`); otherwise it trains again from the
start, in a fresh directory. Imported by the scripts in this folder.
"""

from __future__ import annotations

import json
import math
import os
import shutil
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

LEDGER = "selection.json"
# The settings key under which a benchmark records each candidate's config.
CANDIDATE_CONFIGS = "configs"


def kept_epoch(history: Sequence[Mapping[str, float]], monitor: str = "val_loss"):
    """The history row of the epoch early stopping restores (lowest `monitor`)."""
    rows = [row for row in history if monitor in row and math.isfinite(row[monitor])]
    if not rows:
        raise ValueError(f"no finite {monitor!r} in the training history")
    return min(rows, key=lambda row: row[monitor])


def mean_std(values: Sequence[float]) -> tuple[float, float]:
    """Mean and sample standard deviation (n - 1; 0.0 for a single value)."""
    n = len(values)
    mean = sum(values) / n
    if n < 2:
        return mean, 0.0
    return mean, math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))


def _ledger(out: Path) -> dict[str, Any]:
    path = out / LEDGER
    return json.loads(path.read_text()) if path.exists() else {}


def _record(out: Path, ledger: dict[str, Any]) -> None:
    path = out / LEDGER
    temporary = path.with_suffix(".tmp")
    temporary.write_text(json.dumps(ledger, indent=1, sort_keys=True))
    os.replace(temporary, path)


def _compatible(recorded: Mapping[str, Any], settings: Mapping[str, Any]) -> bool:
    """Whether runs recorded under `recorded` may be compared with runs made under
    `settings`: the same settings, except that `configs` (one config per candidate,
    where a benchmark records them) may name candidates the ledger has not seen. A
    candidate recorded with another config than it has now is never compatible."""
    if recorded.keys() != settings.keys():
        return False
    for key, value in settings.items():
        if key == CANDIDATE_CONFIGS and isinstance(value, Mapping):
            common = recorded[key].keys() & value.keys()
            if any(recorded[key][name] != value[name] for name in common):
                return False
        elif recorded[key] != value:
            return False
    return True


def _merged(recorded: Mapping[str, Any], settings: Mapping[str, Any]) -> dict:
    """`settings` with the candidate configs of both (see `_compatible`)."""
    merged = dict(settings)
    if isinstance(settings.get(CANDIDATE_CONFIGS), Mapping):
        merged[CANDIDATE_CONFIGS] = {
            **recorded[CANDIDATE_CONFIGS],
            **settings[CANDIDATE_CONFIGS],
        }
    return merged


def interrupted_run(recipe: Any, config: Any, run_dir: Path) -> bool:
    """Whether `run_dir` holds a run of `config` that stopped during training with a
    backup to continue from (`rnnkit.training.runner.run(..., resume=True)`): not
    finished, and its config.toml the same config."""
    from rnnkit.errors import RnnkitError
    from rnnkit.training import run_dir as run_dir_lib

    if not (run_dir / run_dir_lib.BACKUP_DIR).is_dir():
        return False
    try:
        recorded = run_dir_lib.prepare_resume(recipe, run_dir)
    except RnnkitError:
        return False  # finished, or no config written
    return recorded.to_dict() == config.to_dict()


def train_resumable(recipe: Any, config: Any, run_dir: Path, max_minutes: float = 0.0):
    """One selection run through `runner.run`, continued from its backup when
    `run_dir` exists (an interrupted run `resumable` kept), its epoch times recorded
    in the run directory; returns the run's result and its epochs' seconds."""
    from timing import EPOCH_SECONDS, epoch_timer

    from rnnkit.training import runner

    timer = epoch_timer(max_minutes, record=Path(run_dir) / EPOCH_SECONDS)
    result = runner.run(
        recipe,
        config,
        run_dir,
        resume=Path(run_dir).exists(),
        verbose=2,
        callbacks=[timer],
    )
    return result, timer.seconds


def select_then_seeds(
    candidates: Mapping[str, Mapping[str, Any]],
    train: Callable[[str, Mapping[str, Any], int, Path], dict[str, Any]],
    seeds: Sequence[int],
    out: Path,
    criterion: str,
    higher_is_better: bool = True,
    settings: Mapping[str, Any] | None = None,
    resumable: Callable[[str, Mapping[str, Any], int, Path], bool] | None = None,
) -> dict[str, Any]:
    """Runs the protocol above; returns the ledger with `chosen` set.

    `train(name, overrides, seed, run_dir)` trains one run and returns a JSON-able dict
    with at least `validation` (a dict holding `criterion`) and `test` (a dict).
    `run_dir` exists when it holds an interrupted run to continue: when
    `resumable(name, overrides, seed, run_dir)` says so (see `interrupted_run`); any
    other leftover directory is removed first.
    `settings` (JSON-able: the base config the candidates override, or under
    `configs` each candidate's config) is recorded; a ledger recorded with other
    settings is refused, so runs made with different data or epochs are never
    compared. A later call may add candidates: each trains with the first seed and
    joins the comparison (the choice is then made among the candidates of that call).
    """
    from timing import EPOCH_SECONDS, read_epoch_record

    out.mkdir(parents=True, exist_ok=True)
    ledger = _ledger(out)
    settings = json.loads(json.dumps(settings or {}, sort_keys=True))
    recorded = ledger.get("settings", settings)
    if not _compatible(recorded, settings):
        raise SystemExit(
            f"{out / LEDGER} was recorded with other settings (config, --limit, "
            "--epochs or --set); choose another --out"
        )
    ledger["settings"] = _merged(recorded, settings)
    runs = ledger.setdefault("runs", {})

    def one(name: str, seed: int) -> dict[str, Any]:
        key = f"{name}/seed{seed}"
        if key not in runs:
            run_dir = out / f"{name}-seed{seed}"
            # An interrupted run without a record: continued, or started afresh.
            if run_dir.exists() and not (
                resumable is not None
                and resumable(name, candidates[name], seed, run_dir)
            ):
                shutil.rmtree(run_dir)
            runs[key] = train(name, candidates[name], seed, run_dir)
            record = run_dir / EPOCH_SECONDS
            if record.is_file():  # trained through train_resumable
                _, cpus = read_epoch_record(record)
                runs[key]["cpus"] = sorted(set(cpus), key=cpus.index)
            _record(out, ledger)
        return runs[key]

    first = seeds[0]
    validation = {name: one(name, first)["validation"] for name in candidates}
    scores = {name: figures[criterion] for name, figures in validation.items()}
    sign = 1.0 if higher_is_better else -1.0
    chosen = max(
        validation,
        key=lambda name: (
            sign * scores[name],
            -validation[name].get("loss", math.inf) if criterion != "loss" else 0.0,
        ),
    )
    ledger["chosen"] = chosen
    ledger["criterion"] = criterion
    ledger["validation"] = scores
    for seed in seeds[1:]:
        one(chosen, seed)
    ledger["seeds"] = list(seeds)
    _record(out, ledger)
    return ledger


def chosen_runs(ledger: Mapping[str, Any]) -> list[tuple[int, dict[str, Any]]]:
    """(seed, record) of the chosen candidate's runs, in seed order given."""
    return [
        (seed, ledger["runs"][f"{ledger['chosen']}/seed{seed}"])
        for seed in ledger["seeds"]
    ]


def parse_candidates(text: str, candidates: Mapping[str, Any]) -> dict[str, Any]:
    """`--candidates a,b` as {name: overrides}; an unknown name stops the script."""
    names = [name for name in text.split(",") if name]
    unknown = sorted(set(names) - set(candidates))
    if unknown:
        raise SystemExit(
            f"unknown candidates {unknown}; choose from {list(candidates)}"
        )
    return {name: candidates[name] for name in names}


def parse_seeds(text: str) -> list[int]:
    """`--seeds 1337,1,2`: the first selects, the others repeat the choice."""
    return [int(seed) for seed in text.split(",")]


def print_validation(ledger: Mapping[str, Any], width: int, digits: int) -> None:
    """The candidates' validation figures, best first, the chosen one marked."""
    for name, score in sorted(ledger["validation"].items(), key=lambda kv: -kv[1]):
        mark = "  <- chosen" if name == ledger["chosen"] else ""
        print(f"  {name:<{width}} {score:.{digits}f}{mark}")


def print_means(
    rows: Sequence[tuple[int, Mapping[str, Any]]], keys: Sequence[str], digits: int
) -> None:
    """Mean +- sample standard deviation of each test figure over the seeds."""
    for key in keys:
        values = [record["test"][key] for _, record in rows if key in record["test"]]
        if values:
            mean, std = mean_std(values)
            print(
                f"  test {key}: {mean:.{digits}f} +- {std:.{digits}f} "
                f"over {len(values)} seeds"
            )
