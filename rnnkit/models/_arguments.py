"""Argument checks the model constructors share."""

from __future__ import annotations


def positive_int(name, value):
    """`value`, or a `ValueError` naming the argument when it is not an int > 0."""
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise ValueError(
            f"Argument `{name}` must be a positive integer, received {name}={value!r}."
        )
    return value
