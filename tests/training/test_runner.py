"""rnnkit.training.runner: the run directory it writes, NaN stop, resume, strategies."""

from __future__ import annotations

import dataclasses
import json
import subprocess

import numpy as np
import pytest

from rnnkit.config import DataConfig, TrainConfig, field, section
from rnnkit.errors import ConfigError, DataError, RnnkitError, TrainingError
from rnnkit.recipe import Recipe, RecipeConfig, RecipeData
from rnnkit.training import runner
from rnnkit.training.run_dir import CLAIM_FILE
from tests import preloaded
from tests.stock_support import ROOT


@dataclasses.dataclass
class ToyData(DataConfig):
    poison: bool = field(False, help="Put a NaN in the inputs.")


@dataclasses.dataclass
class ToyConfig(RecipeConfig):
    data: ToyData = section(ToyData)
    train: TrainConfig = section(TrainConfig, epochs=4, batch_size=16, patience=0)


class ToyRecipe(Recipe):
    """Next value of a noisy sine from the previous four (a Dense model, fast)."""

    name = "toy"
    summary = "toy"
    Config = ToyConfig

    def load_data(self, config):
        generator = np.random.default_rng(0)
        steps = np.sin(np.arange(404) / 5.0) + 0.05 * generator.normal(size=404)
        inputs = np.stack([steps[i : i + 4] for i in range(400)]).astype("float32")
        targets = steps[4:404, None].astype("float32")
        if config.data.poison:
            inputs[3, 0] = np.nan
        return RecipeData(
            train=(inputs[:300], targets[:300]),
            validation=(inputs[300:350], targets[300:350]),
            test=(inputs[350:], targets[350:]),
        )

    def build_model(self, config, data):
        import keras

        model = keras.Sequential(
            [keras.Input((4,)), keras.layers.Dense(8), keras.layers.Dense(1)]
        )
        model.compile(keras.optimizers.Adam(config.train.learning_rate), "mse")
        return model

    def evaluate(self, model, data, config):
        inputs, targets = data.test
        predictions = model.predict(inputs, verbose=0)
        return {
            "model": {"mae": float(np.mean(np.abs(predictions - targets)))},
            "last_value": {"mae": float(np.mean(np.abs(inputs[:, -1:] - targets)))},
        }


class InterruptAt:
    """Raises KeyboardInterrupt when epoch `epoch` (0-based) begins."""

    def __new__(cls, epoch):
        import keras

        class Interrupt(keras.callbacks.Callback):
            def on_epoch_begin(self, index, logs=None):
                if index == epoch:
                    raise KeyboardInterrupt

        return Interrupt()


def test_run_writes_the_run_directory(tmp_path):
    result = runner.run(ToyRecipe(), ToyConfig(), tmp_path / "run", verbose=0)
    run_dir = result.run_dir
    for name in (
        "config.toml",
        "model.keras",
        "metrics.json",
        "history.csv",
        "run.json",
    ):
        assert (run_dir / name).is_file(), name
    assert (run_dir / "plots" / "training_curves.png").read_bytes()[:4] == b"\x89PNG"
    assert any((run_dir / "tensorboard").rglob("events.out.tfevents.*"))
    assert not (run_dir / "backup").exists()
    assert not list(run_dir.rglob(".*.tmp-*"))
    run_info = json.loads((run_dir / "run.json").read_text())
    assert run_info["recipe"] == "toy" and run_info["status"] == "completed"
    assert run_info["epochs"] == 4
    # The claim is gone and the listing is the directory's.
    assert not (run_dir / CLAIM_FILE).exists()
    made = [p for p in run_dir.rglob("*") if p.is_file() and p.name != "run.json"]
    assert run_info["files"] == sorted(str(p.relative_to(run_dir)) for p in made)
    # run.json is the last file written: every other file is older or as old.
    newest = max(p.stat().st_mtime_ns for p in run_dir.rglob("*") if p.is_file())
    assert (run_dir / "run.json").stat().st_mtime_ns == newest
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert metrics == result.metrics
    assert [row["epoch"] for row in runner.read_history(run_dir / "history.csv")] == [
        1,
        2,
        3,
        4,
    ]


def test_run_refuses_a_used_directory(tmp_path):
    (tmp_path / "used").mkdir()
    (tmp_path / "used" / "something").write_text("x")
    with pytest.raises(RnnkitError, match="not empty.*--resume"):
        runner.run(ToyRecipe(), ToyConfig(), tmp_path / "used", verbose=0)


