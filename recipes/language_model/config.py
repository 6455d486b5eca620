"""The configuration of the language-model recipe.

The typed configuration of the recipe: one dataclass per section, each field with its
default and help text; the command line's options come from the same fields.
`check_settings` refuses, in one line, the settings that cannot work together.
"""

from __future__ import annotations

import dataclasses

from rnnkit.recipe import (
    ConfigError,
    DataConfig,
    EvaluationConfig,
    RecipeConfig,
    field,
    section,
)
from rnnkit.registry import recurrent_names
from rnnkit.shared_sections import ScheduledTrainConfig, TransformerModelConfig


@dataclasses.dataclass
class LanguageModelDataConfig(DataConfig):
    level: str = field(
        "char", help="Tokens: characters or words.", choices=("char", "word")
    )
    lowercase: bool = field(True, help="Lower-case the text before tokenizing.")
    standardize: bool = field(
        False,
        help="Clean the text as the sentiment classifier does first: HTML tags and "
        "punctuation to spaces, apostrophes dropped (for pre-training on reviews).",
    )
    reverse: bool = field(
        False,
        help="Read the text backwards, last token first: a backward language model "
        "(for the backward direction of a bidirectional classifier; it does not "
        "generate text).",
    )
    text_column: str = field("text", help="Column of a CSV/TSV table with the text.")
    train_split: str = field("train", help="{split} of the training file.")
    validation_split: str = field("valid", help="{split} of the validation file.")
    test_split: str = field("test", help="{split} of the test file.")
    validation_fraction: float = field(
        0.05,
        help="Share of a single text held out for validation (before the test part).",
        above=0.0,
        below=1.0,
    )
    test_fraction: float = field(
        0.05,
        help="Share of a single text held out for testing (its contiguous tail).",
        above=0.0,
        below=1.0,
    )
    split_seed: int = field(
        0,
        help="A CSV/TSV table: seed of the document order before the contiguous cut "
        "(not train.seed, so that every seed and every evaluation tests on the same "
        "documents).",
        at_least=0,
    )
    vocabulary_size: int = field(
        0, help="Most tokens kept, <unk> included (0: all).", at_least=0
    )
    min_frequency: int = field(
        1, help="Tokens seen fewer times in training become <unk>.", at_least=1
    )
    limit: int = field(
        0,
        help="Keep at most this many tokens of each split (0: all); quick trials.",
        at_least=0,
    )


@dataclasses.dataclass
class LanguageModelModelConfig(TransformerModelConfig):
    # Declared again for help texts of this recipe's own.
    architecture: str = field(
        "rnn",
        help="rnn: stacked recurrent layers (cell_type, embedding_dim, units, "
        "init_scale); transformer: causal Transformer blocks reading windows of "
        "train.bptt tokens, nothing carried between them (model_dim, num_heads, "
        "feedforward_dim, norm_first, positional_encoding). Both read num_layers, "
        "dropout, tie_weights and unigram_bias.",
        choices=("rnn", "transformer"),
    )
    norm_first: bool = field(
        True,
        help="Transformer: pre-norm blocks and a final LayerNorm (false: post-norm).",
    )
    cell_type: str = field("lstm", help="Recurrent cell.", choices=recurrent_names())
    embedding_dim: int = field(64, help="Size of the token embeddings.", at_least=1)
    units: int = field(256, help="Units per recurrent layer.", at_least=1)
    num_layers: int = field(
        1, help="Stacked recurrent layers (or Transformer blocks).", at_least=1
    )
    block: str = field(
        "none",
        help="rnn: none (stacked recurrent layers) or hawk (Hawk's residual blocks, "
        "De et al. 2024: RMSNorm, a gated branch around cell_type after a temporal "
        "convolution, a gated MLP, residual connections; units wide inside, on the "
        "embeddings' width).",
        choices=("none", "hawk"),
    )
    dropout: float = field(
        0.0,
        help="Dropout on embeddings, between layers and before the output.",
        at_least=0.0,
        below=1.0,
    )
    weight_dropout: float = field(
        0.0,
        help="rnn, model.block=none: DropConnect on every recurrent kernel, one mask "
        "per batch (AWD-LSTM's weight drop); cells with a recurrent kernel (lstm, "
        "gru, simple_rnn).",
        at_least=0.0,
        below=1.0,
    )
    locked_dropout: bool = field(
        False,
        help="rnn: one model.dropout mask per sequence, shared by all its steps "
        "(variational dropout, as AWD-LSTM), instead of one per step.",
    )
    embedding_dropout: float = field(
        0.0,
        help="rnn: drop whole tokens in training: every position of a dropped "
        "token's embedding is zero in that batch (AWD-LSTM's embedding dropout).",
        at_least=0.0,
        below=1.0,
    )
    tie_weights: bool = field(
        False,
        help="Output projection = transposed embedding matrix (the RNN needs units "
        "== embedding_dim).",
    )
    init_scale: float = field(
        0.0,
        help="Uniform initialisation in [-init_scale, init_scale] of every weight "
        "(0: Keras defaults).",
        at_least=0.0,
    )
    unigram_bias: bool = field(
        True,
        help="Start the output bias at the log unigram probabilities of the training "
        "tokens (add-one), so that training starts from the unigram baseline.",
    )


