"""Config sections that several recipes share, built on rnnkit.config's:
`TransformerModelConfig` (a `model` section that offers the Transformer beside a
recipe's recurrent model) and `ScheduledTrainConfig` (a `train` section with the
Transformer paper's learning-rate schedule). The translation and language-model
recipes extend them; rnnkit.config holds only what every recipe's config is made of.
Light, as rnnkit.config is (no TensorFlow, no Keras).
"""

from __future__ import annotations

import dataclasses

from rnnkit.config import ModelConfig, TrainConfig, field

__all__ = ["ScheduledTrainConfig", "TransformerModelConfig"]


@dataclasses.dataclass
class TransformerModelConfig(ModelConfig):
    """Base of a `model` section that offers the Transformer (Vaswani et al. 2017)
    beside a recipe's own recurrent model; `model.architecture` picks one.

    The recipe adds its recurrent fields after these and may declare a field again
    to give it its own default or help text (the field keeps its place).
    """

    architecture: str = field(
        "rnn",
        help="rnn: the recipe's recurrent model; transformer: Transformer blocks "
        "(model_dim, num_heads, feedforward_dim, norm_first, positional_encoding).",
        choices=("rnn", "transformer"),
    )
    model_dim: int = field(
        256, help="Transformer: d, the size of embeddings and blocks.", at_least=1
    )
    num_heads: int = field(
        8, help="Transformer: attention heads (must divide model_dim).", at_least=1
    )
    feedforward_dim: int = field(
        1024, help="Transformer: inner size of the feed-forward sublayers.", at_least=1
    )
    norm_first: bool = field(
        True,
        help="Transformer: pre-norm blocks, x + f(LayerNorm(x)), and a final "
        "LayerNorm (false: the paper's post-norm, LayerNorm(x + f(x))).",
    )
    positional_encoding: str = field(
        "sinusoidal",
        help="Transformer: fixed sinusoids or learned position embeddings.",
        choices=("sinusoidal", "learned"),
    )

    @staticmethod
    def search_sizes(hp) -> dict:
        """The Transformer's sizes for a recipe's `search_space` (Keras Tuner
        hyperparameters `hp`): {"model.model_dim": ..., "model.num_heads": ...,
        "model.feedforward_dim": ...}; the recipe adds its depth and dropout."""
        return {
            "model.model_dim": hp.Choice("model_dim", [128, 256, 512]),
            "model.num_heads": hp.Choice("num_heads", [4, 8]),
            "model.feedforward_dim": hp.Choice("feedforward_dim", [512, 1024, 2048]),
        }


@dataclasses.dataclass
class ScheduledTrainConfig(TrainConfig):
    """Base of a `train` section with the Transformer paper's learning-rate schedule
    as an option; `rnnkit.optimizers.configured_learning_rate` reads it."""

    lr_schedule: str = field(
        "constant",
        help="constant: train.learning_rate throughout; noam: the Transformer "
        "paper's warm-up then 1/sqrt(step) decay, peaking at train.learning_rate "
        "after train.warmup_steps steps.",
        choices=("constant", "noam"),
    )
    warmup_steps: int = field(
        4000, help="noam: steps of the linear warm-up.", at_least=1
    )
