"""The translation SavedModel's text graph ops against the recipe's Python text code."""

from __future__ import annotations

import gzip
import random

import tensorflow as tf

from rnnkit.data.parallel_text import TextOptions, detokenize, tokenize
from rnnkit.export import text
from tests.shared_data import SHARED_DATA, require


def sentences() -> list[str]:
    lines = []
    for language in ("de", "en"):
        path = require(SHARED_DATA / "translation" / f"multi30k_val.{language}.gz")
        with gzip.open(path, "rt", encoding="utf-8") as handle:
            lines += handle.read().splitlines()[:500]
    return [
        *lines,
        "  Hello,   WORLD!  ",
        "Ça coûte 1,000.50 € — «vraiment»?",
        "don't t-shirt 2:30 ¿Qué? ¡Sí!",
        "a\u00a0b\u2028c\u200bd ﬁne",
        "",
    ]


def test_graph_words_are_the_python_tokens():
    lines = sentences()
    options = TextOptions()
    graph = text.words(tf.constant(lines), "NFKC", True, True).to_list()
    for line, tokens in zip(lines, graph, strict=True):
        assert [t.decode() for t in tokens] == tokenize(line, options), line


def test_graph_detokenize_is_the_python_detokenize():
    rng = random.Random(0)
    pieces = ["a", "bb", '"', ".", ",", "(", ")", "¿", "?", "«", "»", "“", "”", "…"]
    token_lists = [
        [rng.choice(pieces) for _ in range(rng.randint(0, 9))] for _ in range(2000)
    ]
    token_lists += [tokenize(line, TextOptions()) for line in sentences()]
    joined = tf.constant([" ".join(tokens) for tokens in token_lists])
    results = text.detokenize(joined).numpy()
    for tokens, result in zip(token_lists, results, strict=True):
        assert result.decode() == detokenize(tokens), tokens
