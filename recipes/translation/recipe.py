"""Translation: an RNN encoder-decoder with attention, decoded by beam search.

`rnnkit run translation` trains `rnnkit.models.EncoderDecoder` (a bidirectional rnnkit
GRU encoder, a GRU decoder with Bahdanau attention and input feeding, teacher forcing)
on the English-Spanish Anki/Tatoeba pairs or on local parallel files such as Multi30k,
then translates the test split with greedy and beam search and scores it with
sacreBLEU (BLEU and chrF on detokenised text). Token accuracy and perplexity are
measured on the validation split. Baselines on the same sentences: copying the source
(BLEU, chrF) and a unigram model of the target language (accuracy, perplexity).

The module stays light: TensorFlow, Keras and sacrebleu are imported inside the
methods, because `rnnkit list` imports every recipe module to read its summary.
"""

from __future__ import annotations

import dataclasses
import logging
import math
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

from rnnkit.data.parallel_text import ANKI_SPA_ENG_URL
from rnnkit.recipe import (
    ConfigError,
    DataConfig,
    EvaluationConfig,
    Metrics,
    ModelConfig,
    Recipe,
    RecipeConfig,
    TrainConfig,
    field,
    section,
)

if TYPE_CHECKING:
    import keras
    import keras_tuner
    import numpy as np
    from rnnkit_recipes.translation.data import TranslationData

    from rnnkit.decoding import SearchResult