def test_nan_loss_stops_with_a_clear_message(tmp_path):
    config = ToyConfig().with_values({"data.poison": True})
    with pytest.raises(
        TrainingError, match="loss became NaN in epoch 1.*learning_rate"
    ):
        runner.run(ToyRecipe(), config, tmp_path / "nan", verbose=0)
    assert not (tmp_path / "nan" / "run.json").exists()
    assert not (tmp_path / "nan" / "model.keras").exists()


def test_resume_continues_an_interrupted_run(tmp_path):
    run_dir = tmp_path / "run"
    with pytest.raises(KeyboardInterrupt):
        runner.run(
            ToyRecipe(), ToyConfig(), run_dir, verbose=0, callbacks=[InterruptAt(2)]
        )
    assert (run_dir / "backup").is_dir()
    assert not (run_dir / "run.json").exists()
    assert len(runner.read_history(run_dir / "history.csv")) == 2

    config = runner.prepare_resume(ToyRecipe(), run_dir)
    assert config == ToyConfig()
    result = runner.run(ToyRecipe(), config, run_dir, resume=True, verbose=0)
    assert [row["epoch"] for row in result.history] == [1, 2, 3, 4]
    run_info = json.loads((run_dir / "run.json").read_text())
    assert run_info["resumed"] is True and run_info["epochs"] == 4
    assert not (run_dir / "backup").exists()
    with pytest.raises(RnnkitError, match="completed run"):
        runner.prepare_resume(ToyRecipe(), run_dir)


# Scripts run in a fresh process (the CPU must be split before TensorFlow starts):
# argv[1] is the run directory, argv[2] the repository root.
TWO_CPUS = """
import json, logging, sys
import tensorflow as tf
logging.basicConfig(level=logging.INFO)
cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(
    cpu, [tf.config.LogicalDeviceConfiguration()] * 2
)
sys.path.insert(0, sys.argv[2])
strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
"""


