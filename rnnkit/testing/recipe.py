"""Checks for recipes: the contract of `rnnkit.recipe`, rnnkit's and the ones you write.

    from rnnkit.testing import check_recipe
    check_recipe(MyRecipe(), "configs/smoke.toml", predict_inputs=["..."])

`check_recipe` runs the checks in order and stops at the first that fails;
`recipe_checks` returns them as (name, function) pairs, for `pytest.mark.parametrize`
(one test per check, so a failure names the check), as scikit-learn's
`check_estimator` does for estimators. A check raises `AssertionError` "check NAME
failed: what was wrong". The checks, in order:

    toml_round_trip             `rnnkit.config.to_toml` writes the config with known
                                keys only, and the file reads back to an equal config
    check_config                `recipe.check_config(config)` accepts it
    data_splits                 `load_data` returns a `RecipeData` whose train,
                                validation and test splits each hold examples
    model_reloads_in_safe_mode  `build_model` returns a compiled `keras.Model` that
                                saves to `.keras` and reloads in safe mode with the
                                same outputs on a test batch (within 1e-5)
    one_epoch                   the runner trains one epoch and writes the run
                                directory (run.json, metrics.json, config.toml,
                                model.keras, history.csv with one row)
    evaluate_table              metrics.json's test table: "model" first, then at
                                least one baseline sharing a metric with it, every
                                value a finite float
    predict                     `recipe.predict` on the run's reloaded model returns
                                non-empty lines for `predict_inputs`
    export                      `rnnkit.export.export(run_dir)` writes what the
                                recipe's `export_plan` declares; it loads the recipe
                                by name, so the recipe must be installed

The checks from `one_epoch` on read one run, trained with `train.epochs=1` the first
time one of them runs, so running them all trains once. A recipe that declares no
export skips `export` (`skip=["export"]`); the check fails otherwise, as `rnnkit
export` would. Keras and TensorFlow are imported when a check runs.

Over 500 lines: it is one public checker whose checks run in order on one trained run
(each reads what the one before it wrote); split by check, every part would import
the shared run and its private helpers.
"""

from __future__ import annotations

import contextlib
import math
import shutil
import tempfile
import weakref
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from rnnkit import config as config_lib
from rnnkit import registry
from rnnkit.files import write_text
from rnnkit.recipe import Recipe, RecipeConfig, RecipeData
from rnnkit.testing._selection import refuse_unknown_checks, run_checks

__all__ = ["CHECK_NAMES", "check_recipe", "recipe_checks"]

# The checks in the order they run; each is the method of that name of `_Checks`.
CHECK_NAMES = (
    "toml_round_trip",
    "check_config",
    "data_splits",
    "model_reloads_in_safe_mode",
    "one_epoch",
    "evaluate_table",
    "predict",
    "export",
)
# How far the reloaded model's outputs may lie from the built model's.
RELOAD_TOLERANCE = 1e-5


def check_recipe(
    recipe: Recipe | str,
    config: RecipeConfig | str | Path,
    *,
    predict_inputs: Sequence[str] | None = None,
    work_dir: str | Path | None = None,
    checks: Iterable[str] | None = None,
    skip: Iterable[str] = (),
    export_format: str = "saved_model",
) -> list[str]:
    """Runs the recipe contract's checks on `recipe` with `config`, in order.

    The first check that fails raises `AssertionError` "check NAME failed: ...". The
    checks that need a trained model share one run of one epoch.

    Args:
        recipe: a `Recipe` instance, or the name it is registered under.
        config: a config of `recipe.Config`, or the path of a TOML file of one.
            Keep it small: a smoke config.
        predict_inputs: the command-line arguments of `rnnkit predict` (paths,
            numbers, sentences) that the `predict` check passes to `recipe.predict`;
            that check fails without them. Defaults to `None`.
        work_dir: an empty or new folder for the files the checks write (the run
            directory, the saved model, the export). Defaults to `None`: a temporary
            folder, removed on return.
        checks: the names of the checks to run. Defaults to `None`: all of them.
        skip: names to leave out (say why where you call it). Defaults to `()`.
        export_format: the format the `export` check writes: "saved_model",
            "tflite" or "onnx". Defaults to `"saved_model"`.

    Returns:
        The names of the checks that ran, in order.

    Raises:
        AssertionError: a check failed.
        ValueError: an unknown check name or `export_format`, a `work_dir` that holds
            files.

    Example:

        check_recipe("stock", "smoke.toml", predict_inputs=["prices.csv"])
        # ['toml_round_trip', 'check_config', ..., 'predict', 'export']
        check_recipe(MyRecipe(), "configs/smoke.toml", checks=["data_splits"])
        # ['data_splits']
    """
    with contextlib.ExitStack() as stack:
        if work_dir is None:
            work_dir = stack.enter_context(
                tempfile.TemporaryDirectory(
                    prefix="rnnkit-check-", ignore_cleanup_errors=True
                )
            )
        selected = recipe_checks(
            recipe,
            config,
            predict_inputs=predict_inputs,
            work_dir=work_dir,
            checks=checks,
            skip=skip,
            export_format=export_format,
        )
        return run_checks(selected)


