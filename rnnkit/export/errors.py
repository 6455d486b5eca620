"""The export's one error: a model or a request that cannot be exported as asked."""

from __future__ import annotations


class ExportError(ValueError):
    """A model, format or output path that cannot be exported as asked; the message
    says why and what to do instead."""
