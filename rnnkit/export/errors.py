"""The error of an export that cannot be done: which model, which format, why."""

from __future__ import annotations

from rnnkit.errors import RnnkitError


class ExportError(RnnkitError, ValueError):
    """A model (or one of its operations) that a format cannot carry; the one-line
    message says what and what to do instead."""
