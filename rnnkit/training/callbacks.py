"""The callbacks of every training run (`runner_callbacks`): NaN stop, early stopping,
the time budget (`train.max_minutes`), the backup that `--resume` continues, the
random and early-stopping state the backup leaves out (`resume_state_callback`),
TensorBoard and history.csv.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rnnkit.files import atomic_path, write_csv, write_json
from rnnkit.recipe import RecipeConfig
from rnnkit.training.run_dir import BACKUP_DIR, HISTORY_FILE, TENSORBOARD_DIR

if TYPE_CHECKING:
    import keras

log = logging.getLogger("rnnkit")


def history_callback(
    path: Path, rows: list[dict[str, float]]
) -> keras.callbacks.Callback:
    import keras

    class HistoryFile(keras.callbacks.Callback):
        """Rewrites history.csv after every epoch, keeping the rows of earlier runs."""

        def on_epoch_end(self, epoch: int, logs: dict | None = None) -> None:
            row = {"epoch": float(epoch + 1)}
            row.update({k: float(v) for k, v in (logs or {}).items()})
            rows[:] = [r for r in rows if r["epoch"] < epoch + 1] + [row]
            write_csv(path, rows)

    return HistoryFile()


def time_budget_callback(
    minutes: float, clock: Callable[[], float] | None = None
) -> keras.callbacks.Callback:
    """Stops training at the first batch that ends `minutes` after training began (by
    `clock`, default `time.monotonic`); Keras then validates the epoch under way and
    ends it, and early stopping (when on) restores its best weights as at any other
    end."""
    import time

    import keras

    clock = clock or time.monotonic

    class TimeBudget(keras.callbacks.Callback):
        def on_train_begin(self, logs: dict | None = None) -> None:
            self.deadline = clock() + 60.0 * minutes
            self.stopped_in: int | None = None
            self.epoch = 0

        def on_epoch_begin(self, epoch: int, logs: dict | None = None) -> None:
            self.epoch = epoch

        def on_train_batch_end(self, batch: int, logs: dict | None = None) -> None:
            if self.stopped_in is None and clock() >= self.deadline:
                self.model.stop_training = True
                self.stopped_in = self.epoch

        def on_train_end(self, logs: dict | None = None) -> None:
            if self.stopped_in is not None:
                log.info(
                    "train.max_minutes: stopped after %g minutes of training, in "
                    "epoch %d",
                    minutes,
                    self.stopped_in + 1,
                )

    return TimeBudget()


RESUME_STATE_FILE = "resume_state.json"  # in the backup folder
# Its name in runs interrupted before 2026-11-28, still read when resuming them.
_OLD_RESUME_STATE_FILE = "random_state.json"


def resume_state_callback(
    path: Path, train_data: Any, early_stopping: Any = None
) -> keras.callbacks.Callback:
    """Saves, beside `BackupAndRestore`'s backup, what it leaves out: the state of
    the random streams of training and of early stopping. A resumed run then continues
    them where they stood; without this it replays the masks (dropout, recurrent
    dropout) and batch orders of its first epochs, so that those epochs' training loss
    reads low and the model sees those draws twice, and its early stopping starts
    counting afresh.

    - The seed generators of the model's layers (dropout masks; every rnnkit layer
      draws from its own): their states are not in the backup's weights. Written
      after each epoch with the epoch's number, the previous epoch's kept beside them
      (the backup falls back to the previous epoch's weights when the last are
      damaged), and restored only into a backup of the same epoch. Not saved: Keras's
      global generator (`keras.random.*` with `seed=None`).
    - A `tf.data` training set that reshuffles each epoch (arrays become one in
      `training_set`): each iterator taken from it draws the next order, so a run
      resumed after epoch k first takes as many as `fit` had taken on one device
      (`_keras_private.fit_iterators_per_epoch`; no elements are read). `train_data`
      None (the multi-worker loop): orders start again.
    - `early_stopping`'s count of epochs without improvement, its best loss and the
      best epoch's weights (`best.<epoch>.npz` beside the state), which it resets when
      training begins: else a run resumed after its best epoch would stop later and
      restore the best of the resumed epochs only.
    Must come after `BackupAndRestore` and `early_stopping` among the callbacks; a
    test compares a resumed run's history and test figures with an uninterrupted
    one's."""
    import keras
    import numpy as np

    from rnnkit import _keras_private

    def states(model: keras.Model) -> list[Any]:
        return [v for v in model.variables if v.name == "seed_generator_state"]

    class ResumeState(keras.callbacks.Callback):
        def __init__(self):
            super().__init__()
            self.last: dict[str, Any] = {}  # the entry written last (or restored)

        def on_epoch_end(self, epoch: int, logs: dict | None = None) -> None:
            if not path.parent.is_dir():  # BackupAndRestore writes the folder
                return
            saved = self.last
            current = {
                "epoch": epoch + 1,
                "seed_generators": [
                    np.asarray(v.numpy()).tolist() for v in states(self.model)
                ],
            }
            if early_stopping is not None:
                current["early_stopping"] = self._early_stopping_state(epoch, saved)
            write_json(path, {**current, "previous": saved})
            self.last = current
            kept = {
                entry.get("early_stopping", {}).get("weights")
                for entry in (current, saved)
            }
            for old in path.parent.glob("best.*.npz"):
                if old.name not in kept:
                    old.unlink()

        def _early_stopping_state(self, epoch: int, saved: dict) -> dict[str, Any]:
            weights = saved.get("early_stopping", {}).get("weights")
            if early_stopping.best_weights is not None and (
                early_stopping.best_epoch == epoch or weights is None
            ):
                weights = f"best.{early_stopping.best_epoch + 1}.npz"
                with atomic_path(path.parent / weights) as temporary:
                    with open(temporary, "wb") as handle:
                        np.savez(handle, *early_stopping.best_weights)
            best = early_stopping.best
            return {
                "wait": int(early_stopping.wait),
                "best": None if best is None else float(best),
                "best_epoch": int(early_stopping.best_epoch),
                "weights": weights,
            }

        def _restore_early_stopping(self, state: dict[str, Any]) -> None:
            early_stopping.wait = state["wait"]
            early_stopping.best = state["best"]
            early_stopping.best_epoch = state["best_epoch"]
            if state["weights"] is not None:
                with np.load(path.parent / state["weights"]) as arrays:
                    early_stopping.best_weights = [
                        arrays[f"arr_{i}"] for i in range(len(arrays.files))
                    ]

        def on_train_begin(self, logs: dict | None = None) -> None:
            epoch = _keras_private.initial_epoch(self.model)
            if not epoch:
                return
            saved = read_resume_state(path)
            variables = states(self.model)
            for entry in (saved, saved.get("previous") or {}):
                values = entry.get("seed_generators", ())
                if entry.get("epoch") == epoch and len(values) == len(variables):
                    for variable, value in zip(variables, values, strict=True):
                        variable.assign(np.asarray(value, dtype=variable.dtype))
                    if early_stopping is not None and "early_stopping" in entry:
                        self._restore_early_stopping(entry["early_stopping"])
                    self.last = {k: v for k, v in entry.items() if k != "previous"}
                    break
            else:
                log.warning(
                    "the backup holds no random state of epoch %d: the resumed "
                    "epochs draw the first epochs' dropout masks again",
                    epoch,
                )
            if hasattr(train_data, "as_numpy_iterator"):  # a tf.data.Dataset
                per_epoch = _keras_private.fit_iterators_per_epoch(train_data)
                for _ in range(epoch * (per_epoch or 0)):
                    iter(train_data)

    return ResumeState()


