"""The recipe contract: what a recipe provides and what the runner does with it.

A recipe describes one sequence task — its data, its model, its search space, its honest
evaluation — and nothing else. The runner (`rnnkit.training.runner`) owns everything
around it: seeds, device and distribution strategy, mixed precision, `model.fit` and its
callbacks, the run directory and its atomic writes. Recipes never call `fit` themselves.

Writing a recipe
----------------
1. Configuration. Subclass the section dataclasses of `rnnkit.config` and declare each
   value with `field(default, help=...)`; combine them in a `RecipeConfig` subclass:

       @dataclasses.dataclass
       class MyData(DataConfig):          # DataConfig already has `path`
           window: int = field(30, help="Past days the model sees.")

       @dataclasses.dataclass
       class MyModel(ModelConfig):
           units: int = field(64, help="Recurrent units per layer.")
           cell_type: str = field("lstm", help="Cell.", choices=("lstm", "gru"))

       @dataclasses.dataclass
       class MyConfig(RecipeConfig):
           data: MyData = section(MyData)
           model: MyModel = section(MyModel)
           train: TrainConfig = section(TrainConfig, epochs=20)  # new defaults

   Every key is then addressable as `data.window`, `model.units`, `train.epochs` in a
   TOML file (`[data]` table, `window = 30`), with `--set data.window=30`, and with the
   generated option `--data.window 30`.

2. The class. Subclass `Recipe`, set `name`, `summary` and `Config`, implement the five
   methods below, and keep the module light: import Keras, TensorFlow and pandas inside
   the methods, because `rnnkit list` imports every recipe module to read its summary
   and must not import TensorFlow.

3. Registration. Declare the class as an entry point of the group "rnnkit.recipes":

       [project.entry-points."rnnkit.recipes"]
       my_task = "my_package.recipe:MyRecipe"

   Built-in recipes live in `recipes/<name>/` (installed as `rnnkit_recipes.<name>`)
   with the same files everywhere: `__init__.py`, `recipe.py`, `data.py`,
   `configs/default.toml`, `configs/smoke.toml`, `README.md`.

The methods
-----------
- `load_data(config) -> RecipeData`: the train / validation / test splits, plus anything
  the model or the evaluation needs to know (vocabularies, scalers, dates), from the
  default source or `config.data.path`. Raise `DataError` with a one-line message for a
  missing, unreadable or malformed source. Splits are `(x, y)` tuples of arrays (the
  runner batches them with `train.batch_size` and, with `train.shuffle`, draws a new
  order each epoch from `train.seed`: `rnnkit.training.training_set`) or already
  batched `tf.data.Dataset`s of `(x, y)` (the recipe batches them with
  `train.batch_size`).
- `build_model(config, data) -> keras.Model`: compiled, built only from rnnkit layers
  and models and Keras layers (no `Lambda`), so `keras.saving.load_model` reloads it
  in safe mode. Put preprocessing that prediction needs inside the model
  where Keras has a layer for it (`Normalization`, `TextVectorization`, ...), so that
  `model.keras` alone is enough to predict. Read `config.train.learning_rate` for the
  optimizer. Under a mixed `train.precision` the global policy is already
  `mixed_bfloat16` or `mixed_float16` when this is called: give the output layer
  `dtype="float32"` (outputs, softmax, losses and metrics stay float32), and let
  `compile` wrap the optimizer for loss scaling under mixed_float16 (Keras does).
- `search_space(hp, config) -> config`: a new config whose values come from the Keras
  Tuner `hp` object, for example
  `config.with_values({"model.units": hp.Int("units", 16, 128)})`.
  Model code never calls `hp.*`; `build_model` only reads the config.
- `evaluate(model, data, config) -> Metrics`: figures on `data.test` as a table
  {system: {metric: value}}. The first row is "model"; every other row is a baseline
  computed on the same test examples (e.g. "persistence"), so the two can be read side
  by side. Values are plain floats.
- `predict(model, inputs, config) -> list[str]`: `inputs` are the command-line arguments
  of `rnnkit predict` (file paths, sentences, ...); return human-readable lines.

Optional hooks (defaults do nothing or refuse):
- `write_plots(model, data, config, plot_dir)`: extra figures for the run directory,
  written with `rnnkit.plots` (atomic PNG writes). The runner already plots the
  training curves.
- `check_config(config)`: raise `ConfigError` (one line naming the key and the fix)
  for a combination of values that cannot work, e.g. a vocabulary too small to hold
  one token besides the special ones. `rnnkit run` calls it before it writes or loads
  anything, and `--dry-run` calls it too; call `super().check_config(config)` first.
  The base refuses `evaluation.folds > 0` for a recipe without `backtest_folds`.
- `backtest_folds(data, config)`: the per-fold datasets of a walk-forward backtest,
  needed only if the recipe supports `evaluation.folds > 0`. The runner trains a fresh
  model on each and reports per-fold and mean figures.
- `inference_model(model)`: the model that `model.keras` holds, evaluated and served,
  when training fits another graph sharing its weights (a forecaster's teacher-forced
  decoder, a likelihood's parameters under sampled quantiles); default: `model` itself.
- `ensemble(models, configs, combine="mean") -> (model, config)`: one model of several
  runs' models (`rnnkit ensemble RUN...`) and the config that evaluates it; `combines`
  names its ways; `rnnkit.training.ensemble.require_shared` checks what runs share.
- `evaluate_validation(model, data, config)`: `evaluate` on the validation split
  (`rnnkit evaluate --split validation`); the default refuses.
- `objective`: the Keras metric that tuning optimises (default "val_loss"); Keras Tuner
  infers the direction from the name (a loss is minimised, an accuracy maximised).
- `callbacks(config, data)`: extra Keras callbacks for every fit of this recipe's
  model (the main run, backtest folds, tuning trials), e.g. one that resets the
  recurrent states of a stateful model at the start of every epoch and before every
  evaluation (the language model's truncated BPTT). They run after the runner's own
  callbacks. Default: none.
- `single_device(config)`: why this configuration trains on one device only (e.g. the
  language model's truncated BPTT keeps its state in one device's stateful layers),
  or None. With a reason, `train.strategy=auto` keeps one device on a machine with
  several GPUs and `mirrored`/`multiworker` stop with a one-line error. Default: None.
  (A model that reads raw strings needs nothing here: under `mirrored` the runner
  runs its string-reading first layer in the input pipeline.)
- `export_plan(model, config, format)`: what the exported model takes and returns
  in `format` ("saved_model", "tflite", "onnx"), as an `rnnkit.export.ExportPlan`
  (signatures, LiteRT / ONNX artefacts, vocabulary files, formats refused and why).
  `rnnkit export RUN_DIR` calls it. Default: None, "this recipe declares no export".
- `split_keys`: the dotted config keys that decide which examples of one source land
  in which split (default: `data.split_seed`, `data.validation_fraction`,
  `data.test_fraction`, those the config has). `rnnkit evaluate RUN_DIR --set KEY=V`
  refuses another value of one of them on the run's own data, since the test split
  would then hold examples the model trained on (`check_same_split`). A split drawn
  from a seed draws it from such a key, never from `train.seed`. A recipe whose data
  sometimes come split already (one file per split) says which keys a config uses
  with `split_keys_of(config)`.
- `predict_options`: options of `rnnkit predict` that set config values for that
  prediction, as {option name: dotted config key}; e.g. {"beam":
  "evaluation.beam_width"} makes `rnnkit predict RUN_DIR --beam 5 INPUT...` predict
  with `evaluation.beam_width = 5` (default: none).
- `predict_records(model, inputs, config, calls)`: what `rnnkit serve` answers on
  `/predict`: one JSON-ready dict per input value (a text, a series, image bytes;
  never a path to read), with what `predict` prints and what a page can draw
  (probabilities, attention weights, intervals). `calls` is None for the Keras model,
  else the served runtime's functions by export artefact name; `record_options` names
  its keyword options that a request may set (the sentiment recipe's `explain`).
  Default: "does not answer /predict yet". `predict_stream(model, inputs, config,
  calls)`: one prediction's text piece by piece as it is made (the language model's
  sampled text), for `rnnkit serve`'s streaming route; default: "does not stream".

What the commands call
----------------------
`rnnkit run` resolves the config, calls `check_config`, `load_data`, `build_model`,
fits, then `evaluate` and `write_plots`. `rnnkit evaluate RUN_DIR [--data PATH]` reloads
`model.keras` and `config.toml`, sets `data.path` to PATH if given, and calls
`load_data` and `evaluate` (`evaluate_validation` with `--split validation`; no
training; `check_same_split` first). `rnnkit predict RUN_DIR INPUT...` reloads them and
calls `predict` without loading any data. `rnnkit export RUN_DIR --format F` reloads
them and writes what `export_plan` declares. `rnnkit tune` calls `search_space` and
`build_model` once per trial and minimises `objective` on the validation split.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import tempfile
from collections.abc import Collection, Iterable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from rnnkit.config import (
    DataConfig,
    EvaluationConfig,
    ModelConfig,
    RecipeConfig,
    TrainConfig,
    field,
    section,
)
from rnnkit.errors import ConfigError, DataError, RnnkitError

log = logging.getLogger("rnnkit")

if TYPE_CHECKING:
    import keras
    import keras_tuner

__all__ = [
    "ConfigError",
    "DataConfig",
    "DataError",
    "EvaluationConfig",
    "Metrics",
    "ModelConfig",
    "Recipe",
    "RecipeConfig",
    "RecipeData",
    "RnnkitError",
    "TrainConfig",
    "field",
    "csv_files_of",
    "csv_texts_of",
    "section",
    "texts_of",
]

# {system: {metric: value}}: the "model" row first, then one row per baseline.
Metrics = dict[str, dict[str, float]]


@dataclasses.dataclass
class RecipeData:
    """The splits a recipe hands to the runner; subclasses add what else they need.

    Each split is an `(x, y)` tuple of arrays (or of dicts / tuples of arrays for models
    with several inputs), which the runner batches, or a batched `tf.data.Dataset`.
    """

    train: Any
    validation: Any
    test: Any


class Recipe:
    """Base class of every recipe. See the module docstring for the contract."""

    name: ClassVar[str]
    summary: ClassVar[str]
    Config: ClassVar[type[RecipeConfig]] = RecipeConfig
    objective: ClassVar[str] = "val_loss"
    predict_options: ClassVar[dict[str, str]] = {}
    record_options: ClassVar[tuple[str, ...]] = ()
    split_keys: ClassVar[tuple[str, ...]] = (
        "data.split_seed",
        "data.validation_fraction",
        "data.test_fraction",
    )

    def load_data(self, config: RecipeConfig) -> RecipeData:
        """The train / validation / test splits (and metadata) for `config`."""
        raise NotImplementedError

    def build_model(self, config: RecipeConfig, data: RecipeData) -> keras.Model:
        """A compiled model made of rnnkit and Keras layers only."""
        raise NotImplementedError

    def search_space(
        self, hp: keras_tuner.HyperParameters, config: RecipeConfig
    ) -> RecipeConfig:
        """A new config with tunable values drawn from `hp`."""
        raise NotImplementedError(f"recipe {self.name!r} defines no search space")

    def evaluate(
        self, model: keras.Model, data: RecipeData, config: RecipeConfig
    ) -> Metrics:
        """Test-split figures: the model's and the baselines' {system: {metric: v}}."""
        raise NotImplementedError

    def evaluate_validation(
        self, model: keras.Model, data: RecipeData, config: RecipeConfig
    ) -> Metrics:
        """The same figures on the validation split (`rnnkit evaluate --split
        validation`; optional hook), to compare trained runs or ensembles without
        looking at the test split; raises ConfigError where the recipe has none."""
        raise ConfigError(
            f"recipe {self.name!r} does not score its validation split; rnnkit "
            "evaluate --split validation takes runs of a recipe that defines it "
            "(forecasting, sentiment)"
        )

    def predict(
        self, model: keras.Model, inputs: Sequence[str], config: RecipeConfig
    ) -> list[str]:
        """Human-readable predictions for the command-line `inputs`."""
        raise NotImplementedError

    def predict_records(
        self,
        model: keras.Model,
        inputs: Sequence[Any],
        config: RecipeConfig,
        calls: dict[str, Any] | None = None,
    ) -> list[dict[str, Any]]:
        """JSON-ready predictions, one dict per input, for `rnnkit serve`'s
        `/predict` (optional hook). `inputs` are values (texts, series, image
        bytes), never paths to read. `calls`: None to compute with `model`, else
        {export artefact name: function of named numpy inputs} in the served
        runtime (ONNX, LiteRT, a SavedModel's signatures)."""
        raise RnnkitError(
            f"recipe {self.name!r} does not answer /predict yet; call "
            "/v1/models/NAME:predict with its model inputs"
        )

    def predict_stream(
        self,
        model: keras.Model,
        inputs: Sequence[Any],
        config: RecipeConfig,
        calls: dict[str, Any] | None = None,
    ) -> Iterator[str]:
        """The text of one prediction piece by piece as it is made, for `rnnkit
        serve`'s streaming route (optional hook; the language model's sampled
        text). Default: "does not stream"."""
        raise RnnkitError(
            f"recipe {self.name!r} does not stream its predictions; POST "
            "/models/NAME/predict"
        )

    def write_plots(
        self,
        model: keras.Model,
        data: RecipeData,
        config: RecipeConfig,
        plot_dir: Path,
    ) -> None:
        """Writes extra PNG figures into `plot_dir` (optional hook)."""

    def prepare(self, config: RecipeConfig, run_dir: Path) -> RecipeConfig:
        """Runs the stages that come before the main fit (a pre-training run of its
        own) into `run_dir/stages/NAME`, and returns the config the main fit uses
        (optional hook; default: nothing to run, `config` itself). `rnnkit run` and
        `--resume` call it; a stage finished before must be kept, not retrained, and
        an interrupted one resumed (`rnnkit.training.stages.run_stage`)."""
        return config

    def single_device(self, config: RecipeConfig) -> str | None:
        """Why `config` trains on one device only, or None when it can be mirrored
        (optional hook). With a reason, `train.strategy=auto` keeps one device and
        `mirrored`/`multiworker` stop with a one-line error that gives it."""
        return None

    def callbacks(
        self, config: RecipeConfig, data: RecipeData
    ) -> list[keras.callbacks.Callback]:
        """Extra Keras callbacks for every fit of this recipe (optional hook)."""
        return []

    def inference_model(self, model: keras.Model) -> keras.Model:
        """The model a trained `build_model` model is written, evaluated and served
        as (optional hook): the model itself, or one sharing its weights when
        training runs another graph (teacher forcing, a likelihood's parameters)."""
        return model

    def export_plan(self, model: keras.Model, config: RecipeConfig, format: str) -> Any:
        """The `rnnkit.export.ExportPlan` of `model` in `format` (optional hook);
        None: the recipe declares no export."""
        return None

    def ensemble(
        self,
        models: Sequence[keras.Model],
        configs: Sequence[RecipeConfig],
        combine: str = "mean",
    ) -> tuple[keras.Model, RecipeConfig]:
        """One model of the trained `models` of several runs (`rnnkit ensemble`), their
        outputs combined by `combine` (one of `combines`), and the config that feeds
        and evaluates it (optional hook); ConfigError when they cannot be combined."""
        raise ConfigError(
            f"recipe {self.name!r} does not combine runs: its outputs are not "
            "averaged; rnnkit ensemble takes runs of a recipe that defines it "
            "(forecasting, sentiment)"
        )

    @property
    def combines(self) -> tuple[str, ...]:
        """The `combine` values `ensemble` takes (the mean where it is defined)."""
        return () if type(self).ensemble is Recipe.ensemble else ("mean",)

    @property
    def backtests(self) -> bool:
        """True when the recipe implements `backtest_folds` (`evaluation.folds > 0`)."""
        return type(self).backtest_folds is not Recipe.backtest_folds

    def check_config(self, config: RecipeConfig) -> None:
        """Raises ConfigError for values that cannot work together (optional hook;
        call `super().check_config(config)` first)."""
        config.train.dtype_policy()  # train.precision against the older switch
        if config.evaluation.folds > 0 and not self.backtests:
            raise ConfigError(
                f"evaluation.folds={config.evaluation.folds}: recipe {self.name!r} "
                "has no walk-forward backtest; set evaluation.folds=0"
            )

    def split_keys_of(self, config: RecipeConfig) -> tuple[str, ...]:
        """The `split_keys` that cut `config`'s data: all of them by default; none
        where the data come split already (one file per split). `check_same_split`
        asks it of the run's config and of the config with the overrides."""
        return self.split_keys

    def check_same_split(
        self,
        config: RecipeConfig,
        overrides: dict,
        recorded: Collection[str] | None = None,
    ) -> None:
        """Raises ConfigError when `overrides` (dotted key: value) of a trained run's
        `config` would cut the run's own data another way (a value of one of
        `split_keys_of(config)` other than the run's, or a cut of data the run read
        already split), so that its test split would hold examples the model trained
        on. Other data (`data.path` changed) is split its own way.

        `recorded`: the keys the run's config.toml sets. A split key it lacks is
        younger than the run, which split its data some other way (a seed from
        `train.seed`, or no shuffle): it may be set, and left unset it draws a
        warning, since today's default may not be the run's split."""
        path = overrides.get("data.path", config.get("data.path"))
        if path != config.get("data.path"):
            return
        flat = config.flat()
        keys = self.split_keys_of(config)
        if not keys and self.split_keys_of(config.with_values(overrides)):
            settings = " ".join(
                f"--set {key}={value}"
                for key, value in overrides.items()
                if key.startswith("data.")
            )
            raise ConfigError(
                f"{settings}: the run read its data split already (one file per "
                "split), and these settings would cut the test split out of them, "
                "out of data the model trained on; evaluate on the run's split (drop "
                "them) or on other data (--data PATH)"
            )
        for key in keys:
            if recorded is not None and key in flat and key not in recorded:
                if key not in overrides and flat[key] is not None:
                    log.warning(
                        "warning: the run's config.toml predates %s, so its data "
                        "may have been split otherwise than with today's %s=%s; "
                        "the test figures may count examples it trained on (give "
                        "the run's value with --set %s=VALUE, or evaluate on other "
                        "data with --data PATH)",
                        key, key, flat[key], key,
                    )  # fmt: skip
                continue
            if key in overrides and overrides[key] != flat.get(key):
                raise ConfigError(
                    f"--set {key}={overrides[key]}: the run's data would be split "
                    f"another way (it trained with {key}={flat.get(key)}), so the "
                    "test split would hold data the model trained on; evaluate on the "
                    f"run's split (drop --set {key}) or on other data (--data PATH)"
                )

    def backtest_folds(
        self, data: RecipeData, config: RecipeConfig
    ) -> Iterable[RecipeData]:
        """Per-fold splits for `evaluation.folds > 0` (optional hook)."""
        raise ConfigError(
            f"recipe {self.name!r} has no walk-forward backtest; "
            "leave evaluation.folds at 0"
        )


def texts_of(inputs: Sequence[Any], what: str) -> list[str]:
    """`inputs` as a list of texts for a recipe's `predict_records`.

    Raises:
        RnnkitError: no input, or one that is not a string.
    """
    if isinstance(inputs, str) or not isinstance(inputs, Sequence):
        inputs = [inputs]
    if not inputs:
        raise RnnkitError(f"nothing to predict: give {what}")
    for index, value in enumerate(inputs):
        if not isinstance(value, str):
            raise RnnkitError(
                f"input {index} is {type(value).__name__} {str(value)[:40]!r}, not "
                f"a text: give {what} as a string"
            )
    return list(inputs)


def csv_texts_of(inputs: Sequence[Any], what: str) -> list[str]:
    """`inputs` as CSV texts for a recipe's `predict_records`: each a CSV text, or
    a JSON object of equal-length columns ({"time": [...], "target": [...]}).

    Raises:
        RnnkitError: no input, one of another kind, or columns of unequal length.
    """
    import pandas as pd

    if isinstance(inputs, str | dict) or not isinstance(inputs, Sequence):
        inputs = [inputs]
    texts = []
    for index, value in enumerate(inputs):
        if isinstance(value, dict):
            lengths = {len(v) if isinstance(v, list) else -1 for v in value.values()}
            if len(lengths) != 1 or -1 in lengths or not value:
                raise RnnkitError(
                    f"input {index}: give {what} as columns of equal length, "
                    '{"column": [values...], ...}'
                )
            value = pd.DataFrame(value).to_csv(index=False)
        texts.append(value)
    return texts_of(texts, what)


@contextlib.contextmanager
def csv_files_of(inputs: Sequence[Any], what: str, name: str) -> Iterator[list[str]]:
    """`csv_texts_of(inputs, what)` written to files called `name` in a temporary
    folder (one folder per input), for a recipe whose reader takes a path, as
    `rnnkit predict` reads a file; the folder is removed on leaving the block.

    Raises:
        RnnkitError: as `csv_texts_of`.
    """
    texts = csv_texts_of(inputs, what)
    with tempfile.TemporaryDirectory() as folder:
        paths = []
        for index, text in enumerate(texts):
            path = Path(folder) / str(index) / name
            path.parent.mkdir()
            path.write_text(text, encoding="utf-8")
            paths.append(str(path))
        yield paths