def recipe_checks(
    recipe: Recipe | str,
    config: RecipeConfig | str | Path,
    *,
    predict_inputs: Sequence[str] | None = None,
    work_dir: str | Path | None = None,
    checks: Iterable[str] | None = None,
    skip: Iterable[str] = (),
    export_format: str = "saved_model",
) -> list[tuple[str, Callable[[], None]]]:
    """The recipe contract's checks as (name, function) pairs, in the order they run.

    Each function takes no argument and raises `AssertionError` "check NAME failed:
    ..."; nothing runs before it is called. The checks from `one_epoch` on share one
    run of one epoch, trained when the first of them runs. One test per check:

        @pytest.mark.parametrize("name, check", recipe_checks(MyRecipe(), SMOKE))
        def test_my_recipe(name, check):
            check()

    Args:
        recipe: a `Recipe` instance, or the name it is registered under.
        config: a config of `recipe.Config`, or the path of a TOML file of one.
        predict_inputs: the command-line arguments of `rnnkit predict` for the
            `predict` check, which fails without them. Defaults to `None`.
        work_dir: an empty or new folder for the files the checks write. Defaults to
            `None`: a temporary folder, removed once the checks are garbage.
        checks: the names to keep. Defaults to `None`: all of `CHECK_NAMES`.
        skip: names to leave out (say why where you call it). Defaults to `()`.
        export_format: "saved_model", "tflite" or "onnx", for the `export` check.
            Defaults to `"saved_model"`.

    Returns:
        A list of `(name, check)` pairs.

    Raises:
        ValueError: an unknown check name or `export_format`, a `work_dir` that holds
            files.
    """
    from rnnkit.export import FORMATS

    wanted = CHECK_NAMES if checks is None else _names(checks)
    skip = _names(skip)
    refuse_unknown_checks([*wanted, *skip], CHECK_NAMES)
    if isinstance(recipe, str):
        recipe = registry.load(recipe)
    if not isinstance(recipe, Recipe):
        raise TypeError(
            f"recipe: expected a Recipe or a registered name, got {recipe!r}"
        )
    if isinstance(config, str | Path):
        config = config_lib.resolve(recipe.Config, config)
    if not isinstance(config, recipe.Config):
        raise TypeError(
            f"config: expected a {recipe.Config.__name__} of recipe "
            f"{recipe.name!r} or a TOML path, got a {type(config).__name__}"
        )
    if export_format not in FORMATS:
        raise ValueError(
            f"export_format: unknown format {export_format!r}; choose one of "
            f"{', '.join(FORMATS)}"
        )
    shared = _Checks(recipe, config, predict_inputs, work_dir, export_format)
    return [
        (name, _named(name, getattr(shared, name)))
        for name in CHECK_NAMES
        if name in wanted and name not in skip
    ]


def _names(names: Iterable[str]) -> list[str]:
    """Check names; a single string is one name, not its letters."""
    return [names] if isinstance(names, str) else list(names)


def _named(name: str, body: Callable[[], None]) -> Callable[[], None]:
    """`body` as the check `name`: whatever it raises becomes `AssertionError`
    "check NAME failed: ...", with what it raised as the cause."""

    def check() -> None:
        try:
            body()
        except AssertionError as failure:
            raise AssertionError(
                f"check {name} failed: {_first_line(failure)}"
            ) from failure
        except Exception as error:
            raise AssertionError(f"check {name} failed: {_describe(error)}") from error

    check.__name__ = f"check_{name}"
    return check