def run_on_two_cpus(script: str, run_dir) -> subprocess.CompletedProcess:
    """`script` after TWO_CPUS in a fresh interpreter; asserts that it exits 0."""
    result = preloaded.run(
        ["-c", TWO_CPUS + script, str(run_dir), str(ROOT)], timeout=600
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return result


MIRRORED_TEXT = """
import numpy as np
from rnnkit import config as config_lib
from rnnkit.training import runner
from rnnkit.errors import ConfigError
from rnnkit_recipes.language_model.recipe import LanguageModelRecipe
from rnnkit_recipes.sentiment.recipe import SentimentRecipe
from tests.training.cluster_support import sentiment_values
from tests.sentiment_support import SMOKE_CONFIG

# No shuffling: a distributed dataset shuffles in another (still seeded) order.
values = {**sentiment_values(), "train.shuffle": False}
recipe = SentimentRecipe()
config = config_lib.resolve(recipe.Config, SMOKE_CONFIG, values)
mirrored_batch = config.train.batch_size
mirrored = runner.run(recipe, config, sys.argv[1], strategy=strategy, verbose=0)
# One device, the same global batch (train.batch_size is per replica).
values["train.batch_size"] = 2 * mirrored_batch
single = runner.run(
    recipe, config_lib.resolve(recipe.Config, SMOKE_CONFIG, values),
    sys.argv[1] + "_single", verbose=0,
)
saved = [runner.load_model(r.run_dir / "model.keras") for r in (mirrored, single)]
print("DIFF", json.dumps({
    w.path: float(np.abs(w.numpy() - v.numpy()).max())
    for w, v in zip(saved[0].weights, saved[1].weights, strict=True)
}))
print("PROBABILITY", saved[0].predict(tf.constant(["a fine film"]), verbose=0)[0, 0])
lm = LanguageModelRecipe()
try:
    runner.run(
        lm, config_lib.resolve(lm.Config, sys.argv[2] +
        "/recipes/language_model/configs/smoke.toml"),
        sys.argv[1] + "_lm", strategy=strategy, verbose=0,
    )
except ConfigError as error:
    print("LM-ERROR", error)
"""


def test_a_text_model_mirrors_with_its_strings_read_in_the_input_pipeline(tmp_path):
    """The sentiment model reads raw strings, which TensorFlow cannot hand to the
    replicas of one process (tensorflow/tensorflow#80951): the runner runs its
    TextVectorization in the input pipeline and trains the rest on the replicas, and
    the result equals one device on the global batch. (A stock run, arrays through
    `fit` on the same strategy, was a test of its own: the same runner code and
    Keras' own distribution of arrays, a process and two runs more.)"""
    run_dir = tmp_path / "mirrored"
    result = run_on_two_cpus(MIRRORED_TEXT, run_dir)
    assert "vectorizer runs in the input pipeline" in result.stderr
    record = json.loads((run_dir / "run.json").read_text())
    device = record["device"]
    assert device.startswith("MirroredStrategy") and "CPU:1" in device
    # train.batch_size (64) is per replica: two replicas step on 128 examples, and
    # the config records the per-replica batch, so it re-runs as it ran.
    assert record["replicas"] == 2 and record["global_batch_size"] == 128
    assert "batch_size = 64\n" in (run_dir / "config.toml").read_text()
    assert (run_dir / "metrics.json").exists()
    differences = json.loads(result.stdout.split("DIFF", 1)[1].splitlines()[0])
    assert len(differences) == 9  # embedding, two GRU directions x 3, output x 2
    # Adam turns float round-off into up to ~3e-5 after 5 steps at lr 0.01; a real
    # difference (another batch, a lost gradient) moves weights by ~1e-2.
    for path, difference in differences.items():
        assert difference < 2e-4, path
    # The saved model still reads raw text.
    probability = float(result.stdout.split("PROBABILITY", 1)[1].split()[0])
    assert 0.0 < probability < 1.0
    # Truncated BPTT keeps each stream's state on one device: a one-line refusal.
    assert "LM-ERROR train.mode=truncated carries each stream's state" in result.stdout


def test_a_model_that_cannot_be_mirrored_refuses_several_devices_before_writing(
    tmp_path,
):
    """The language model's truncated BPTT names why; `auto` keeps one device."""
    from rnnkit_recipes.language_model.recipe import LanguageModelRecipe

    from rnnkit import config as config_lib

    recipe = LanguageModelRecipe()
    smoke = ROOT / "recipes" / "language_model" / "configs" / "smoke.toml"
    for strategy in ("mirrored", "multiworker"):
        config = config_lib.resolve(recipe.Config, smoke, {"train.strategy": strategy})
        with pytest.raises(
            ConfigError,
            match=rf"train.strategy={strategy}: train.mode=truncated .* use "
            r"--strategy one",
        ):
            runner.run(recipe, config, tmp_path / strategy)
        assert not (tmp_path / strategy).exists()
    plain = config_lib.resolve(recipe.Config, smoke, {"train.mode": "independent"})
    assert recipe.single_device(plain) is None
    auto = config_lib.resolve(recipe.Config, smoke)
    assert recipe.single_device(auto) is not None
    assert (
        runner.configure_runtime(auto.train, one_device=True).num_replicas_in_sync == 1
    )


def test_a_config_that_cannot_work_is_refused_before_anything_is_written(tmp_path):
    config = ToyConfig().with_values({"evaluation.folds": 2})
    with pytest.raises(ConfigError, match="recipe 'toy' has no walk-forward backtest"):
        runner.run(ToyRecipe(), config, runs_root=tmp_path, verbose=0)
    assert not any(tmp_path.iterdir())


def test_the_training_set_is_released_before_evaluation(tmp_path, monkeypatch):
    # The set holds a copy of array splits; evaluation (and the model's reload before
    # it) must not keep that copy alive.
    import gc
    import weakref

    made = []

    def recorded(train, config):
        dataset = training_set(train, config)
        made.append(weakref.ref(dataset))
        return dataset

    training_set = runner.training_set
    monkeypatch.setattr(runner, "training_set", recorded)
    alive = []

    class Recording(ToyRecipe):
        def evaluate(self, model, data, config):
            gc.collect()
            alive.append([ref() is not None for ref in made])
            return super().evaluate(model, data, config)

    config = ToyConfig().with_values({"train.epochs": 2, "train.patience": 1})
    # The objects of the tests before this one out of the collection's way: in a
    # worker that has run hundreds of tests, collecting them all took 50 s.
    gc.freeze()
    try:
        runner.run(Recording(), config, tmp_path / "run", verbose=0)
    finally:
        gc.unfreeze()
    assert made and alive == [[False] * len(made)]


def test_training_set_batches_arrays_as_keras_would():
    """Dicts with lists inside, trailing None weights, float64 as Keras's float type,
    strings kept; arrays of different lengths or none at all get a one-line error."""
    config = ToyConfig().with_values({"train.batch_size": 4, "train.shuffle": False})
    first = np.arange(6, dtype="float64")[:, None]
    words = np.array(["a", "b", "c", "d", "e", "f"])
    inputs = {"numbers": [first, 2 * first], "words": words}
    dataset = runner.training_set((inputs, np.arange(6), None), config)
    batches = list(dataset.as_numpy_iterator())
    assert [len(targets) for _, targets in batches] == [4, 2]
    (numbers, doubled), texts = batches[1][0]["numbers"], batches[1][0]["words"]
    assert numbers.dtype == np.float32 and numbers.ravel().tolist() == [4.0, 5.0]
    assert doubled.ravel().tolist() == [8.0, 10.0]
    assert texts.tolist() == [b"e", b"f"]
    with pytest.raises(DataError, match=r"different numbers of examples \(5, 6\)"):
        runner.training_set((first, np.arange(5)), config)
    with pytest.raises(DataError, match="holds no examples"):
        runner.training_set((first[:0], first[:0]), config)


@pytest.mark.parametrize("layer", ["dense", "lstm"])
def test_fit_traces_the_train_and_test_steps_once(layer, monkeypatch):
    """No variable is created inside `fit`'s first trace of a step, which would make
    TensorFlow trace it a second time: the optimizer's and the compiled metrics'
    exist before (runner.build_before_tracing), and rnnkit's compiled time loops
    make their cell clone without a seed generator (rnnkit.layers._xla)."""
    import keras

    import rnnkit.layers
    from rnnkit.layers import _xla

    # No compiled loop (nor its clone) left by an earlier test of this worker.
    monkeypatch.setattr(_xla, "_shared", type(_xla._shared)())
    traced = {"train": 0, "test": 0}

    class Counted(keras.Sequential):
        def train_step(self, data):
            traced["train"] += 1
            return super().train_step(data)

        def test_step(self, data):
            traced["test"] += 1
            return super().test_step(data)

    recipe = ToyRecipe()
    config = ToyConfig(train=TrainConfig(epochs=2, batch_size=16, patience=0))
    hidden = (
        [keras.layers.Dense(8)]
        if layer == "dense"
        # XLA-compiled time loops with the hand-written backward pass.
        else [keras.layers.Reshape((4, 1)), rnnkit.layers.LSTM(7, jit_compile=True)]
    )
    model = Counted([keras.Input((4,)), *hidden, keras.layers.Dense(1)])
    model.compile(keras.optimizers.Adam(0.01), "mse", metrics=["mae"])
    history = runner.fit(model, recipe.load_data(config), config, [], verbose=0)
    assert len(history.history["val_mae"]) == 2
    assert traced == {"train": 1, "test": 1}


def test_variables_are_left_to_fit_where_building_them_first_would_not_do():
    """A frozen layer (a callback may unfreeze it when training begins, and the
    optimizer must then include it) and elements of unknown rank leave the
    optimizer unbuilt for fit's first trace, as Keras would."""
    import keras
    import tensorflow as tf

    def compiled(frozen):
        model = keras.Sequential(
            [keras.Input((4,)), keras.layers.Dense(8), keras.layers.Dense(1)]
        )
        model.layers[0].trainable = not frozen
        model.compile(keras.optimizers.Adam(0.01), "mse", metrics=["mae"])
        return model

    x, y = np.ones((8, 4), "float32"), np.ones((8, 1), "float32")
    known = tf.data.Dataset.from_tensor_slices((x, y)).batch(4)
    unknown = known.map(
        lambda a, b: (tf.numpy_function(lambda v: v, [a], tf.float32), b)
    )
    for model, dataset, built in [
        (compiled(frozen=False), known, True),
        (compiled(frozen=True), known, False),
        (compiled(frozen=False), unknown, False),
    ]:
        runner.build_before_tracing(model, dataset)
        assert model.optimizer.built is built


def test_the_time_budget_stops_at_the_first_batch_past_it_and_validates_that_epoch():
    import keras

    from rnnkit.training.callbacks import time_budget_callback

    ticks = iter(range(1000))  # a clock that moves one second per reading
    budget = time_budget_callback(7 / 60, clock=lambda: float(next(ticks)))
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    model.compile("sgd", "mse")
    x = np.ones((10, 2), "float32")
    history = model.fit(
        x, x[:, :1], batch_size=2, epochs=10, validation_data=(x, x[:, :1]),
        callbacks=[budget], verbose=0,
    )  # fmt: skip
    # Read at the start (0), then after each batch: 1..5 in epoch 1, 6.. in epoch 2,
    # where the 7th batch reads 7 s, the budget, and training stops.
    assert budget.stopped_in == 1
    assert len(history.history["loss"]) == 2
    assert len(history.history["val_loss"]) == 2  # the cut epoch was validated


def test_a_run_with_train_max_minutes_ends_early_and_completes(tmp_path, caplog):
    import logging

    config = ToyConfig().with_values(
        {"train.epochs": 100_000, "train.max_minutes": 0.02}
    )
    with caplog.at_level(logging.INFO, logger="rnnkit"):
        result = runner.run(ToyRecipe(), config, tmp_path / "run", verbose=0)
    epochs = json.loads((result.run_dir / "run.json").read_text())["epochs"]
    assert 1 <= epochs < 100_000
    assert "train.max_minutes: stopped after 0.02 minutes" in caplog.text
    assert "model" in result.metrics["test"]