# The model fields each architecture reads (the others are left alone).
SHARED_MODEL_FIELDS = ("num_layers", "dropout", "tie_weights")
RNN_MODEL_FIELDS = (
    "cell_type",
    "embedding_dim",
    "units",
    "init_scale",
    "block",
    "weight_dropout",
    "locked_dropout",
    "embedding_dropout",
)
TRANSFORMER_MODEL_FIELDS = (
    "model_dim",
    "num_heads",
    "feedforward_dim",
    "norm_first",
    "positional_encoding",
)


def carries_state(config) -> bool:
    """Whether training carries recurrent state from batch to batch (truncated
    BPTT): an RNN in train.mode "truncated"; never the Transformer."""
    return config.train.mode == "truncated" and config.model.architecture == "rnn"


@dataclasses.dataclass
class LanguageModelTrainConfig(ScheduledTrainConfig):
    # Declared again: the constant rate here decays with lr_decay.
    lr_schedule: str = field(
        "constant",
        help="constant: train.learning_rate (times lr_decay per epoch after "
        "decay_after); noam: the Transformer paper's warm-up then 1/sqrt(step) "
        "decay, peaking at train.learning_rate after train.warmup_steps steps.",
        choices=("constant", "noam"),
    )
    mode: str = field(
        "truncated",
        help="truncated: streams read in order, state carried across batches; "
        "independent: the same windows, each from a zero state (shuffled if "
        "train.shuffle). The Transformer carries nothing: it always reads "
        "independent windows.",
        choices=("truncated", "independent"),
    )
    bptt: int = field(
        64,
        help="Time steps per window (truncated BPTT; the Transformer's context).",
        at_least=1,
    )
    optimizer: str = field("adam", help="Optimizer.", choices=("adam", "sgd"))
    clipnorm: float = field(
        1.0, help="Clip the gradients' global norm to this (0: no clip).", at_least=0.0
    )
    decay_after: int = field(
        0,
        help="Epochs at the initial learning rate before lr_decay starts.",
        at_least=0,
    )
    lr_decay: float = field(
        1.0,
        help="Learning-rate factor per epoch after decay_after (1: constant).",
        above=0.0,
        at_most=1.0,
    )
    spectral_norm_every: int = field(
        0,
        help="Record sigma_max of every recurrent kernel every this many steps into "
        "diagnostics/spectral_norms.csv and .png (0: off).",
        at_least=0,
    )