def _first_line(error: BaseException) -> str:
    lines = str(error).strip().splitlines()
    return lines[0] if lines else type(error).__name__


def _describe(error: BaseException) -> str:
    return f"{type(error).__name__}: {_first_line(error)}"


def _calling(what: str, function: Callable[..., Any], *args: Any) -> Any:
    """`function(*args)`; an exception becomes an `AssertionError` naming `what`."""
    try:
        return function(*args)
    except Exception as error:
        raise AssertionError(f"{what} raised {_describe(error)}") from error


def _expect(condition: Any, message: str) -> None:
    if not condition:
        raise AssertionError(message)


class _Checks:
    """The checks of one `recipe_checks` call, one method per name of `CHECK_NAMES`,
    and what they share: the folder, the data and the one-epoch run."""

    def __init__(
        self,
        recipe: Recipe,
        config: RecipeConfig,
        predict_inputs: Sequence[str] | None,
        work_dir: str | Path | None,
        export_format: str,
    ) -> None:
        if work_dir is None:
            work_dir = tempfile.mkdtemp(prefix="rnnkit-check-")
            weakref.finalize(self, shutil.rmtree, work_dir, ignore_errors=True)
        self.work_dir = Path(work_dir)
        if self.work_dir.is_dir() and any(self.work_dir.iterdir()):
            raise ValueError(
                f"work_dir: {self.work_dir} holds files; give an empty or new folder"
            )
        self.recipe = recipe
        self.config = config
        self.predict_inputs = predict_inputs
        self.export_format = export_format
        self._data: RecipeData | None = None
        # The one-epoch run's directory, or what it raised; None before it runs.
        self._run: Path | Exception | None = None

    # -- What the checks share ------------------------------------------------------

    def data(self) -> RecipeData:
        if self._data is None:
            self._data = _calling(
                "recipe.load_data(config)", self.recipe.load_data, self.config
            )
        return self._data

    def one_epoch_config(self) -> RecipeConfig:
        return self.config.with_values({"train.epochs": 1})

    def trained_run(self) -> Path:
        """The run directory of the one-epoch run, trained on the first call."""
        if self._run is None:
            from rnnkit.training import runner

            folder = self.work_dir / "run"
            try:
                runner.run(self.recipe, self.one_epoch_config(), folder, verbose=0)
                self._run = folder
            except Exception as error:
                self._run = error
        if isinstance(self._run, Exception):
            raise AssertionError(
                f"the one-epoch run raised {_describe(self._run)}"
            ) from self._run
        return self._run

    def reloaded_run(self) -> tuple[RecipeConfig, Any]:
        """The run's config and its model, reloaded in safe mode, as `rnnkit predict`
        reads them."""
        from rnnkit.training import run_dir

        path = self.trained_run()
        config = config_lib.load_toml(self.recipe.Config, path / run_dir.CONFIG_FILE)
        return config, run_dir.load_model(path / run_dir.MODEL_FILE)

    # -- The checks, in the order of CHECK_NAMES -------------------------------------

    def toml_round_trip(self) -> None:
        from rnnkit.training.run_dir import config_header

        path = write_text(
            self.work_dir / "round_trip.toml",
            config_lib.to_toml(self.config, config_header(self.recipe.name)),
        )
        known = {info.key for info in config_lib.fields_of(self.recipe.Config)}
        unknown = sorted(config_lib.toml_keys(path) - known)
        _expect(not unknown, f"the written file sets unknown keys {unknown}")
        read = config_lib.load_toml(self.recipe.Config, path)
        written, back = self.config.flat(), read.flat()
        changed = [
            f"{key}={written[key]!r} reads back as {back.get(key)!r}"
            for key in written
            if back.get(key) != written[key]
        ]
        _expect(read == self.config, "; ".join(changed) or "it reads back changed")

    def check_config(self) -> None:
        _calling("recipe.check_config(config)", self.recipe.check_config, self.config)

    def data_splits(self) -> None:
        data = self.data()
        _expect(
            isinstance(data, RecipeData),
            f"load_data returned a {type(data).__name__}, not a RecipeData",
        )
        for split in ("train", "validation", "test"):
            _check_split(split, getattr(data, split))

    def model_reloads_in_safe_mode(self) -> None:
        import keras

        from rnnkit.training import run_dir

        model = _built_model(self.recipe, self.config, self.data())
        _expect(
            isinstance(model, keras.Model),
            f"build_model returned a {type(model).__name__}, not a keras.Model",
        )
        _expect(model.compiled, "build_model returned a model that is not compiled")
        inputs = _test_batch(self.data().test, self.config.train.batch_size)
        # Saved as the runner saves a trained model: its inference model, with the
        # optimizer's variables (an unbuilt optimizer's reload warns that they differ).
        model.optimizer.build(model.trainable_variables)
        saved = self.recipe.inference_model(model)
        expected = saved.predict_on_batch(inputs)
        path = run_dir.save_model(saved, self.work_dir / "safe_mode" / "model.keras")
        reloaded = _calling(
            "keras.saving.load_model(path, safe_mode=True)", run_dir.load_model, path
        )
        _compare_outputs(expected, reloaded.predict_on_batch(inputs))

    def one_epoch(self) -> None:
        from rnnkit.training import run_dir

        path = self.trained_run()
        files = (
            run_dir.RUN_FILE,
            run_dir.METRICS_FILE,
            run_dir.CONFIG_FILE,
            run_dir.MODEL_FILE,
            run_dir.HISTORY_FILE,
        )
        missing = [name for name in files if not (path / name).is_file()]
        _expect(not missing, f"the run directory lacks {', '.join(missing)}")
        rows = len(run_dir.read_history(path / run_dir.HISTORY_FILE))
        _expect(rows == 1, f"history.csv has {rows} rows, expected 1 (one epoch)")
        written = config_lib.load_toml(self.recipe.Config, path / run_dir.CONFIG_FILE)
        _expect(
            written == self.one_epoch_config(),
            "the run's config.toml does not read back to the config it ran",
        )

    def evaluate_table(self) -> None:
        import json

        from rnnkit.training.run_dir import METRICS_FILE

        metrics = json.loads(
            (self.trained_run() / METRICS_FILE).read_text(encoding="utf-8")
        )
        _expect(
            isinstance(metrics, dict) and isinstance(metrics.get("test"), dict),
            'metrics.json has no "test" table {system: {metric: value}}',
        )
        _check_table(metrics["test"])

    def predict(self) -> None:
        _expect(
            self.predict_inputs is not None,
            "pass predict_inputs=[...] (the arguments of `rnnkit predict RUN_DIR "
            "INPUT...`) to check recipe.predict",
        )
        config, model = self.reloaded_run()
        lines = _calling(
            "recipe.predict(model, predict_inputs, config)",
            self.recipe.predict,
            model,
            list(self.predict_inputs),
            config,
        )
        _expect(
            isinstance(lines, list),
            f"recipe.predict returned a {type(lines).__name__}, not a list of str",
        )
        _expect(lines, "recipe.predict returned no lines")
        bad = [line for line in lines if not isinstance(line, str) or not line]
        _expect(not bad, f"recipe.predict returned empty or non-str lines {bad[:3]}")

    def export(self) -> None:
        from rnnkit.export import export

        config, model = self.reloaded_run()
        plan = _calling(
            "recipe.export_plan(model, config, format)",
            self.recipe.export_plan,
            model,
            config,
            self.export_format,
        )
        _expect(
            plan is not None,
            f"recipe {self.recipe.name!r} declares no export (export_plan returned "
            f"None for {self.export_format!r}); implement export_plan, or pass "
            "skip=['export']",
        )
        _expect_registered(self.recipe)
        output = self.work_dir / "export" / self.export_format
        result = _calling(
            f"rnnkit.export.export(run_dir, format={self.export_format!r})",
            export,
            self.trained_run(),
            self.export_format,
            output,
        )
        missing = [name for name in result.files if not (output / name).exists()]
        _expect(not missing, f"the export lacks {', '.join(missing)} under {output}")