def read_resume_state(path: Path) -> dict[str, Any]:
    import json

    for candidate in (path, path.with_name(_OLD_RESUME_STATE_FILE)):
        try:
            return json.loads(candidate.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
    return {}


def runner_callbacks(
    config: RecipeConfig,
    run_dir: Path | None,
    history_rows: list[dict[str, float]],
    extra: Sequence[keras.callbacks.Callback] = (),
    train_data: Any = None,
) -> list[keras.callbacks.Callback]:
    import keras

    callbacks: list[keras.callbacks.Callback] = [keras.callbacks.TerminateOnNaN()]
    early_stopping = None
    if config.train.patience > 0:
        early_stopping = keras.callbacks.EarlyStopping(
            monitor="val_loss",
            patience=config.train.patience,
            restore_best_weights=True,
        )
        callbacks.append(early_stopping)
    if config.train.max_minutes > 0:
        callbacks.append(time_budget_callback(config.train.max_minutes))
    if run_dir is not None:
        callbacks += [
            keras.callbacks.BackupAndRestore(
                str(run_dir / BACKUP_DIR), double_checkpoint=True
            ),
            resume_state_callback(
                run_dir / BACKUP_DIR / RESUME_STATE_FILE, train_data, early_stopping
            ),
            keras.callbacks.TensorBoard(
                log_dir=str(run_dir / TENSORBOARD_DIR), write_graph=False
            ),
            history_callback(run_dir / HISTORY_FILE, history_rows),
        ]
    return callbacks + list(extra)
