"""rnnkit.training.run_dir: claiming, resuming and reading back a run directory.

A whole run that writes one, is interrupted and resumed is in test_runner.py; here, the
refusals, each before anything is trained."""

from __future__ import annotations

import datetime
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rnnkit import config as config_lib
from rnnkit.errors import DataError, RnnkitError, run_dir_of
from rnnkit.training import run_dir, runner
from tests.stock_support import ROOT
from tests.training.test_runner import InterruptAt, ToyConfig, ToyRecipe


class _FrozenClock:
    """Stands for the `datetime` module: every claim happens in the same second."""

    class datetime:  # noqa: N801 - the name the module under test looks up
        @staticmethod
        def now() -> datetime.datetime:
            return datetime.datetime(2024, 5, 17, 9, 30, 0)


def test_a_new_run_dir_is_claimed_with_its_config_and_a_header(tmp_path):
    claimed = run_dir.open_run_dir("toy", ToyConfig(), None, tmp_path, resume=False)
    assert claimed.parent == tmp_path / "toy"
    config_file = claimed / run_dir.CONFIG_FILE
    assert run_dir.recipe_of(config_file) == "toy"
    assert config_file.read_text().startswith(
        "# " + run_dir.config_header("toy").replace("\n", "\n# ")
    )
    # The same second again: a suffix, never the same folder.
    again = run_dir.open_run_dir("toy", ToyConfig(), None, tmp_path, resume=False)
    assert again != claimed and again.parent == claimed.parent


def test_read_run_config_gives_the_header_and_the_tables_of_one_read(tmp_path):
    claimed = run_dir.open_run_dir("toy", ToyConfig(), None, tmp_path, resume=False)
    recipe, tables = run_dir.read_run_config(claimed / run_dir.CONFIG_FILE)
    assert recipe == "toy"
    assert tables == config_lib.read_toml(claimed / run_dir.CONFIG_FILE)
    assert tables and "# rnnkit" not in str(tables)
    assert run_dir.read_run_config(tmp_path / "none.toml") == (None, {})
    (tmp_path / "bad.toml").write_text("# rnnkit recipe: toy\n[data\n")
    with pytest.raises(config_lib.ConfigError, match="bad.toml is not valid TOML"):
        run_dir.read_run_config(tmp_path / "bad.toml")


def test_claims_of_one_name_in_one_instant_get_different_directories(
    tmp_path, monkeypatch
):
    monkeypatch.setattr(run_dir, "datetime", _FrozenClock)
    # Each claim sees the name free, as two processes do when both look before
    # either has created the directory: only the mkdir itself may decide.
    monkeypatch.setattr(Path, "exists", lambda self: False)
    first = run_dir.open_run_dir("toy", ToyConfig(), None, tmp_path, resume=False)
    second = run_dir.open_run_dir("toy", ToyConfig(), None, tmp_path, resume=False)
    assert first == tmp_path / "toy" / "20240517-093000"
    assert second == tmp_path / "toy" / "20240517-093000-2"


_CLAIMANT = """
import datetime, sys, time
from pathlib import Path
from rnnkit.config import RecipeConfig
from rnnkit.training import run_dir

class Clock:
    class datetime:
        now = staticmethod(lambda: datetime.datetime(2024, 5, 17, 9, 30, 0))

run_dir.datetime = Clock
root, ready, go = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])
ready.touch()
while not go.exists():
    time.sleep(0.001)
print(run_dir.open_run_dir("toy", RecipeConfig(), None, root, resume=False))
"""


def test_runs_started_together_claim_distinct_directories(tmp_path):
    go = tmp_path / "go"
    ready = [tmp_path / f"ready-{index}" for index in range(6)]
    claimants = [
        subprocess.Popen(
            [sys.executable, "-c", _CLAIMANT, str(tmp_path / "runs"), str(r), str(go)],
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            stdout=subprocess.PIPE,
            text=True,
        )
        for r in ready
    ]
    deadline = time.monotonic() + 60
    while not all(r.exists() for r in ready) and time.monotonic() < deadline:
        time.sleep(0.01)
    go.touch()  # the barrier: all six claim the same name at once
    claimed = [claimant.communicate(timeout=60)[0].strip() for claimant in claimants]
    assert all(claimant.returncode == 0 for claimant in claimants)
    assert len(set(claimed)) == 6, claimed
    assert {Path(folder).name for folder in claimed} == {
        "20240517-093000",
        *(f"20240517-093000-{suffix}" for suffix in range(2, 7)),
    }
    for folder in claimed:
        assert (Path(folder) / run_dir.CONFIG_FILE).is_file()


def test_a_given_directory_found_empty_by_two_runs_is_taken_by_one(
    tmp_path, monkeypatch
):
    given = tmp_path / "mine"
    given.mkdir()
    # Both runs look before either has written anything, as two processes given the
    # same --run-dir at the same instant do: only the claim itself may decide.
    real_iterdir = Path.iterdir
    monkeypatch.setattr(
        Path, "iterdir", lambda self: iter(()) if self == given else real_iterdir(self)
    )
    first = run_dir.open_run_dir("toy", ToyConfig(), given, "runs", resume=False)
    assert first == given and (given / run_dir.CONFIG_FILE).is_file()
    config_text = (given / run_dir.CONFIG_FILE).read_text()
    with pytest.raises(RnnkitError, match="just taken by another run.*--run-dir"):
        run_dir.open_run_dir("toy", ToyConfig(), given, "runs", resume=False)
    assert (given / run_dir.CONFIG_FILE).read_text() == config_text


