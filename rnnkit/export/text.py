"""The translation recipe's text handling as TensorFlow graph ops, for SavedModels that
read and write strings.

`source_ids` does in the graph what `rnnkit.data.parallel_text.tokenize` and a
vocabulary's `encode` do in Python (Unicode normalisation, whitespace, lower case,
punctuation splitting, then word or SentencePiece ids); `target_text` what
`decode` and `detokenize` do. Unicode normalisation and SentencePiece come from
TensorFlow Text, so a SavedModel that uses them needs `import tensorflow_text`
before `tf.saved_model.load` (TF Serving ships those ops).

The regular expressions are Python's translated to RE2: Python's `\\w` is
`[\\p{L}\\p{N}_]`, `\\d` is `\\p{Nd}`, and its whitespace includes the Unicode
separators. tests/export checks both sides against each other on real sentences.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rnnkit._optional import optional_import

# rnnkit.data.parallel_text._TOKEN_PATTERN in RE2.
_WORD = r"[\p{L}\p{N}_]"
TOKEN_PATTERN = (
    rf"\p{{Nd}}+(?:[.,:]\p{{Nd}}+)+|{_WORD}+(?:[-'\x{{2019}}]{_WORD}+)*"
    r"|[^\p{L}\p{N}_\s]"
)
# What Python's str.split() splits at.
WHITESPACE = r"[\s\v\x{1c}-\x{1f}\x{85}\p{Z}]+"
# rnnkit.data.parallel_text._NO_SPACE_BEFORE / _NO_SPACE_AFTER
NO_SPACE_BEFORE = r" ([.,!?;:%)\]}\x{bb}\x{201d}\x{2026}])"
NO_SPACE_AFTER = r"([(\[{\x{bf}\x{a1}\x{ab}\x{201c}]) "


def words(texts: Any, unicode_form: str, lowercase: bool, split_punctuation: bool):
    """Ragged string tokens (batch, None) of a (batch,) string tensor, as
    `rnnkit.data.parallel_text.tokenize`."""
    import tensorflow as tf

    tf_text = optional_import("tensorflow_text")

    texts = tf_text.normalize_utf8(texts, unicode_form)
    texts = tf.strings.strip(tf.strings.regex_replace(texts, WHITESPACE, " "))
    if lowercase:
        texts = tf.strings.lower(texts, encoding="utf-8")
    if split_punctuation:
        texts = tf.strings.regex_replace(texts, TOKEN_PATTERN, r" \0 ")
    return tf.strings.split(texts)


class GraphVocabulary:
    """Token ids from words and text from ids, in the graph, for a word or a
    SentencePiece vocabulary (`rnnkit.data.vocabulary`).

    Decoding joins the pieces without SentencePiece (as its BPE decoding does), so a
    vocabulary that only decodes (`encodes=False`) holds no tokenizer: a SavedModel
    with two SentencePiece tokenizers loads both as one.
    """

    def __init__(
        self,
        tokens: Sequence[str],
        sentencepiece_model: bytes | None,
        encodes: bool = True,
    ):
        import tensorflow as tf

        from rnnkit.data.vocabulary import UNK_ID

        self.tokens = tf.constant(list(tokens))
        self.subword = sentencepiece_model is not None
        self.sentencepiece = None
        self.table = None
        if self.subword and encodes:
            tf_text = optional_import("tensorflow_text")
            self.sentencepiece = tf_text.SentencepieceTokenizer(
                model=sentencepiece_model, out_type=tf.int32
            )
        elif encodes:
            self.table = tf.lookup.StaticHashTable(
                tf.lookup.KeyValueTensorInitializer(
                    self.tokens, tf.range(len(tokens), dtype=tf.int32)
                ),
                default_value=UNK_ID,
            )

    def resources(self) -> list:
        """What a SavedModel must track."""
        return [r for r in (self.sentencepiece, self.table) if r is not None]

    def encode(self, words):
        """Ragged int32 ids (batch, None) of ragged words."""
        import tensorflow as tf

        if self.sentencepiece is not None:
            joined = tf.strings.reduce_join(words, axis=-1, separator=" ")
            return self.sentencepiece.tokenize(joined)
        return tf.ragged.map_flat_values(self.table.lookup, words)

    def decode(self, ids):
        """(batch,) strings of generated ids (batch, steps): up to the end token,
        padding and start tokens dropped, detokenized as
        `rnnkit.data.parallel_text.detokenize`."""
        import tensorflow as tf

        pieces = generated_tokens(self.tokens, ids)
        if self.subword:
            # SentencePiece's decoding of BPE pieces: joined, "\u2581" marks a space.
            texts = tf.strings.reduce_join(pieces, axis=-1, separator="")
            texts = tf.strings.regex_replace(texts, "\u2581", " ")
            texts = tf.strings.strip(tf.strings.regex_replace(texts, r"\s+", " "))
        else:
            texts = tf.strings.reduce_join(pieces, axis=-1, separator=" ")
        return detokenize(texts)


def generated_tokens(tokens, ids):
    """Ragged strings (batch, None): the tokens of generated ids (batch, steps) up to
    the end token, padding and start tokens dropped (the special ids of
    `rnnkit.data.vocabulary`, which the captioning vocabulary shares)."""
    import tensorflow as tf

    from rnnkit.data.vocabulary import END_ID, PAD_ID, START_ID

    ids = tf.cast(ids, tf.int32)
    before_end = tf.equal(tf.cumsum(tf.cast(tf.equal(ids, END_ID), tf.int32), 1), 0)
    keep = before_end & tf.not_equal(ids, PAD_ID) & tf.not_equal(ids, START_ID)
    return tf.gather(tokens, tf.ragged.boolean_mask(ids, keep))


def detokenize(texts):
    """`rnnkit.data.parallel_text.detokenize` of space-joined tokens (batch,):
    no space before closing or after opening punctuation, straight double quotes
    alternately opening (glued to the next token) and closing (glued to the one
    before)."""
    import tensorflow as tf

    texts = tf.strings.regex_replace(texts, r'"\s?([^"]*?)\s?"', r'"\1"')
    quotes = tf.strings.length(texts) - tf.strings.length(
        tf.strings.regex_replace(texts, '"', "")
    )
    unpaired = tf.strings.regex_replace(texts, r'"\s([^"]*)$', r'"\1')
    texts = tf.where(tf.equal(quotes % 2, 1), unpaired, texts)
    texts = tf.strings.regex_replace(texts, NO_SPACE_BEFORE, r"\1")
    return tf.strings.regex_replace(texts, NO_SPACE_AFTER, r"\1")
