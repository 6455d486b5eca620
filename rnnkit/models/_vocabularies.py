"""The source and target vocabularies of the translation models."""

from __future__ import annotations

from collections.abc import Sequence

from rnnkit.models._arguments import positive_int


def vocabulary(name, value):
    """(size, tokens or None) from a token list or a vocabulary size."""
    if isinstance(value, int) and not isinstance(value, bool):
        return positive_int(name, value), None
    if isinstance(value, Sequence) and not isinstance(value, str) and value:
        tokens = [str(token) for token in value]
        return len(tokens), tokens
    raise ValueError(
        f"Argument `{name}` must be a vocabulary size or a non-empty list of "
        f"tokens, received {name}={value!r:.80}."
    )


class SourceTargetVocabularies:
    """Mixin of the encoder-decoders: `source_vocabulary` and `target_vocabulary`
    given as token lists (id = position, saved with the model) or as sizes.

    `_set_vocabularies` sets `source_vocabulary_size` and `source_tokens` (None for
    a size), and the same for the target; `_vocabulary_config` gives them back as
    the constructor's arguments, for `get_config`.
    """

    def _set_vocabularies(self, source_vocabulary, target_vocabulary):
        self.source_vocabulary_size, self.source_tokens = vocabulary(
            "source_vocabulary", source_vocabulary
        )
        self.target_vocabulary_size, self.target_tokens = vocabulary(
            "target_vocabulary", target_vocabulary
        )

    def _vocabulary_config(self):
        return {
            "source_vocabulary": self.source_tokens or self.source_vocabulary_size,
            "target_vocabulary": self.target_tokens or self.target_vocabulary_size,
        }