def test_a_directory_holding_only_a_claim_names_what_to_do(tmp_path):
    (tmp_path / run_dir.CLAIM_FILE).touch()
    with pytest.raises(RnnkitError, match="holds only .claimed.*choose another"):
        run_dir.open_run_dir("toy", ToyConfig(), tmp_path, "runs", resume=False)


def test_a_used_directory_is_refused_unless_resumed(tmp_path):
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(RnnkitError, match="not empty.*--resume"):
        run_dir.open_run_dir("toy", ToyConfig(), tmp_path, "runs", resume=False)
    resumed = run_dir.open_run_dir("toy", ToyConfig(), tmp_path, "runs", resume=True)
    assert resumed == tmp_path and (tmp_path / "notes.txt").exists()


def test_resume_refuses_what_is_not_an_interrupted_run_of_this_recipe(tmp_path):
    with pytest.raises(RnnkitError, match="not an rnnkit run directory"):
        run_dir.prepare_resume(ToyRecipe(), tmp_path)
    other = tmp_path / "other"
    run_dir.open_run_dir("other", ToyConfig(), other, "runs", resume=False)
    with pytest.raises(RnnkitError, match="a run of recipe 'other', not 'toy'"):
        run_dir.prepare_resume(ToyRecipe(), other)
    mine = run_dir.open_run_dir("toy", ToyConfig(), tmp_path / "mine", "", False)
    assert run_dir.prepare_resume(ToyRecipe(), mine) == ToyConfig()


def test_only_a_completed_run_is_loaded(tmp_path):
    # Claimed, then stopped before its config was written: nothing to resume.
    (tmp_path / run_dir.CLAIM_FILE).write_text("")
    with pytest.raises(RnnkitError) as error:
        run_dir.load_run(tmp_path, lambda name: ToyRecipe())
    assert "not a completed rnnkit run" in str(error.value)
    assert "no run to resume (no config.toml)" in str(error.value)
    assert "--resume" not in str(error.value)
    (tmp_path / run_dir.CONFIG_FILE).write_text("")
    with pytest.raises(RnnkitError, match="not a completed rnnkit run.*--resume"):
        run_dir.load_run(tmp_path, lambda name: ToyRecipe())
    (tmp_path / run_dir.RUN_FILE).write_text(json.dumps({"status": "completed"}))
    with pytest.raises(RnnkitError, match="damaged"):
        run_dir.load_run(tmp_path, lambda name: ToyRecipe())
    with pytest.raises(RnnkitError, match="no model file"):
        run_dir.load_model(tmp_path / run_dir.MODEL_FILE)


def test_history_is_read_as_numbers(tmp_path):
    path = tmp_path / run_dir.HISTORY_FILE
    assert run_dir.read_history(path) == []
    path.write_text("epoch,loss\n1,0.5\n2,0.25\n")
    assert run_dir.read_history(path) == [
        {"epoch": 1.0, "loss": 0.5},
        {"epoch": 2.0, "loss": 0.25},
    ]


# -- A run that fails before its first epoch leaves nothing behind (issue 57, point 12)


class _FailingRecipe(ToyRecipe):
    """The toy recipe whose data loading raises `error`."""

    def __init__(self, error: Exception):
        self.error = error

    def load_data(self, config):
        raise self.error


class _FailAtEpoch:
    """A callback that raises RuntimeError when epoch `epoch` (0-based) begins."""

    def __new__(cls, epoch):
        import keras

        class Fail(keras.callbacks.Callback):
            def on_epoch_begin(self, index, logs=None):
                if index == epoch:
                    raise RuntimeError(f"failed at epoch {index + 1}")

        return Fail()


@pytest.mark.parametrize(
    "error", [DataError("no data here"), RuntimeError("a bug")], ids=["data", "bug"]
)
def test_a_run_that_fails_before_training_leaves_no_folder(tmp_path, error):
    with pytest.raises(type(error)) as caught:
        runner.run(_FailingRecipe(error), ToyConfig(), runs_root=tmp_path, verbose=0)
    assert list((tmp_path / "toy").iterdir()) == []
    # An unexpected error's traceback is not filed under a folder that is gone.
    assert run_dir_of(caught.value) is None


def test_a_given_run_dir_is_left_as_it_was(tmp_path):
    made = tmp_path / "mine"
    made.mkdir()
    with pytest.raises(DataError):
        runner.run(_FailingRecipe(DataError("no")), ToyConfig(), made, verbose=0)
    assert made.is_dir() and list(made.iterdir()) == []
    with pytest.raises(DataError):
        runner.run(
            _FailingRecipe(DataError("no")), ToyConfig(), tmp_path / "new", verbose=0
        )
    assert not (tmp_path / "new").exists()


def test_a_run_that_fails_after_an_epoch_stays_unfinished(tmp_path):
    folder = tmp_path / "run"
    with pytest.raises(RuntimeError, match="epoch 2") as caught:
        runner.run(
            ToyRecipe(), ToyConfig(), folder, verbose=0, callbacks=[_FailAtEpoch(1)]
        )
    assert (folder / run_dir.CONFIG_FILE).is_file()
    assert (folder / run_dir.HISTORY_FILE).is_file()
    assert not (folder / run_dir.RUN_FILE).exists()
    assert run_dir_of(caught.value) == folder  # its traceback goes there


def test_an_interrupted_run_keeps_its_folder_for_resume(tmp_path):
    folder = tmp_path / "run"
    with pytest.raises(KeyboardInterrupt):
        runner.run(
            ToyRecipe(), ToyConfig(), folder, verbose=0, callbacks=[InterruptAt(0)]
        )
    assert (folder / run_dir.CONFIG_FILE).is_file()
