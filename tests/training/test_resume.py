"""A resumed run trains as if it had never stopped.

`BackupAndRestore` keeps the weights, the optimizer and the epoch, but not the random
streams of training: without more, a run resumed after epoch k draws again the dropout
masks and batch orders of epochs 1..k (measured on Multi30k: the GRU's training loss
read 0.3 nats low for the three epochs after its resume, then jumped back). The runner
saves the layers' seed-generator states beside the backup and moves the training set's
reshuffling on; this test holds the resumed history to the uninterrupted one.
"""

from __future__ import annotations

import dataclasses
import logging

import keras
import numpy as np
import pytest
import tensorflow as tf
from rnnkit_recipes.stock.recipe import StockRecipe
from rnnkit_recipes.translation.recipe import TranslationRecipe

from rnnkit import config as config_lib
from rnnkit.recipe import RecipeData
from rnnkit.training import callbacks, run_dir, runner
from tests.shared_data import require
from tests.stock_support import ROOT
from tests.stock_support import SMOKE_CONFIG as STOCK_SMOKE

TRANSLATION_DATA = ROOT.parent / "shared" / "data" / "translation"
MULTI30K = TRANSLATION_DATA / "multi30k_{split}.{lang}.gz"
SMOKE_CONFIG = ROOT / "recipes" / "translation" / "configs" / "smoke.toml"


class EpochsBegun(keras.callbacks.Callback):
    def __init__(self):
        super().__init__()
        self.epochs: list[int] = []

    def on_epoch_begin(self, epoch, logs=None):
        self.epochs.append(epoch)


class StopAfterEpoch(keras.callbacks.Callback):
    """Interrupts training once epoch `epoch` (1-based) and its backup are written,
    as Ctrl-C would."""

    def __init__(self, epoch: int):
        super().__init__()
        self.epoch = epoch

    def on_epoch_end(self, epoch, logs=None):
        if epoch + 1 == self.epoch:
            raise KeyboardInterrupt


CASES = {
    # No early stopping: stopped after the first epoch, resumed and stopped again after
    # the second, resumed to the end, the third (a resume from a resumed run's backup).
    "after-epochs-1-and-2": ({"train.patience": 0, "train.epochs": 3}, (1, 2)),
    # Stock: a training split of arrays, which the runner batches and reshuffles.
    "arrays-after-epoch-2": ({"model.dropout": 0.3, "train.epochs": 4}, (2,)),
    # The same, interrupted by a version that named the state file random_state.json.
    "arrays-old-state-file": ({"model.dropout": 0.3, "train.epochs": 4}, (2,)),
    # Early stopping (patience 1): the best val loss at epoch 2 (0.529 against 0.591
    # and 0.534 on either side), so the run stops after epoch 3; stopped after epoch
    # 2, the resumed run must stop after epoch 3 too and keep epoch 2's weights (with
    # the best loss forgotten it would take epoch 3 as its best and run on; with the
    # best weights lost it would keep epoch 3's, and its test figures would differ).
    "arrays-early-stopping": (
        {
            "model.dropout": 0.3,
            "train.patience": 1,
            "train.epochs": 12,
            "train.learning_rate": 0.1,
        },
        (2,),
    ),
}
# The translation case starts four translation runs (a minute on a 2-core CPU); the
# stock ones, seconds each, run in a quick local pass (-m "not slow") too. Early
# stopping is resumed in the stock case only: a translation case of its own (three
# more runs) checked the same state.
SLOW_CASES = {"after-epochs-1-and-2"}


def _recipe_and_config(case: str):
    overrides, _ = CASES[case]
    if case.startswith("arrays"):
        recipe = StockRecipe()
        return recipe, config_lib.resolve(recipe.Config, str(STOCK_SMOKE), overrides)
    require(TRANSLATION_DATA / "multi30k_train.de.gz")
    recipe = TranslationRecipe()
    return recipe, config_lib.resolve(
        recipe.Config,
        str(SMOKE_CONFIG),
        {
            "data.path": str(MULTI30K),
            "data.limit": 100,
            "model.dropout": 0.5,
            "evaluation.beam_width": 1,
            "evaluation.heatmaps": 0,
            **overrides,
        },
    )


