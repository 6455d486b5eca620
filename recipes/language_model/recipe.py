"""Language model: next-token prediction on running text, trained by truncated BPTT.

`rnnkit run language_model` trains `rnnkit.models.LanguageModel` (an embedding, stacked
rnnkit LSTM/GRU/SimpleRNN layers, dropout between them, optionally tied output
weights) on characters or words of a text: The Time Machine by default, or the Penn
Treebank files with their own conventions (configs/ptb_small.toml).

Training mode (`train.mode`):

- "truncated" (default): truncated backpropagation through time. The text is laid out
  as `train.batch_size` contiguous streams read `train.bptt` tokens at a time in order;
  the stateful recurrent layers carry their final states from one batch to the next
  (gradients stop at the window boundary). A callback resets the states at the start
  of every epoch and before every evaluation.
- "independent": the same windows, each read from a zero state (shuffled every
  epoch when `train.shuffle` is true).

Optimisers: SGD with the schedule of Zaremba et al. (2014) (constant rate for
`train.decay_after` epochs, then multiplied by `train.lr_decay` every epoch) or Adam;
gradients clipped by their global norm (`train.clipnorm`).

Evaluation (with the vocabulary saved in the model, `rnnkit evaluate` too): perplexity,
exp of the mean per-token cross-entropy over the whole test (and validation) split,
read by `evaluation.batch_size` streams with the state carried through the split; the
same model with its state reset at every window of
`train.bptt` tokens (what state carrying gains); bits per character at character
level. Baselines on the same tokens: a unigram model and an add-k bigram model (k
chosen on the validation split), both counted on the training split.

`rnnkit predict RUN_DIR "the time traveller" --length 200 --temperature 0.8
--top-k 10 --top-p 0.9 --seed 1` continues the prompt by sampling
(`rnnkit.decoding.sample_sequence`).

The module stays light: TensorFlow and Keras are imported inside the methods.
"""

from __future__ import annotations

import dataclasses
import logging
import math
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from rnnkit_recipes.language_model.config import (
    RNN_MODEL_FIELDS,
    SHARED_MODEL_FIELDS,
    TRANSFORMER_MODEL_FIELDS,
    LanguageModelConfig,
    carries_state,
    check_settings,
)

from rnnkit.recipe import (
    ConfigError,
    Metrics,
    Recipe,
    RnnkitError,
    texts_of,
)
from rnnkit.shared_sections import TransformerModelConfig

if TYPE_CHECKING:
    import keras
    import keras_tuner
    import numpy as np
    from rnnkit_recipes.language_model.data import LanguageModelData

log = logging.getLogger("rnnkit")