@dataclasses.dataclass
class LanguageModelEvaluationConfig(EvaluationConfig):
    batch_size: int = field(
        10,
        help="Streams that read a split in evaluation (state carried through each).",
        at_least=1,
    )
    length: int = field(200, help="Tokens generated by predict.", at_least=0)
    temperature: float = field(
        1.0, help="Sampling temperature (0: greedy).", at_least=0.0
    )
    top_k: int = field(
        0, help="Sample only among the k most probable tokens (0: all).", at_least=0
    )
    top_p: float = field(
        1.0,
        help="Sample only from the nucleus of this probability mass (1: all).",
        above=0.0,
        at_most=1.0,
    )
    seed: int = field(0, help="Seed of the sampling.", at_least=0)


@dataclasses.dataclass
class LanguageModelConfig(RecipeConfig):
    data: LanguageModelDataConfig = section(
        LanguageModelDataConfig, "The text and its tokens."
    )
    model: LanguageModelModelConfig = section(
        LanguageModelModelConfig, "The recurrent language model."
    )
    train: LanguageModelTrainConfig = section(
        LanguageModelTrainConfig,
        "The training loop.",
        epochs=10,
        batch_size=32,
        learning_rate=0.002,
        patience=3,
        shuffle=False,
    )
    evaluation: LanguageModelEvaluationConfig = section(
        LanguageModelEvaluationConfig, "Perplexity and sampling."
    )


def check_settings(config: LanguageModelConfig) -> None:
    """A `ConfigError` for settings that cannot work together."""
    model = config.model
    if model.architecture == "transformer":
        if model.model_dim % model.num_heads:
            raise ConfigError(
                f"model.num_heads={model.num_heads} must divide "
                f"model.model_dim={model.model_dim}"
            )
        if config.train.spectral_norm_every:
            raise ConfigError(
                "train.spectral_norm_every records the recurrent kernels' sigma_max, "
                "and the Transformer has none; set it to 0"
            )
        for name in ("weight_dropout", "embedding_dropout", "locked_dropout"):
            if getattr(model, name):
                raise ConfigError(
                    f"model.{name} is a setting of the recurrent model "
                    f"(model.architecture=rnn); leave it out for the Transformer"
                )
    elif model.weight_dropout > 0 and model.block != "none":
        raise ConfigError(
            "model.weight_dropout drops the recurrent kernels of stacked layers "
            "(model.block=none), not Hawk's blocks: set model.weight_dropout=0"
        )
    elif model.weight_dropout > 0 and (refusal := _weight_dropout_refusal(model)):
        raise ConfigError(f"model.weight_dropout: {refusal}")
    elif model.block == "hawk" and model.init_scale > 0:
        raise ConfigError(
            "model.init_scale applies to model.block=none; Hawk's blocks keep their "
            "own initialisers: set model.init_scale=0"
        )
    elif (
        model.tie_weights
        and model.block == "none"
        and model.units != model.embedding_dim
    ):
        raise ConfigError(
            "model.tie_weights needs model.units == model.embedding_dim, got "
            f"{model.units} and {model.embedding_dim}"
        )
    if config.train.lr_schedule == "noam" and config.train.lr_decay != 1.0:
        raise ConfigError(
            f"train.lr_schedule=noam has its own decay; train.lr_decay="
            f"{config.train.lr_decay:g} would be ignored: set it to 1, or "
            "train.lr_schedule=constant"
        )
    data = config.data
    if data.vocabulary_size == 1:
        raise ConfigError(
            "data.vocabulary_size=1 keeps only <unk>, so every token is unknown; "
            "set it to 0 (all tokens) or at least 2"
        )
    if data.validation_fraction + data.test_fraction >= 1:
        raise ConfigError(
            "data.validation_fraction + data.test_fraction must be below 1, got "
            f"{data.validation_fraction} + {data.test_fraction}"
        )


def _weight_dropout_refusal(model) -> str | None:
    """Why the cell of `model.cell_type` takes no `model.weight_dropout` (a cell
    without a recurrent kernel), or None."""
    from rnnkit.layers import get_recurrent

    try:
        get_recurrent(model.cell_type)(1, weight_dropout=model.weight_dropout)
    except (TypeError, ValueError) as error:
        return str(error)
    return None
