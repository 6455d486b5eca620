"""Errors that mean "the input is wrong", not "rnnkit has a bug".

The command-line launcher prints any `RnnkitError` as one line (`Error: ...`) and exits
with status 1, never with a traceback. Recipes raise `DataError` for a missing,
unreadable or malformed data source and `ConfigError` for a value that cannot work.
"""


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