# -- Helpers of the checks ------------------------------------------------------------


def _check_split(name: str, split: Any) -> None:
    """A split holds examples: an (x, y[, sample_weight]) tuple of arrays with one
    row per example, or a `tf.data.Dataset` of (x, y) batches."""
    import keras
    import numpy as np
    import tensorflow as tf

    if isinstance(split, tf.data.Dataset):
        batch = next(iter(split.take(1)), None)
        _expect(batch is not None, f"{name}: the dataset yields no batch")
        _expect(
            isinstance(batch, tuple) and len(batch) in (2, 3),
            f"{name}: the dataset yields {type(batch).__name__}s, not (x, y) pairs",
        )
        return
    _expect(
        isinstance(split, tuple) and len(split) in (2, 3),
        f"{name} is a {type(split).__name__}, not an (x, y) tuple or a tf.data.Dataset",
    )
    leaves = [leaf for leaf in keras.tree.flatten(split) if leaf is not None]
    rows = [np.shape(leaf)[0] if np.ndim(leaf) else 0 for leaf in leaves]
    _expect(
        len(set(rows)) == 1,
        f"{name}: its arrays hold different numbers of examples {sorted(set(rows))}",
    )
    _expect(rows[0] > 0, f"{name} holds no examples")


def _test_batch(test: Any, batch_size: int) -> Any:
    """The inputs of the test split's first batch."""
    import keras
    import tensorflow as tf

    if isinstance(test, tf.data.Dataset):
        return next(iter(test.take(1)))[0]
    return keras.tree.map_structure(lambda array: array[:batch_size], test[0])