@pytest.mark.parametrize(
    "case",
    [
        pytest.param(case, marks=[pytest.mark.slow] * (case in SLOW_CASES))
        for case in CASES
    ],
)
def test_a_resumed_run_repeats_the_uninterrupted_run(tmp_path, caplog, case):
    """Translation (a `tf.data` set reshuffled each epoch, dropout 0.5 in the GRU and
    the attention's outputs) and stock (arrays, dropout before the output): stopped
    after an epoch and resumed in a fresh run (once, or stopped again and resumed
    again), its training and validation losses, its epochs and its test figures are
    those of the run that never stopped."""
    recipe, config = _recipe_and_config(case)
    stops = CASES[case][1]
    stopped_after = stops[-1]
    whole = runner.run(recipe, config, tmp_path / "whole", verbose=0)
    backup = tmp_path / "resumed" / run_dir.BACKUP_DIR
    for number, stop in enumerate(stops):
        with pytest.raises(KeyboardInterrupt):
            runner.run(
                recipe,
                config,
                tmp_path / "resumed",
                resume=number > 0,
                verbose=0,
                callbacks=[StopAfterEpoch(stop)],
            )
        assert (backup / callbacks.RESUME_STATE_FILE).is_file()
    if case.endswith("old-state-file"):
        (backup / callbacks.RESUME_STATE_FILE).rename(backup / "random_state.json")
    begun = EpochsBegun()
    with caplog.at_level(logging.WARNING, logger="rnnkit"):
        resumed = runner.run(
            recipe,
            config,
            tmp_path / "resumed",
            resume=True,
            verbose=0,
            callbacks=[begun],
        )
    # It continued (a run started afresh would repeat the history too).
    assert begun.epochs == list(range(stopped_after, len(whole.history)))
    assert "random state" not in caplog.text
    if config.train.patience:  # the case the comment above describes
        val = [row["val_loss"] for row in whole.history]
        assert val.index(min(val)) + 1 == stopped_after < len(val)
        assert len(val) < config.train.epochs
    assert len(resumed.history) == len(whole.history)
    for expected, actual in zip(whole.history, resumed.history, strict=True):
        for key in ("loss", "val_loss"):
            assert actual[key] == pytest.approx(expected[key], rel=1e-5), (
                f"epoch {expected['epoch']:.0f} {key}"
            )
    for key, value in whole.metrics["test"]["model"].items():
        assert resumed.metrics["test"]["model"][key] == pytest.approx(value), key


# A set of unknown length ends its first epoch by running out, as Keras warns.
@pytest.mark.filterwarnings("ignore:Your input ran out of data")
@pytest.mark.parametrize("known_length", [True, False])
def test_fit_takes_the_iterators_an_epoch_that_resuming_skips(known_length):
    """`_keras_private.fit_iterators_per_epoch` is what this Keras's `fit` does: with
    it, the batch orders of a reshuffling set in fit's epochs are the orders of the
    iterators numbered 0, n, 2n, ... taken from a copy of the set."""
    from rnnkit import _keras_private

    def dataset():
        numbers = tf.data.Dataset.range(8).shuffle(8, seed=2)
        if not known_length:
            numbers = numbers.filter(lambda number: number >= 0)
        return numbers.map(lambda n: (tf.cast([n], "float32"),) * 2).batch(8)

    seen = []

    class Record(keras.layers.Layer):
        def call(self, inputs):
            seen.append(np.asarray(inputs).ravel().tolist())
            return inputs

    model = keras.Sequential([keras.Input((1,)), Record(), keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse", run_eagerly=True)
    model.fit(dataset(), epochs=3, shuffle=False, verbose=0)
    per_epoch = _keras_private.fit_iterators_per_epoch(dataset())
    assert per_epoch == (2 if known_length else 1)
    copy = dataset()
    orders = [
        next(iterator)[0].numpy().ravel().tolist()
        for iterator in [iter(copy) for _ in range(3 * per_epoch)]
    ]
    assert seen == orders[::per_epoch]


def test_a_training_set_of_arrays_is_drawn_in_a_new_order_each_epoch():
    """Keras shuffles arrays in one order for every epoch once a seed is set; the
    runner's `fit` draws a new order each epoch, every example once per epoch, the
    same orders again for the same seed and others for another."""

    @dataclasses.dataclass
    class Config(config_lib.RecipeConfig):
        train: config_lib.TrainConfig = config_lib.section(
            config_lib.TrainConfig, batch_size=4, epochs=3, patience=0
        )

    seen: list[list[float]] = []

    class Record(keras.layers.Layer):
        def call(self, inputs):
            seen.append(np.asarray(inputs).ravel().tolist())
            return inputs

    numbers = np.arange(12, dtype="float32")[:, None]

    def orders(seed: int) -> list[list[float]]:
        seen.clear()
        keras.utils.set_random_seed(seed)
        config = Config().with_values({"train.seed": seed})
        model = keras.Sequential([keras.Input((1,)), Record(), keras.layers.Dense(1)])
        model.compile(optimizer="sgd", loss="mse", run_eagerly=True)
        data = RecipeData(train=(numbers, numbers), validation=None, test=None)
        runner.fit(model, data, config, callbacks=[], verbose=0)
        return [sum(seen[i : i + 3], []) for i in range(0, len(seen), 3)]

    first = orders(3)
    assert len(first) == 3
    for epoch in first:
        assert sorted(epoch) == numbers.ravel().tolist()
    assert first[0] != first[1] != first[2] != first[0]
    assert orders(3) == first
    assert orders(4) != first
