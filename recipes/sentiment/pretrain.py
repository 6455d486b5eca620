"""The pre-training stages of `rnnkit run sentiment` (`model.pretrain`).

`model.pretrain` names a language-model config file (for IMDB,
recipes/language_model/configs/imdb_reviews.toml: the training reviews' text only).
The run first trains that word-level language model as its stage `language_model`
(and, with `model.pretrain_backward`, the same on reversed text as the stage
`language_model_backward`), each a complete language-model run directory under
`RUN_DIR/stages/`, then trains the classifier initialised from them, exactly as
`model.pretrained` (and `model.pretrained_backward`) would. `rnnkit run sentiment
--resume RUN_DIR` keeps a finished stage, continues an interrupted one and then the
classifier (`rnnkit.training.stages`). The language model takes the classifier's
`train.seed`, `model.cell_type`, `model.units` and `model.embedding_dim` (what the
transfer copies) unless `model.pretrain_set` sets them, so that every seed, cell and
width of the whole path is one setting.

The language model is a recipe of its own: it is loaded by its registered name, never
imported from here.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from rnnkit.errors import ConfigError

if TYPE_CHECKING:
    from rnnkit_recipes.sentiment.config import SentimentConfig

# The stages' names (their folders under RUN_DIR/stages/).
FORWARD_STAGE = "language_model"
BACKWARD_STAGE = "language_model_backward"
# What the transfer copies: the language model takes these from the classifier.
_SHAPE_KEYS = ("cell_type", "units", "embedding_dim")


def language_model_config(config: SentimentConfig):
    """The language-model recipe and the config of the forward stage: the file of
    `model.pretrain` with the classifier's seed, cell type and sizes, then
    `model.pretrain_set`, applied; one-line errors for a missing file, unknown
    settings or a model that does not read words."""
    from rnnkit import config as config_lib
    from rnnkit import registry

    path = Path(config.model.pretrain)
    if not path.is_file():
        raise ConfigError(
            f"model.pretrain: no file {path}; give a language_model config file, "
            "e.g. recipes/language_model/configs/imdb_reviews.toml"
        )
    recipe = registry.load("language_model")
    try:
        values = config_lib.parse_assignments(
            recipe.Config, list(config.model.pretrain_set)
        )
    except ConfigError as error:
        raise ConfigError(f"model.pretrain_set: {error}") from None
    inherited = {"train.seed": config.train.seed}
    for key in _SHAPE_KEYS:
        ours = inherited[f"model.{key}"] = getattr(config.model, key)
        theirs = values.get(f"model.{key}", ours)
        if theirs != ours:  # what the transfer copies must agree
            raise ConfigError(
                f"model.pretrain_set: the language model's model.{key} is {theirs!r}, "
                f"the classifier's {ours!r}; leave model.{key} out of "
                "model.pretrain_set (the language model takes the classifier's)"
            )
    values = {**inherited, **values}
    stage_config = config_lib.resolve(recipe.Config, path, values)
    if stage_config.data.level != "word":
        raise ConfigError(
            f"model.pretrain: {path} trains a {stage_config.data.level}-level "
            'language model; the classifier reads words (set data.level = "word")'
        )
    if stage_config.data.reverse:
        raise ConfigError(
            f"model.pretrain: {path} reads text backwards (data.reverse); give the "
            "forward model's config (model.pretrain_backward adds the backward one)"
        )
    _check_architecture(stage_config, path)
    return recipe, stage_config


def _check_architecture(stage_config, path: Path) -> None:
    """Before any training: the language model must be stacked recurrent layers
    (its cell type and sizes are the classifier's: `language_model_config`);
    otherwise a one-line error."""
    if stage_config.model.architecture != "rnn":
        raise ConfigError(
            f"model.pretrain: {path} trains a {stage_config.model.architecture} "
            "language model; the classifier starts from a recurrent one "
            '(model.architecture = "rnn")'
        )
    if stage_config.model.block != "none":
        raise ConfigError(
            f"model.pretrain: {path} trains a language model of "
            f"{stage_config.model.block} blocks, whose weights have no place in the "
            "classifier's recurrent layers (model.pretrain_set=model.block=none)"
        )


def checked_language_model_config(config: SentimentConfig):
    """`language_model_config` with the language-model recipe's own checks of that
    config, its errors naming model.pretrain: what `check_config` (and so
    `--dry-run`) and the run ask before anything trains."""
    recipe, stage_config = language_model_config(config)
    try:
        recipe.check_config(stage_config)
    except ConfigError as error:
        raise ConfigError(
            f"model.pretrain: the language model's config: {error}"
        ) from None
    return recipe, stage_config


def run_pretraining(config: SentimentConfig, run_dir: Path) -> SentimentConfig:
    """Runs the stages into `run_dir/stages/` (kept when finished, resumed when
    interrupted); returns the classifier's config, pointing at them."""
    from rnnkit.training.stages import run_stage

    recipe, forward_config = checked_language_model_config(config)
    values = {
        "model.pretrain": None,
        "model.pretrain_backward": False,
        "model.pretrain_set": (),
        "model.pretrained": str(
            run_stage(recipe, forward_config, run_dir, FORWARD_STAGE)
        ),
    }
    if config.model.pretrain_backward:
        backward_config = forward_config.with_values({"data.reverse": True})
        values["model.pretrained_backward"] = str(
            run_stage(recipe, backward_config, run_dir, BACKWARD_STAGE)
        )
    return config.with_values(values)
