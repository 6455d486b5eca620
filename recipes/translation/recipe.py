"""Translation: an RNN encoder-decoder with attention or a Transformer, decoded by
beam search.

`rnnkit run translation` trains `rnnkit.models.EncoderDecoder` (a bidirectional rnnkit
GRU encoder, a GRU decoder with Bahdanau attention and input feeding, teacher forcing)
or, with `model.architecture = "transformer"`,
`rnnkit.models.TransformerEncoderDecoder` (decoded with its key/value cache),
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
import weakref
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from rnnkit_recipes.translation.config import TranslationConfig

from rnnkit.recipe import (
    ConfigError,
    Metrics,
    Recipe,
    texts_of,
)
from rnnkit.shared_sections import TransformerModelConfig

if TYPE_CHECKING:
    import keras
    import keras_tuner
    from rnnkit_recipes.translation.data import TranslationData


log = logging.getLogger("rnnkit")


class TranslationRecipe(Recipe):
    """Attentive RNN encoder-decoder or Transformer translating sentences."""

    name = "translation"
    summary = (
        "Translate sentences (Anki en-es, Multi30k de-en): rnnkit GRU/LSTM "
        "encoder-decoder with attention or Transformer, beam search, sacreBLEU"
    )
    Config = TranslationConfig
    predict_options: ClassVar[dict[str, str]] = {
        "beam": "evaluation.beam_width",
        "n-best": "evaluation.n_best",
    }

    def check_config(self, config: TranslationConfig) -> None:
        super().check_config(config)
        _check(config)

    def split_keys_of(self, config: TranslationConfig) -> tuple[str, ...]:
        from rnnkit_recipes.translation import data

        return self.split_keys if data.held_out_by_cut(config) else ()

    def load_data(self, config: TranslationConfig) -> TranslationData:
        from rnnkit_recipes.translation import data

        _check(config)
        return data.load(config)

    def build_model(
        self, config: TranslationConfig, data: TranslationData
    ) -> keras.Model:
        import keras
        from rnnkit_recipes.translation.config import (
            RNN_MODEL_FIELDS,
            SHARED_MODEL_FIELDS,
            TRANSFORMER_MODEL_FIELDS,
        )

        from rnnkit.data.parallel_text import PAD_ID
        from rnnkit.losses import SparseLabelSmoothingCrossentropy
        from rnnkit.models.encoder_decoder import EncoderDecoder
        from rnnkit.models.transformer_encoder_decoder import (
            TransformerEncoderDecoder,
        )
        from rnnkit.optimizers import configured_learning_rate

        _check(config)
        # The model section's fields of the architecture are the constructor's
        # arguments, name for name.
        transformer = config.model.architecture == "transformer"
        model_class = TransformerEncoderDecoder if transformer else EncoderDecoder
        names = TRANSFORMER_MODEL_FIELDS if transformer else RNN_MODEL_FIELDS
        options = dataclasses.asdict(config.model)
        model = model_class(
            data.source_vocabulary.tokens,
            data.target_vocabulary.tokens,
            seed=config.train.seed,
            **{name: options[name] for name in (*SHARED_MODEL_FIELDS, *names)},
        )
        model.build()
        model.compile(
            optimizer=keras.optimizers.Adam(
                configured_learning_rate(config.train, config.model),
                clipnorm=config.train.clipnorm or None,
            ),
            loss=SparseLabelSmoothingCrossentropy(
                config.train.label_smoothing, from_logits=True, ignore_class=PAD_ID
            ),
        )
        return model

    def search_space(
        self, hp: keras_tuner.HyperParameters, config: TranslationConfig
    ) -> TranslationConfig:
        if config.model.architecture == "transformer":
            return config.with_values(
                {
                    **TransformerModelConfig.search_sizes(hp),
                    "model.encoder_layers": hp.Int("encoder_layers", 2, 6, step=2),
                    "model.decoder_layers": hp.Int("decoder_layers", 2, 6, step=2),
                    "model.dropout": hp.Choice("dropout", [0.1, 0.2, 0.3]),
                    "train.learning_rate": hp.Float(
                        "learning_rate", 1e-4, 1e-3, sampling="log"
                    ),
                    "train.warmup_steps": hp.Choice("warmup_steps", [1000, 2000, 4000]),
                }
            )
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
        from rnnkit_recipes.translation.baselines import copy_source, unigram_figures
        from rnnkit_recipes.translation.decode import bleu_reference, translate

        from rnnkit.data.parallel_text import UNK, count_unknown

        _check_vocabularies(model, data, config)
        validation = teacher_forced_figures(model, data.validation)
        unigram = unigram_figures(
            data.train, data.validation, len(data.target_vocabulary)
        )
        sources = [source for source, _ in data.test_pairs]
        references = [bleu_reference(t, data) for _, t in data.test_pairs]
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
        return {
            "model": model_row,
            "copy_source": scores(copy_source(sources, data)),
            "unigram": unigram,
        }

    def predict(
        self, model: keras.Model, inputs: Sequence[str], config: TranslationConfig
    ) -> list[str]:
        """The lines of `rnnkit predict`: a translation per sentence, or with
        `--n-best K` the sentence and its K ranked translations with their scores,
        from the records `rnnkit serve` answers with (`predict_records`)."""
        from rnnkit_recipes.translation.serve import records

        from rnnkit.data.text import read_inputs

        sentences = read_inputs(
            inputs, "give a sentence to translate, or a file of sentences"
        )
        found = records(model, sentences, config, _vocabularies(model, config), None)
        if config.evaluation.n_best == 1:
            return [record["translation"] for record in found]
        lines = []
        for sentence, record in zip(sentences, found, strict=True):
            lines.append(sentence)
            lines += [
                f"  {rank}. [{ranked['score']:.3f}] {ranked['text']}"
                for rank, ranked in enumerate(record["n_best"], start=1)
            ]
        return lines

    def predict_records(
        self,
        model: keras.Model,
        inputs: Sequence[Any],
        config: TranslationConfig,
        calls: dict | None = None,
    ) -> list[dict[str, Any]]:
        from rnnkit_recipes.translation.serve import records

        sentences = texts_of(inputs, "a sentence to translate")
        return records(model, sentences, config, _vocabularies(model, config), calls)

    def write_plots(
        self,
        model: keras.Model,
        data: TranslationData,
        config: TranslationConfig,
        plot_dir: Path,
    ) -> None:
        from rnnkit_recipes.translation.decode import search, source_tokens

        from rnnkit import plots
        from rnnkit.data.parallel_text import UNK, UNK_ID

        count = min(config.evaluation.heatmaps, len(data.test_pairs))
        if getattr(model, "attention", None) == "none" or count == 0:
            return
        transformer = getattr(model, "architecture", "rnn") == "transformer"
        what = "cross-attention of the last block, mean of the heads, " * transformer
        sentences = [source for source, _ in data.test_pairs[:count]]
        source_words = [source_tokens(s, data.text_options) for s in sentences]
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
                title=f"test sentence {row + 1}, {what}beam search "
                f"(width {config.evaluation.beam_width})",
            )
            if transformer and config.evaluation.heatmap_heads == "each":
                _head_heatmaps(
                    model,
                    result.tokens[row, 0, :length],
                    data.source_vocabulary.encode(words) or [UNK_ID],
                    tokens,
                    target,
                    plot_dir / f"attention_{row + 1}_heads",
                    f"test sentence {row + 1}",
                )

    def export_plan(self, model: keras.Model, config: TranslationConfig, format: str):
        from rnnkit_recipes.translation.export import export_plan

        return export_plan(model, config, format)


def _head_heatmaps(model, target_ids, source_ids, tokens, target, folder, title):
    """One heatmap per cross-attention head of the last decoder block, from the
    decoder run on the translation behind the start token (what the search saw)."""
    import numpy as np

    from rnnkit import plots
    from rnnkit.data.parallel_text import START_ID

    target_in = np.asarray([[START_ID, *target_ids[:-1]]], "int32")
    weights = np.asarray(
        model.cross_attention_weights(np.asarray([source_ids], "int32"), target_in)
    )[0]  # (heads, target length, source length)
    for head, head_weights in enumerate(weights, start=1):
        plots.attention_heatmap(
            head_weights[: len(target), : len(tokens)],
            tokens,
            target,
            folder / f"head_{head}.png",
            title=f"{title}, last block's cross-attention, head {head}",
        )


def _check(config: TranslationConfig) -> None:
    from rnnkit.data.parallel_text import SPECIAL_TOKENS

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
    data = config.data
    if data.format == "parallel" and data.train_split:
        for key in ("validation_split", "test_split"):
            if getattr(data, key) == data.train_split:
                raise ConfigError(
                    f"data.{key}={data.train_split!r} is the training split: its "
                    "pairs would be pairs the model trained on; name another "
                    "split's files, or leave it empty to cut it from the training "
                    "pairs"
                )
    if model.architecture == "transformer":
        for key in ("model.model_dim", "model.feedforward_dim", "model.max_positions"):
            if config.get(key) < 1:
                raise ConfigError(f"{key} must be at least 1, got {config.get(key)}")
        if model.model_dim % model.num_heads:
            raise ConfigError(
                f"model.num_heads={model.num_heads} must divide "
                f"model.model_dim={model.model_dim}"
            )
    elif model.attention == "multihead" and model.units % model.num_heads:
        raise ConfigError(
            f"model.num_heads={model.num_heads} must divide model.units={model.units}"
        )
    if not 0 <= model.dropout < 1:
        raise ConfigError(f"model.dropout must be in [0, 1), got {model.dropout}")
    if evaluation.length_penalty < 0 or evaluation.max_length_ratio < 0:
        raise ConfigError(
            "evaluation.length_penalty and evaluation.max_length_ratio must be >= 0"
        )
    smallest = len(SPECIAL_TOKENS) + 1
    if config.data.tokenizer == "word" and 0 < config.data.vocabulary_size < smallest:
        raise ConfigError(
            f"data.vocabulary_size={config.data.vocabulary_size} holds no word besides "
            f"the {len(SPECIAL_TOKENS)} special tokens, so every word is [UNK]; set "
            f"it to 0 (all words) or at least {smallest}"
        )
    for key in (
        "data.vocabulary_size",
        "data.limit",
        "data.max_length",
        "evaluation.heatmaps",
    ):
        if config.get(key) < 0:
            raise ConfigError(f"{key} must be >= 0, got {config.get(key)}")


# The vocabularies of each loaded model, made once: a server translates with the same
# model request after request.
_VOCABULARIES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _vocabularies(model: keras.Model, config: TranslationConfig) -> tuple:
    """The source and target vocabularies saved with the model, not those of today's
    data (a subword vocabulary's pieces define its tokenizer), made once per model."""
    from rnnkit.data.parallel_text import vocabulary_class

    if model not in _VOCABULARIES:
        kind = vocabulary_class(_saved_tokenizer(model, config))
        _VOCABULARIES[model] = (kind(model.source_tokens), kind(model.target_tokens))
    return _VOCABULARIES[model]


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


# -- Teacher-forced figures ----------------------------------------------------------


def teacher_forced_figures(model: keras.Model, dataset) -> dict[str, float]:
    """Token accuracy and perplexity of the model on a batched split (pads excluded)."""
    import numpy as np
    import tensorflow as tf
    from keras import ops

    # One compiled forward pass for every batch shape (an eager call would run the
    # recurrent loops step by step in Python; Keras' predict step retraces per shape):
    # traced once, for the batch and lengths left unknown.
    inputs_spec = tf.nest.map_structure(
        lambda spec: tf.TensorSpec([None] * spec.shape.rank, spec.dtype),
        dataset.element_spec[0],
    )
    forward = tf.function(
        lambda inputs: ops.log_softmax(model(inputs, training=False), axis=-1),
        input_signature=[inputs_spec],
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