log = logging.getLogger("rnnkit")


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
        help="Share of a single-file corpus held out for validation.",
        above=0.0,
        below=0.5,
    )
    test_fraction: float = field(
        0.02,
        help="Share of a single-file corpus held out for testing.",
        above=0.0,
        below=0.5,
    )
    split_seed: int = field(
        0, help="Seed of the split of a single-file corpus.", at_least=0
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
class TranslationModelConfig(ModelConfig):
    cell_type: str = field("gru", help="Recurrent cell.", choices=("gru", "lstm"))
    embedding_dim: int = field(128, help="Size of the token embeddings.", at_least=1)
    units: int = field(
        256, help="Units per recurrent layer (per direction).", at_least=1
    )
    encoder_layers: int = field(1, help="Stacked encoder layers.", at_least=1)
    decoder_layers: int = field(1, help="Stacked decoder cells.", at_least=1)
    bidirectional: bool = field(True, help="Read the source in both directions.")
    attention: str = field(
        "bahdanau",
        help="Attention over the encoder states (none: the plain encoder-decoder).",
        choices=("bahdanau", "dot", "multihead", "none"),
    )
    attention_units: int | None = field(
        None, help="Size of the Bahdanau scoring layer (none: model.units).", at_least=1
    )
    num_heads: int = field(4, help="Heads of multihead attention.", at_least=1)
    dropout: float = field(
        0.2,
        help="Dropout on embeddings, between layers, output.",
        at_least=0.0,
        below=1.0,
    )
    input_feeding: bool = field(
        True, help="Feed the previous attention context into the next decoder step."
    )
    reverse_source: bool = field(
        False, help="Read the source backwards (Sutskever et al. 2014)."
    )


@dataclasses.dataclass
class TranslationTrainConfig(TrainConfig):
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


class TranslationRecipe(Recipe):
    """Attentive RNN encoder-decoder translating sentences."""

    name = "translation"
    summary = (
        "Translate sentences (Anki en-es, Multi30k de-en): rnnkit GRU/LSTM "
        "encoder-decoder with attention, beam search, sacreBLEU"
    )
    Config = TranslationConfig
    predict_options: ClassVar[dict[str, str]] = {
        "beam": "evaluation.beam_width",
        "n-best": "evaluation.n_best",
    }

    def load_data(self, config: TranslationConfig) -> TranslationData:
        from rnnkit_recipes.translation import data

        _check(config)
        return data.load(config)

    def build_model(
        self, config: TranslationConfig, data: TranslationData
    ) -> keras.Model:
        import keras

        from rnnkit.data.parallel_text import PAD_ID
        from rnnkit.losses import SparseLabelSmoothingCrossentropy
        from rnnkit.models.encoder_decoder import EncoderDecoder

        _check(config)
        # The model section's fields are the constructor's arguments, name for name.
        model = EncoderDecoder(
            data.source_vocabulary.tokens,
            data.target_vocabulary.tokens,
            seed=config.train.seed,
            **dataclasses.asdict(config.model),
        )
        model.build()
        model.compile(
            optimizer=keras.optimizers.Adam(
                config.train.learning_rate, clipnorm=config.train.clipnorm or None
            ),
            loss=SparseLabelSmoothingCrossentropy(
                config.train.label_smoothing, from_logits=True, ignore_class=PAD_ID
            ),
        )
        return model

    def search_space(
        self, hp: keras_tuner.HyperParameters, config: TranslationConfig
    ) -> TranslationConfig:
        return config.with_values(
            {
                "model.cell_type": hp.Choice("cell_type", ["gru", "lstm"]),
                "model.units": hp.Choice("units", [128, 256, 512]),
                "model.embedding_dim": hp.Choice("embedding_dim", [64, 128, 256]),
                "model.encoder_layers": hp.Int("encoder_layers", 1, 2),
                "model.decoder_layers": hp.Int("decoder_layers", 1, 2),
                "model.attention": hp.Choice(
                    "attention", ["bahdanau", "dot", "multihead"]
                ),
                "model.dropout": hp.Choice("dropout", [0.0, 0.2, 0.4]),
                "train.learning_rate": hp.Float(
                    "learning_rate", 3e-4, 3e-3, sampling="log"
                ),
            }
        )

    def evaluate(
        self, model: keras.Model, data: TranslationData, config: TranslationConfig
    ) -> Metrics:
        import sacrebleu

        from rnnkit.data.parallel_text import UNK, count_unknown

        _check_vocabularies(model, data, config)
        validation = teacher_forced_figures(model, data.validation)
        unigram = unigram_figures(
            data.train, data.validation, len(data.target_vocabulary)
        )
        sources = [source for source, _ in data.test_pairs]
        references = [_reference(t, data) for _, t in data.test_pairs]
        lowercase = data.text_options.lowercase
        bleu = sacrebleu.metrics.BLEU(lowercase=lowercase)
        chrf = sacrebleu.metrics.CHRF(lowercase=lowercase)

        def scores(hypotheses: list[str], suffix: str = "") -> dict[str, float]:
            return {
                f"bleu{suffix}": bleu.corpus_score(hypotheses, [references]).score,
                f"chrf{suffix}": chrf.corpus_score(hypotheses, [references]).score,
            }

        beam = translate(model, sources, data, config, beam_width=None)
        greedy = translate(model, sources, data, config, beam_width=1)
        model_row = {
            **scores(beam),
            **scores(greedy, "_greedy"),
            **validation,
            "unknown_outputs": float(count_unknown(h.split() for h in beam)),
        }
        log.info(
            "%d of %d beam translations hold the unknown token %s",
            model_row["unknown_outputs"], len(beam), UNK,
        )  # fmt: skip
        log.info("sacreBLEU signature: %s", bleu.get_signature())
        log.info("chrF signature:      %s", chrf.get_signature())
        for source, reference, hypothesis in zip(
            sources[:3], references[:3], beam[:3], strict=True
        ):
            log.info("  source:    %s\n  reference: %s\n  beam:      %s",
                     source, reference, hypothesis)  # fmt: skip
        copied = [_reference(s, data) for s in sources]
        return {
            "model": model_row,
            "copy_source": scores(copied),
            "unigram": unigram,
        }

    def predict(
        self, model: keras.Model, inputs: Sequence[str], config: TranslationConfig
    ) -> list[str]:
        import numpy as np
        from rnnkit_recipes.translation.data import text_options

        from rnnkit.data.parallel_text import vocabulary_class
        from rnnkit.data.text import read_inputs

        sentences = read_inputs(
            inputs, "give a sentence to translate, or a file of sentences"
        )
        # The vocabularies saved with the model, not those of today's data; a
        # subword vocabulary's pieces define its tokenizer.
        kind = vocabulary_class(_saved_tokenizer(model, config))
        source_vocabulary = kind(model.source_tokens)
        target_vocabulary = kind(model.target_tokens)
        options = text_options(config)
        n_best = config.evaluation.n_best
        result = search(
            model,
            [source_vocabulary.encode(_tokens(s, options)) for s in sentences],
            config,
            beam_width=max(config.evaluation.beam_width, n_best),
            n_best=n_best,
        )
        lines = []
        for row, sentence in enumerate(sentences):
            texts = [
                _detokenize(target_vocabulary, tokens) for tokens in result.tokens[row]
            ]
            if n_best == 1:
                lines.append(texts[0])
                continue
            lines.append(sentence)
            for rank, (text, score) in enumerate(
                zip(texts, result.scores[row], strict=True), start=1
            ):
                if np.isfinite(score):
                    lines.append(f"  {rank}. [{score:.3f}] {text}")
        return lines

    def write_plots(
        self,
        model: keras.Model,
        data: TranslationData,
        config: TranslationConfig,
        plot_dir: Path,
    ) -> None:
        from rnnkit import plots
        from rnnkit.data.parallel_text import UNK

        count = min(config.evaluation.heatmaps, len(data.test_pairs))
        if model.attention == "none" or count == 0:
            return
        sentences = [source for source, _ in data.test_pairs[:count]]
        source_words = [_tokens(s, data.text_options) for s in sentences]
        result = search(
            model,
            [data.source_vocabulary.encode(words) for words in source_words],
            config,
            beam_width=config.evaluation.beam_width,
        )
        for row, words in enumerate(source_words):
            tokens = data.source_vocabulary.pieces(words)
            tokens = tokens or [UNK]  # what `search` feeds for an empty sentence
            length = int(result.lengths[row, 0])
            target = [
                data.target_vocabulary.tokens[i] for i in result.tokens[row, 0, :length]
            ]
            plots.attention_heatmap(
                result.attention[row, :length, : len(tokens)],
                tokens,
                target,
                plot_dir / f"attention_{row + 1}.png",
                title=f"test sentence {row + 1}, beam search "
                f"(width {config.evaluation.beam_width})",
            )


def _check(config: TranslationConfig) -> None:
    model, evaluation = config.model, config.evaluation
    positive = {
        "model.units": model.units,
        "model.embedding_dim": model.embedding_dim,
        "model.encoder_layers": model.encoder_layers,
        "model.decoder_layers": model.decoder_layers,
        "model.num_heads": model.num_heads,
        "evaluation.beam_width": evaluation.beam_width,
        "evaluation.n_best": evaluation.n_best,
        "evaluation.decode_batch_size": evaluation.decode_batch_size,
        "data.min_frequency": config.data.min_frequency,
    }
    for key, value in positive.items():
        if value < 1:
            raise ConfigError(f"{key} must be at least 1, got {value}")
    if model.attention == "multihead" and model.units % model.num_heads:
        raise ConfigError(
            f"model.num_heads={model.num_heads} must divide model.units={model.units}"
        )
    if not 0 <= model.dropout < 1:
        raise ConfigError(f"model.dropout must be in [0, 1), got {model.dropout}")
    if evaluation.length_penalty < 0 or evaluation.max_length_ratio < 0:
        raise ConfigError(
            "evaluation.length_penalty and evaluation.max_length_ratio must be >= 0"
        )
    for key in (
        "data.vocabulary_size",
        "data.limit",
        "data.max_length",
        "evaluation.heatmaps",
    ):
        if config.get(key) < 0:
            raise ConfigError(f"{key} must be >= 0, got {config.get(key)}")


def _saved_tokenizer(model: keras.Model, config: TranslationConfig) -> str:
    """The tokenizer of the vocabularies in `model`: config.data.tokenizer, except for
    runs from before subword vocabularies, whose config.toml has no data.tokenizer
    (and so reads as the default "subword") but whose tokens are words."""
    from rnnkit.data.parallel_text import SubwordVocabulary

    if config.data.tokenizer == "subword" and not any(
        token.startswith(SubwordVocabulary.WORD_START) for token in model.target_tokens
    ):
        return "word"
    return config.data.tokenizer


def _check_vocabularies(
    model: keras.Model, data: TranslationData, config: TranslationConfig
) -> None:
    """Stops when the data's vocabularies are not those the model was trained with."""
    from rnnkit.errors import DataError

    if (
        model.source_tokens is None
        or model.target_tokens is None
        or (
            model.source_tokens == data.source_vocabulary.tokens
            and model.target_tokens == data.target_vocabulary.tokens
        )
    ):
        return
    hint = "train on the same training split and data.tokenizer"
    if _saved_tokenizer(model, config) != config.data.tokenizer:
        hint = 'this run has word vocabularies: set data.tokenizer = "word" in its '
        hint += "config.toml"
    raise DataError(
        f"the {config.data.tokenizer} vocabularies learned from this data differ "
        f"from those saved in the model; {hint}"
    )


# -- Decoding ------------------------------------------------------------------------


def _tokens(sentence: str, options) -> list[str]:
    from rnnkit.data.parallel_text import tokenize

    return tokenize(sentence, options)


def _detokenize(vocabulary, ids) -> str:
    from rnnkit.data.parallel_text import detokenize

    return detokenize(vocabulary.decode(ids))


def _reference(sentence: str, data: TranslationData) -> str:
    """A reference as BLEU sees it: normalised, but neither tokenised nor lower-cased.

    (sacreBLEU lower-cases itself when the model is trained lower-cased.)
    """
    from rnnkit.data.parallel_text import TextOptions, normalize

    options = TextOptions(data.text_options.unicode_form, lowercase=False)
    return normalize(sentence, options)


def search(
    model: keras.Model,
    source_ids: list[list[int]],
    config: TranslationConfig,
    beam_width: int,
    n_best: int = 1,
) -> SearchResult:
    """Greedy (beam_width 1) or beam search over sentences, batched by length.

    Returns one `SearchResult` for all sentences, in their original order.
    """
    import keras
    import numpy as np

    from rnnkit import decoding
    from rnnkit.data.parallel_text import END_ID, PAD_ID, START_ID, UNK_ID

    evaluation = config.evaluation
    common = dict(
        start_id=START_ID,
        end_id=END_ID,
        pad_id=PAD_ID,
        suppress_ids=(PAD_ID, START_ID),
        max_length_ratio=evaluation.max_length_ratio,
        max_length_offset=evaluation.max_length_offset,
    )
    # Sorting by length keeps padding, and so wasted decoder steps, small.
    order = np.argsort([len(ids) for ids in source_ids], kind="stable")
    batch_size = evaluation.decode_batch_size
    parts = []
    for start in range(0, len(order), batch_size):
        # A sentence without tokens still has one, unknown, so the encoder sees it.
        batch = keras.utils.pad_sequences(
            [source_ids[i] or [UNK_ID] for i in order[start : start + batch_size]],
            padding="post",
        )
        if beam_width == 1:
            parts.append(decoding.greedy_search(model, batch, **common))
        else:
            parts.append(
                decoding.beam_search(
                    model,
                    batch,
                    beam_width=beam_width,
                    n_best=n_best,
                    length_penalty_alpha=evaluation.length_penalty,
                    **common,
                )
            )
    inverse = np.argsort(order)
    steps = max(part.tokens.shape[2] for part in parts)
    source_length = max(part.attention.shape[2] for part in parts)

    def joined(name: str) -> np.ndarray:
        arrays = []
        for part in parts:
            array = getattr(part, name)
            if name == "tokens":
                array = np.pad(array, ((0, 0), (0, 0), (0, steps - array.shape[2])))
            elif name == "attention":
                array = np.pad(
                    array,
                    (
                        (0, 0),
                        (0, steps - array.shape[1]),
                        (0, source_length - array.shape[2]),
                    ),
                )
            arrays.append(array)
        return np.concatenate(arrays)[inverse]

    return decoding.SearchResult(
        **{f.name: joined(f.name) for f in dataclasses.fields(decoding.SearchResult)}
    )


def translate(
    model: keras.Model,
    sentences: list[str],
    data: TranslationData,
    config: TranslationConfig,
    beam_width: int | None,
) -> list[str]:
    """Detokenised best translations (beam_width None: the configured beam)."""
    source_ids = [
        data.source_vocabulary.encode(_tokens(s, data.text_options)) for s in sentences
    ]
    result = search(
        model, source_ids, config, beam_width or config.evaluation.beam_width
    )
    return [_detokenize(data.target_vocabulary, tokens[0]) for tokens in result.tokens]


# -- Teacher-forced figures ----------------------------------------------------------


def teacher_forced_figures(model: keras.Model, dataset) -> dict[str, float]:
    """Token accuracy and perplexity of the model on a batched split (pads excluded)."""
    import numpy as np
    import tensorflow as tf
    from keras import ops

    # One compiled forward pass for every batch shape (an eager call would run the
    # recurrent loops step by step in Python; Keras' predict step retraces per shape).
    forward = tf.function(
        lambda inputs: ops.log_softmax(model(inputs, training=False), axis=-1),
        reduce_retracing=True,
    )
    total_log_prob, correct, count = 0.0, 0, 0
    for inputs, target_out in dataset:
        log_probs = ops.convert_to_numpy(forward(inputs))
        target_out = np.asarray(target_out)
        real = target_out != 0
        picked = np.take_along_axis(log_probs, target_out[..., None], axis=-1)[..., 0]
        total_log_prob += float(picked[real].sum())
        correct += int((log_probs.argmax(-1) == target_out)[real].sum())
        count += int(real.sum())
    return {
        "val_token_accuracy": correct / count,
        "val_perplexity": math.exp(-total_log_prob / count),
    }


def unigram_figures(train, validation, vocabulary_size: int) -> dict[str, float]:
    """The baseline that ignores source and context: training token frequencies."""
    import numpy as np

    counts = np.zeros(vocabulary_size)
    for _, target_out in train:
        counts += np.bincount(np.asarray(target_out).ravel(), minlength=vocabulary_size)
    counts[0] = 0  # padding
    # Add-one smoothing, so that a token unseen in training has a finite cost.
    probabilities = (counts + 1) / (counts.sum() + vocabulary_size)
    log_prob, correct, count = 0.0, 0, 0
    for _, target_out in validation:
        ids = np.asarray(target_out)
        ids = ids[ids != 0]
        log_prob += float(np.log(probabilities[ids]).sum())
        correct += int((ids == counts.argmax()).sum())
        count += len(ids)
    return {
        "val_token_accuracy": correct / count,
        "val_perplexity": math.exp(-log_prob / count),
    }
