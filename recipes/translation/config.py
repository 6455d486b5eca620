"""The configuration of the translation recipe.

The typed configuration of the recipe: one dataclass per section, each field with its
default and help text; the command line's options come from the same fields.
"""

from __future__ import annotations

import dataclasses

from rnnkit.data.parallel_text import ANKI_SPA_ENG_URL
from rnnkit.recipe import (
    DataConfig,
    EvaluationConfig,
    RecipeConfig,
    field,
    section,
)
from rnnkit.registry import recurrent_names
from rnnkit.shared_sections import ScheduledTrainConfig, TransformerModelConfig


@dataclasses.dataclass
class TranslationDataConfig(DataConfig):
    format: str = field(
        "anki",
        help="anki: tab-separated pairs (.txt or .zip; data.path unset downloads the "
        "English-Spanish pairs); parallel: one file per language and split, found "
        "by filling {split} and {lang} in data.path.",
        choices=("anki", "parallel"),
    )
    url: str = field(
        ANKI_SPA_ENG_URL, help="Download of the anki pairs (no data.path)."
    )
    source_lang: str = field("en", help="Language translated from.")
    target_lang: str = field("es", help="Language translated into.")
    columns: tuple[str, ...] = field(
        ("en", "es"), help="anki: the language of each tab-separated column."
    )
    train_split: str = field("train", help="parallel: {split} of the training files.")
    validation_split: str = field(
        "val",
        help="parallel: {split} of the validation files ('' cuts them from train).",
    )
    test_split: str = field(
        "test_2016_flickr",
        help="parallel: {split} of the test files ('' cuts them from train).",
    )
    validation_fraction: float = field(
        0.05,
        help="Share of the pairs held out for validation when no file holds them "
        "(anki, or parallel with data.validation_split empty).",
        above=0.0,
        below=0.5,
    )
    test_fraction: float = field(
        0.02,
        help="Share of the pairs held out for testing when no file holds them "
        "(anki, or parallel with data.test_split empty).",
        above=0.0,
        below=0.5,
    )
    split_seed: int = field(
        0,
        help="Seed of the held-out cut (anki, or a parallel split left empty).",
        at_least=0,
    )
    limit: int = field(
        0,
        help="Keep at most this many pairs per split (0 keeps all); quick trials.",
        at_least=0,
    )
    max_length: int = field(
        50,
        help="Drop training/validation pairs longer than this many tokens (0: keep).",
        at_least=0,
    )
    unicode_form: str = field(
        "NFKC", help="Unicode normalisation.", choices=("NFC", "NFKC", "NFD", "NFKD")
    )
    lowercase: bool = field(True, help="Lower-case both languages (BLEU then too).")
    split_punctuation: bool = field(
        True, help="Make punctuation marks tokens of their own."
    )
    tokenizer: str = field(
        "subword",
        help="subword: BPE pieces of the words (SentencePiece, learned on the "
        "training split), so rare words are spelled out; word: whole words, the "
        "rarer ones [UNK].",
        choices=("subword", "word"),
    )
    subword_vocabulary_size: int = field(
        8000,
        help="subword: pieces per language, special tokens included.",
        above=4,
    )
    vocabulary_size: int = field(
        0,
        help="word: most tokens kept per language, special tokens included (0: all).",
        at_least=0,
    )
    min_frequency: int = field(
        2,
        help="word: tokens seen fewer times in training become [UNK].",
        at_least=1,
    )
    skip_empty_lines: bool = field(
        False, help="Drop pairs with an empty sentence instead of stopping."
    )