def _built_model(recipe: Recipe, config: RecipeConfig, data: RecipeData) -> Any:
    """`recipe.build_model` under the dtype policy of `train.precision`, as the
    runner calls it; the policy found is restored."""
    import keras

    previous = keras.config.dtype_policy()
    keras.config.set_dtype_policy(config.train.dtype_policy())
    try:
        return _calling(
            "recipe.build_model(config, data)", recipe.build_model, config, data
        )
    finally:
        keras.config.set_dtype_policy(previous)


def _compare_outputs(expected: Any, actual: Any) -> None:
    import keras
    import numpy as np

    expected, actual = keras.tree.flatten(expected), keras.tree.flatten(actual)
    _expect(
        len(expected) == len(actual),
        f"the reloaded model returns {len(actual)} outputs, the built one "
        f"{len(expected)}",
    )
    for index, (before, after) in enumerate(zip(expected, actual, strict=True)):
        before, after = np.asarray(before), np.asarray(after)
        _expect(
            before.shape == after.shape,
            f"output {index}: shape {after.shape} after reloading, {before.shape} "
            "before",
        )
        if not np.allclose(
            before, after, rtol=0, atol=RELOAD_TOLERANCE, equal_nan=True
        ):
            gap = float(np.nanmax(np.abs(before.astype("float64") - after)))
            raise AssertionError(
                f"output {index} of the reloaded model differs by up to {gap:.3g} "
                f"(allowed {RELOAD_TOLERANCE:g})"
            )


def _check_table(table: dict) -> None:
    """The evaluate table {system: {metric: value}}: "model" first, baselines after,
    each sharing a metric with it, every value a finite float."""
    systems = list(table)
    _expect(
        systems[:1] == ["model"],
        f'the first row is {systems[0] if systems else None!r}, not "model"',
    )
    _expect(
        len(systems) > 1,
        "the table has no baseline row beside \"model\" (e.g. 'persistence')",
    )
    for system, row in table.items():
        _expect(
            isinstance(row, dict) and row,
            f"row {system!r} is {row!r}, not {{metric: value}}",
        )
        for metric, value in row.items():
            _expect(
                isinstance(value, float) and math.isfinite(value),
                f"row {system!r}: {metric} is {value!r}, not a finite float "
                "(metrics.json writes NaN and infinities as null)",
            )
    shared = {
        system: set(row) & set(table["model"])
        for system, row in table.items()
        if system != "model"
    }
    alone = [system for system, metrics in shared.items() if not metrics]
    _expect(
        not alone,
        f"baseline rows {alone} share no metric with the model's "
        f"{sorted(table['model'])}",
    )


def _expect_registered(recipe: Recipe) -> None:
    """`rnnkit export RUN_DIR` loads the run's recipe by its name: that name must
    load this recipe's class."""
    entry_point = registry.available().get(recipe.name)
    _expect(
        entry_point is not None,
        f"recipe {recipe.name!r} is not installed (no entry point of that name in "
        f"{registry.GROUP!r}), so `rnnkit export` cannot load its run; install its "
        "package (pip install -e .)",
    )
    registered = entry_point.load()
    _expect(
        registered is type(recipe),
        f"`rnnkit export` loads recipe {recipe.name!r} as {entry_point.value}, not "
        f"as {type(recipe).__module__}:{type(recipe).__qualname__}",
    )
