"""Choosing and running named checks (no Keras import: the recipe checks load it
only when they run)."""

from __future__ import annotations


def refuse_unknown_checks(names, valid) -> None:
    """A ValueError naming the check names not in `valid`, and the valid ones."""
    unknown = sorted(set(names) - set(valid))
    if unknown:
        raise ValueError(
            f"unknown check(s) {', '.join(unknown)}; choose from {', '.join(valid)}"
        )


def run_checks(pairs) -> list[str]:
    """Runs (name, check) pairs in order; returns the names of those that ran."""
    for _, check in pairs:
        check()
    return [name for name, _ in pairs]