class LanguageModelRecipe(Recipe):
    """Character- or word-level recurrent language model."""

    name = "language_model"
    summary = (
        "Language model (The Time Machine chars, Penn Treebank words): rnnkit "
        "LSTM/GRU/SimpleRNN, truncated BPTT, perplexity, sampling"
    )
    Config = LanguageModelConfig
    predict_options: ClassVar[dict[str, str]] = {
        "length": "evaluation.length",
        "temperature": "evaluation.temperature",
        "top-k": "evaluation.top_k",
        "top-p": "evaluation.top_p",
        "seed": "evaluation.seed",
    }

    def check_config(self, config: LanguageModelConfig) -> None:
        super().check_config(config)
        check_settings(config)

    def load_data(self, config: LanguageModelConfig) -> LanguageModelData:
        from rnnkit_recipes.language_model import data

        check_settings(config)
        loaded = data.load(config)
        log.info(
            "%s: %d %s tokens (%d train / %d validation / %d test), vocabulary %d",
            loaded.source,
            len(loaded.train_ids) + len(loaded.validation_ids) + len(loaded.test_ids),
            config.data.level,
            len(loaded.train_ids),
            len(loaded.validation_ids),
            len(loaded.test_ids),
            len(loaded.tokens),
        )
        return loaded

    def single_device(self, config: LanguageModelConfig) -> str | None:
        if carries_state(config):
            return (
                "train.mode=truncated carries each stream's state from batch to "
                "batch in one device's stateful layers, which rnnkit does not split "
                "over replicas (train.mode=independent can be mirrored)"
            )
        return None

    def build_model(
        self, config: LanguageModelConfig, data: LanguageModelData
    ) -> keras.Model:
        import keras
        import numpy as np
        from rnnkit_recipes.language_model import baselines

        from rnnkit.models.language_model import LanguageModel
        from rnnkit.models.transformer_language_model import TransformerLanguageModel

        check_settings(config)
        train = config.train
        truncated = carries_state(config)
        if truncated and keras.backend.backend() == "tensorflow":
            import tensorflow as tf

            if tf.distribute.get_strategy().num_replicas_in_sync > 1:
                # A strategy passed to runner.run directly (the CLI refuses earlier).
                raise ConfigError(f"{self.single_device(config)}; use --strategy one")
        options = dataclasses.asdict(config.model)
        if config.model.architecture == "transformer":
            model = TransformerLanguageModel(
                data.tokens,
                context_length=train.bptt,
                seed=train.seed,
                **_model_options(options, TRANSFORMER_MODEL_FIELDS),
            )
        else:
            model = LanguageModel(
                data.tokens,
                stateful=truncated,
                batch_size=train.batch_size if truncated else None,
                seed=train.seed,
                **_model_options(options, RNN_MODEL_FIELDS),
            )
        model.build()
        unigram_bias = config.model.unigram_bias
        if unigram_bias:  # start from the unigram baseline, not from uniform
            size = len(data.tokens)
            frequencies = baselines.unigram_probabilities(data.train_ids, size)
            model.set_output_bias(np.log(frequencies))
        steps_per_epoch = ((len(data.train_ids) - 1) // train.batch_size) // train.bptt
        learning_rate = learning_rate_schedule(config, steps_per_epoch)
        clip = {"global_clipnorm": train.clipnorm} if train.clipnorm else {}
        if train.optimizer == "sgd":
            optimizer = keras.optimizers.SGD(learning_rate, **clip)
        else:
            optimizer = keras.optimizers.Adam(learning_rate, **clip)
        model.compile(
            optimizer=optimizer,
            loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        )
        return model

    def callbacks(
        self, config: LanguageModelConfig, data: LanguageModelData
    ) -> list[keras.callbacks.Callback]:
        callbacks = []
        if carries_state(config):
            callbacks.append(reset_states_callback())
        self._spectral_tracker = None
        if config.train.spectral_norm_every:
            from rnnkit.diagnostics import SpectralNormTracker

            self._spectral_tracker = SpectralNormTracker(
                every=config.train.spectral_norm_every
            )
            callbacks.append(self._spectral_tracker)
        return callbacks

    def search_space(
        self, hp: keras_tuner.HyperParameters, config: LanguageModelConfig
    ) -> LanguageModelConfig:
        if config.model.architecture == "transformer":
            return config.with_values(
                {
                    **TransformerModelConfig.search_sizes(hp),
                    "model.num_layers": hp.Int("num_layers", 2, 6, step=2),
                    "model.dropout": hp.Choice("dropout", [0.0, 0.1, 0.2]),
                    "train.learning_rate": hp.Float(
                        "learning_rate", 1e-4, 1e-3, sampling="log"
                    ),
                }
            )
        return config.with_values(
            {
                "model.cell_type": hp.Choice("cell_type", ["lstm", "gru"]),
                "model.units": hp.Choice("units", [128, 256, 512]),
                "model.num_layers": hp.Int("num_layers", 1, 2),
                "model.dropout": hp.Choice("dropout", [0.0, 0.2, 0.5]),
                "train.learning_rate": hp.Float(
                    "learning_rate", 5e-4, 5e-3, sampling="log"
                ),
            }
        )

    def evaluate(
        self, model: keras.Model, data: LanguageModelData, config: LanguageModelConfig
    ) -> Metrics:
        from rnnkit_recipes.language_model import baselines

        # Ids mean the tokens of the vocabulary saved in the model, whatever
        # vocabulary today's data settings would learn.
        data = data.with_vocabulary(model.tokens)
        streams, bptt = config.evaluation.batch_size, config.train.bptt
        if getattr(model, "architecture", "rnn") == "transformer":
            # Its windows are the ones it was built for, whatever train.bptt says
            # now: it cannot read past context_length tokens.
            bptt = model.context_length
        # The tokens the model scores (see mean_cross_entropy), for the baselines.
        test_streams = _stream_count(data.test_ids, streams)
        scored = data.test_ids[
            : test_streams * ((len(data.test_ids) - 1) // test_streams) + 1
        ]
        test_nats = mean_cross_entropy(model, data.test_ids, streams, bptt)
        # The Transformer carries nothing from window to window: its figure is
        # already the one with the state reset.
        reset = {}
        if getattr(model, "architecture", "rnn") == "rnn":
            reset_nats = mean_cross_entropy(
                model, data.test_ids, streams, bptt, carry_state=False
            )
            reset = {"perplexity_state_reset": math.exp(reset_nats)}
        validation_nats = mean_cross_entropy(model, data.validation_ids, streams, bptt)
        vocabulary_size = len(data.tokens)
        unigram = baselines.unigram_cross_entropy(
            data.train_ids, scored, vocabulary_size
        )
        bigram, k = baselines.bigram_cross_entropy(
            data.train_ids,
            data.validation_ids,
            scored,
            vocabulary_size,
        )
        log.info("add-k bigram baseline: k = %g (chosen on the validation split)", k)
        char = config.data.level == "char"

        def row(nats: float, **extra: float) -> dict[str, float]:
            figures = {"perplexity": math.exp(nats), "cross_entropy": nats}
            if char:
                figures["bits_per_char"] = nats / math.log(2)
            return {**figures, **extra}

        return {
            "model": row(test_nats, **reset, val_perplexity=math.exp(validation_nats)),
            "unigram": row(unigram),
            "bigram_add_k": row(bigram),
        }

    def predict(
        self,
        model: keras.Model,
        inputs: Sequence[str],
        config: LanguageModelConfig,
    ) -> list[str]:
        from rnnkit_recipes.language_model.decode import generate

        _forward_only(config)
        return [generate(model, prompt, config) for prompt in _prompts(inputs)]

    def predict_records(
        self,
        model: keras.Model,
        inputs: Sequence[Any],
        config: LanguageModelConfig,
        calls: dict | None = None,
    ) -> list[dict[str, Any]]:
        """Per prompt: `{"text": the prompt and what was sampled after it}`;
        a prompt is stripped of surrounding spaces, as `rnnkit predict` reads it."""
        from rnnkit_recipes.language_model.decode import generate

        _keras_only(calls)
        _forward_only(config)
        prompts = [p.strip() for p in texts_of(inputs, "a prompt to continue")]
        return [{"text": generate(model, prompt, config)} for prompt in prompts]

    def predict_stream(
        self,
        model: keras.Model,
        inputs: Sequence[Any],
        config: LanguageModelConfig,
        calls: dict | None = None,
    ) -> Iterator[str]:
        """The text of one prompt piece by piece as it is sampled."""
        from rnnkit_recipes.language_model.decode import pieces

        _keras_only(calls)
        _forward_only(config)
        prompts = [p.strip() for p in texts_of(inputs, "a prompt to continue")]
        if len(prompts) != 1:
            raise RnnkitError(f"give one prompt to stream, not {len(prompts)}")
        return pieces(model, prompts[0], config)

    def write_plots(
        self,
        model: keras.Model,
        data: LanguageModelData,
        config: LanguageModelConfig,
        plot_dir: Path,
    ) -> None:
        """With `train.spectral_norm_every`, the sigma_max(W_hh) records of the
        training run go to the run directory's diagnostics/."""
        tracker = getattr(self, "_spectral_tracker", None)
        if tracker is not None and tracker.rows:
            from rnnkit.diagnostics import write_spectral_norms

            write_spectral_norms(
                {config.model.cell_type: tracker.rows},
                Path(plot_dir).parent / "diagnostics",
            )

    def export_plan(self, model: keras.Model, config: LanguageModelConfig, format: str):
        from rnnkit_recipes.language_model.export import export_plan

        return export_plan(model, config, format)


def _prompts(inputs: Sequence[str]) -> list[str]:
    from rnnkit.data.text import read_inputs

    return read_inputs(inputs, "give a prompt to continue, e.g. 'the time traveller'")


def _model_options(options: dict, names: tuple[str, ...]) -> dict:
    """The model section's fields that the architecture's constructor takes."""
    return {name: options[name] for name in (*SHARED_MODEL_FIELDS, *names)}


def _forward_only(config: LanguageModelConfig) -> None:
    """A backward model (data.reverse) predicts the token before, not a continuation."""
    if config.data.reverse:
        raise RnnkitError(
            "this language model reads text backwards (data.reverse=true): it scores "
            "and pre-trains, but does not continue a prompt; sample from a forward "
            "model"
        )


# -- Training pieces -----------------------------------------------------------------


def learning_rate_schedule(config: LanguageModelConfig, steps_per_epoch: int):
    """The learning rate: constant, Zaremba et al.'s schedule as a Keras
    `PiecewiseConstantDecay` over optimizer steps (constant for `decay_after`
    epochs, then times `lr_decay` per epoch), or the noam warm-up and decay."""
    import keras

    from rnnkit.optimizers import configured_learning_rate

    train = config.train
    if train.lr_schedule == "noam":
        return configured_learning_rate(train, config.model)
    if train.lr_decay == 1.0:
        return train.learning_rate
    # Epoch e (from 0) trains at learning_rate * lr_decay ** max(e + 1 - decay_after, 0)
    values = [
        train.learning_rate * train.lr_decay ** max(epoch + 1 - train.decay_after, 0)
        for epoch in range(train.epochs)
    ]
    if len(values) == 1:
        return values[0]
    boundaries = [epoch * steps_per_epoch for epoch in range(1, train.epochs)]
    return keras.optimizers.schedules.PiecewiseConstantDecay(boundaries, values)


def reset_states_callback() -> keras.callbacks.Callback:
    """Clears the carried states at the start of every epoch, evaluation and
    prediction, so that each reads its data from a zero state."""
    import keras

    class ResetStates(keras.callbacks.Callback):
        def on_epoch_begin(self, epoch, logs=None):
            self.model.reset_states()

        def on_test_begin(self, logs=None):
            self.model.reset_states()

        def on_predict_begin(self, logs=None):
            self.model.reset_states()

    return ResetStates()


# -- Evaluation ----------------------------------------------------------------------


def mean_cross_entropy(
    model: keras.Model,
    ids: np.ndarray,
    streams: int,
    bptt: int,
    carry_state: bool = True,
) -> float:
    """Mean per-token cross-entropy (nats) of `model` on the id stream `ids`.

    The stream is read as `streams` contiguous rows, `bptt` tokens at a time, every
    token predicted once (the last, shorter window included). With `carry_state` the
    state runs through each row from its first token to its last; without it, every
    window starts from a zero state. Tokens past `streams * ((len(ids) - 1) //
    streams) + 1` (fewer than `streams`) are not scored; a split shorter than
    `streams + 1` tokens is read by fewer streams.
    """
    import numpy as np
    from rnnkit_recipes.language_model import decode

    from rnnkit.data.token_stream import stream_batches

    streams = _stream_count(ids, streams)
    reader = decode.reader(model, streams, carry_state)
    total, count = 0.0, 0
    for inputs, targets in stream_batches(ids, streams, bptt, keep_partial=True):
        logits = np.asarray(reader.predict_on_batch(inputs), "float64")
        logits -= logits.max(-1, keepdims=True)
        log_normaliser = np.log(np.exp(logits).sum(-1))  # (streams, steps)
        picked = np.take_along_axis(logits, targets[..., None], axis=-1)[..., 0]
        total += float((log_normaliser - picked).sum())
        count += targets.size
    return total / count


def _stream_count(ids: np.ndarray, wanted: int) -> int:
    """`wanted` streams, or fewer for a split too short to give each a token."""
    return max(1, min(wanted, len(ids) - 1))


def _keras_only(calls) -> None:
    if calls is not None:
        raise RnnkitError(
            "the language model generates from the Keras runtime; "
            "/v1/models/NAME:predict takes the exported step's inputs"
        )