@dataclasses.dataclass
class TranslationModelConfig(TransformerModelConfig):
    # Declared again: the help names this recipe's fields; num_heads also serves the
    # RNN's multihead attention.
    architecture: str = field(
        "rnn",
        help="rnn: the attentive RNN encoder-decoder (cell_type, embedding_dim, "
        "units, attention, ...); transformer: the Transformer of Vaswani et al. "
        "(model_dim, num_heads, feedforward_dim, norm_first, ...). Both read "
        "encoder_layers, decoder_layers and dropout.",
        choices=("rnn", "transformer"),
    )
    num_heads: int = field(
        4,
        help="Heads of multihead attention, or of every Transformer block (must "
        "divide model_dim).",
        at_least=1,
    )
    max_positions: int = field(
        512,
        help="Transformer, learned positions: positions embedded (later ones share "
        "the last).",
        at_least=1,
    )
    tie_embeddings: bool = field(
        True,
        help="Transformer: the output projection is the transposed target embedding.",
    )
    cell_type: str = field("gru", help="Recurrent cell.", choices=recurrent_names())
    embedding_dim: int = field(128, help="Size of the token embeddings.", at_least=1)
    units: int = field(
        256, help="Units per recurrent layer (per direction).", at_least=1
    )
    encoder_layers: int = field(
        1, help="Stacked encoder layers (RNN layers or Transformer blocks).", at_least=1
    )
    decoder_layers: int = field(
        1, help="Stacked decoder cells (or Transformer blocks).", at_least=1
    )
    bidirectional: bool = field(True, help="Read the source in both directions.")
    attention: str = field(
        "bahdanau",
        help="Attention over the encoder states (none: the plain encoder-decoder).",
        choices=("bahdanau", "dot", "multihead", "none"),
    )
    attention_units: int | None = field(
        None, help="Size of the Bahdanau scoring layer (none: model.units).", at_least=1
    )
    dropout: float = field(
        0.2,
        help="Dropout on embeddings, between layers, output (Transformer: also on "
        "every sublayer's output, the attention weights and the feed-forward layer).",
        at_least=0.0,
        below=1.0,
    )
    input_feeding: bool = field(
        True, help="Feed the previous attention context into the next decoder step."
    )
    reverse_source: bool = field(
        False, help="Read the source backwards (Sutskever et al. 2014)."
    )


# The model fields each architecture reads (the others are left alone).
SHARED_MODEL_FIELDS = ("encoder_layers", "decoder_layers", "dropout", "num_heads")
RNN_MODEL_FIELDS = (
    "cell_type",
    "embedding_dim",
    "units",
    "bidirectional",
    "attention",
    "attention_units",
    "input_feeding",
    "reverse_source",
)
TRANSFORMER_MODEL_FIELDS = (
    "model_dim",
    "feedforward_dim",
    "norm_first",
    "positional_encoding",
    "max_positions",
    "tie_embeddings",
)


@dataclasses.dataclass
class TranslationTrainConfig(ScheduledTrainConfig):
    clipnorm: float = field(
        1.0, help="Clip each gradient to this norm (0: no clip).", at_least=0.0
    )
    label_smoothing: float = field(
        0.0,
        help="Spread this share of each target token's probability evenly over the "
        "vocabulary (0: plain cross-entropy).",
        at_least=0.0,
        below=1.0,
    )


@dataclasses.dataclass
class TranslationEvaluationConfig(EvaluationConfig):
    beam_width: int = field(
        5, help="Hypotheses kept per sentence by beam search.", at_least=1
    )
    n_best: int = field(
        1, help="Hypotheses printed per sentence by predict.", at_least=1
    )
    length_penalty: float = field(
        0.6, help="GNMT length-penalty alpha of beam search (0: none).", at_least=0.0
    )
    max_length_ratio: float = field(
        1.5,
        help="Translations stop after ratio * source tokens + offset tokens.",
        above=0.0,
    )
    max_length_offset: int = field(10, help="See max_length_ratio.", at_least=0)
    decode_batch_size: int = field(64, help="Sentences decoded together.", at_least=1)
    heatmaps: int = field(
        3, help="Attention heatmaps of test sentences in plots/.", at_least=0
    )
    heatmap_heads: str = field(
        "mean",
        help="Transformer: heatmaps of the last block's cross-attention averaged "
        "over the heads, or also one per head (each).",
        choices=("mean", "each"),
    )


@dataclasses.dataclass
class TranslationConfig(RecipeConfig):
    data: TranslationDataConfig = section(TranslationDataConfig, "Sentence pairs.")
    model: TranslationModelConfig = section(
        TranslationModelConfig, "The encoder-decoder."
    )
    train: TranslationTrainConfig = section(
        TranslationTrainConfig, "The training loop.", epochs=10, patience=3
    )
    evaluation: TranslationEvaluationConfig = section(
        TranslationEvaluationConfig, "Decoding and scoring."
    )
