"""Errors that mean "the input is wrong", not "rnnkit has a bug".

The command-line launcher prints any `RnnkitError` as one line (`Error: ...`) and exits
with status 1, never with a traceback. Recipes raise `DataError` for a missing,
unreadable or malformed data source and `ConfigError` for a value that cannot work.
"""

from __future__ import annotations

from pathlib import Path

# The run directory an unexpected exception happened in, as an attribute of the
# exception: where the launcher writes its traceback (rnnkit/cli/_common.py).
_RUN_DIR = "rnnkit_run_dir"


def mark_run_dir(error: BaseException, run_dir: Path) -> None:
    """Records on `error` that it ended the run writing `run_dir`."""
    setattr(error, _RUN_DIR, Path(run_dir))


def run_dir_of(error: BaseException) -> Path | None:
    """The run directory `mark_run_dir` recorded on `error`, if any."""
    return getattr(error, _RUN_DIR, None)


class RnnkitError(Exception):
    """Base class: bad input a user can fix; the message says what and how."""


class ConfigError(RnnkitError, ValueError):
    """An unknown key, a wrong type, or a value outside its choices or range."""


class DataError(RnnkitError, ValueError):
    """A data source that is missing, unreadable or malformed."""


class RecipeNotFoundError(RnnkitError, LookupError):
    """No installed recipe has the requested name."""


class TrainingError(RnnkitError, RuntimeError):
    """Training could not produce a usable model (for example, the loss became NaN)."""


class ClusterError(RnnkitError, RuntimeError):
    """A chief or worker of a distributed search that cannot reach the other in time."""
