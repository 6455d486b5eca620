"""The `rnnkit` launcher: list, run, evaluate, predict, tune, diagnose, calibrate,
info.

The module stays light: recipes are found through entry points and loaded only when
named, and TensorFlow is imported inside the commands that train or load a model, so
`rnnkit --help` and `rnnkit list` start fast.

Every recipe's config fields become options of `rnnkit run NAME` and `rnnkit tune NAME`
(`--model.units 64`), beside `--config FILE` and `--set key=value`; precedence is
defaults < config file < command line. Bad input ends with a one-line `Error: ...` and
a non-zero exit status, never a traceback.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import click

from rnnkit import __version__, registry
from rnnkit import config as config_lib
from rnnkit._native_logs import import_frameworks_quietly, quiet_native_logs
from rnnkit.errors import RnnkitError
from rnnkit.recipe import Recipe
from rnnkit.tuning import cluster as tuning_cluster

FIELD_PREFIX = "cfg__"


@contextlib.contextmanager
def user_errors() -> Iterator[None]:
    """Turns bad-input errors into click's one-line `Error: ...` (exit status 1)."""
    try:
        yield
    except RnnkitError as error:
        raise click.ClickException(str(error)) from None
    except OSError as error:  # unreadable file, disk full, ...
        raise click.ClickException(
            f"{error.strerror or error}: {error.filename}"
        ) from None


# -- Options generated from a recipe's config ----------------------------------------


def _field_options(config_cls: type[config_lib.RecipeConfig]) -> list[click.Option]:
    options = []
    for info in config_lib.fields_of(config_cls):
        if info.choices is not None:
            metavar = "[" + "|".join(str(c) for c in info.choices) + "]"
        else:
            # "str or none" -> STR: `--set` help explains that "none" clears a value.
            metavar = config_lib.type_name(info.type).split(" or ")[0].upper()
            metavar = metavar.replace("LIST OF ", "LIST_OF_")
        default = "none" if info.default is None else info.default
        if isinstance(default, bool):
            default = "true" if default else "false"
        elif isinstance(default, tuple):
            default = ",".join(map(str, default))
        options.append(
            click.Option(
                [f"--{info.key}", FIELD_PREFIX + info.key.replace(".", "__")],
                metavar=metavar,
                default=None,
                help=f"{info.help} [default: {default}"
                + (f"; range: {info.bounds.describe()}]" if info.bounds else "]"),
            )
        )
    return options


def _field_values(
    config_cls: type[config_lib.RecipeConfig], params: dict[str, Any]
) -> dict[str, Any]:
    infos = {info.key: info for info in config_lib.fields_of(config_cls)}
    values = {}
    for name, text in params.items():
        if name.startswith(FIELD_PREFIX) and text is not None:
            key = name[len(FIELD_PREFIX) :].replace("__", ".")
            values[key] = config_lib.parse_text(infos[key], text)
    return values


def _config_params() -> list[click.Option]:
    return [
        click.Option(
            ["--config", "config_file"],
            type=click.Path(dir_okay=False, path_type=Path),
            help="TOML file of config values (e.g. a recipe's configs/*.toml).",
        ),
        click.Option(
            ["--set", "assignments"],
            multiple=True,
            metavar="KEY=VALUE",
            help="Set a config value, e.g. --set data.path=prices.csv (repeatable; "
            "'none' clears an optional value).",
        ),
        click.Option(["--epochs"], type=int, help="Shortcut for train.epochs."),
        click.Option(["--seed"], type=int, help="Shortcut for train.seed."),
        click.Option(
            ["--device"],
            type=click.Choice(["auto", "cpu", "gpu"]),
            help="Shortcut for train.device.",
        ),
        click.Option(
            ["--mixed-precision/--no-mixed-precision"],
            default=None,
            help="Shortcut for train.mixed_precision.",
        ),
    ]


def _resolve_config(recipe: Recipe, params: dict[str, Any]) -> config_lib.RecipeConfig:
    overrides = config_lib.parse_assignments(recipe.Config, list(params["assignments"]))
    overrides.update(_field_values(recipe.Config, params))
    shortcuts = {
        "train.epochs": params["epochs"],
        "train.seed": params["seed"],
        "train.device": params["device"],
        "train.mixed_precision": params["mixed_precision"],
    }
    overrides.update({k: v for k, v in shortcuts.items() if v is not None})
    return config_lib.resolve(recipe.Config, params["config_file"], overrides)


def _given_config_params(params: dict[str, Any]) -> list[str]:
    given = [
        f"--{name.replace('_', '-')}"
        for name in ("config_file", "epochs", "seed", "device", "mixed_precision")
        if params[name] is not None
    ]
    if params["assignments"]:
        given.append("--set")
    given += [
        "--" + name[len(FIELD_PREFIX) :].replace("__", ".")
        for name, value in params.items()
        if name.startswith(FIELD_PREFIX) and value is not None
    ]
    return [g.replace("--config-file", "--config") for g in given]


class RecipeGroup(click.Group):
    """A group whose subcommands are the installed recipes, loaded when named."""

    def __init__(self, *args: Any, command_for: Callable, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.command_for = command_for

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(registry.available())

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name not in registry.available():
            return None
        try:
            recipe = registry.load(name)
        except RnnkitError as error:
            message = str(error)

            def fail() -> None:
                raise click.ClickException(message)

            return click.Command(name, callback=fail, help=f"(unavailable) {message}")
        return self.command_for(recipe)

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        name = args[0]
        command = self.get_command(ctx, name)
        if command is None:
            with user_errors():
                registry.load(name)  # raises the "unknown recipe ..." error
        return name, command, args[1:]


# -- Commands ------------------------------------------------------------------------


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="rnnkit")
@click.option(
    "--verbose",
    is_flag=True,
    help="Show TensorFlow's native start-up and runtime log lines (hidden by default).",
)
@click.pass_context
def main(ctx: click.Context, verbose: bool) -> None:
    """Recurrent-network recipes for Keras: train, evaluate, predict and tune."""
    ctx.meta["rnnkit.verbose"] = verbose
    if not verbose:
        quiet_native_logs()
    logger = logging.getLogger("rnnkit")
    if not any(isinstance(h, _EchoHandler) for h in logger.handlers):
        logger.addHandler(_EchoHandler())
        logger.setLevel(logging.INFO)


def _load_frameworks() -> None:
    """Imports TensorFlow and Keras, without their native start-up lines unless
    `rnnkit --verbose` was given (see rnnkit/_native_logs.py)."""
    context = click.get_current_context(silent=True)
    if context is None or not context.meta.get("rnnkit.verbose", False):
        import_frameworks_quietly()


class _EchoHandler(logging.Handler):
    """Progress notes to whatever stderr is now (click's test runner swaps it)."""

    def emit(self, record: logging.LogRecord) -> None:
        click.echo(self.format(record), err=True)


@main.command("list")
def list_recipes() -> None:
    """List the installed recipes with their one-line summaries."""
    rows = registry.summaries()
    if not rows:
        click.echo("No recipes are installed.")
        return
    width = max(len(name) for name, _ in rows)
    for name, summary in rows:
        click.echo(f"{name.ljust(width)}  {summary}")


def _print_metrics(metrics: dict[str, Any]) -> None:
    from rnnkit.metrics import format_table

    click.echo("\nTest metrics (model vs baselines, on the same test split):")
    click.echo(format_table(metrics["test"]))
    if "backtest" in metrics:
        folds = metrics["backtest"]["folds"]
        for index, table in enumerate(folds, start=1):
            click.echo(f"\nBacktest fold {index}/{len(folds)}:")
            click.echo(format_table(table))
        click.echo(f"\nBacktest mean over {len(folds)} folds:")
        click.echo(format_table(metrics["backtest"]["mean"]))


DRY_RUN_OPTION = click.Option(
    ["--dry-run"],
    is_flag=True,
    help="Check the command and its config (values, ranges, config file), print the "
    "resolved config and exit, without loading data, training or writing anything.",
)


def _dry_run(recipe: Recipe, params: dict[str, Any], what: str) -> None:
    """Resolves the config as the real command would, prints it, touches nothing."""
    with user_errors():
        if params.get("resume") is not None:
            config = config_lib.load_toml(
                recipe.Config, Path(params["resume"]) / "config.toml"
            )
        else:
            config = _resolve_config(recipe, params)
    click.echo(config_lib.to_toml(config, f"rnnkit {recipe.name}: resolved config"))
    click.echo(f"Dry run: the config is valid; {what}")


def _cluster_options(params: dict[str, Any]) -> str | None:
    """Writes TF_CONFIG from --workers/--worker-index; a line saying which worker."""
    workers, index = params.pop("workers"), params.pop("worker_index")
    if workers is None and index is None:
        return None
    with user_errors():
        if workers is None or index is None:
            raise RnnkitError(
                "--workers and --worker-index go together: every machine gets the "
                "same --workers HOST:PORT,... and its own --worker-index (0: chief)"
            )
        from rnnkit.training import distributed

        cluster = distributed.write_tf_config(workers, index)
    count = len(cluster["cluster"]["worker"])
    role = "the chief" if index == 0 else "a worker"
    return f"worker {index} of {count} ({role}) in TF_CONFIG"


def _run_command(recipe: Recipe) -> click.Command:
    def callback(**params: Any) -> None:
        cluster_line = _cluster_options(params)
        if params["strategy"] is None and cluster_line is not None:
            params["strategy"] = "multiworker"
        strategy = params.pop("strategy")
        if strategy is not None and params["resume"] is None:
            params["assignments"] = (
                *params["assignments"],
                f"train.strategy={strategy}",
            )
        if params.pop("dry_run"):
            if cluster_line is not None:
                click.echo(f"Dry run: {cluster_line}")
            run_dir = params["resume"] or params["run_dir"]
            where = run_dir or f"runs/{recipe.name}/<timestamp>"
            if params["resume"] is None and run_dir and any(Path(run_dir).glob("*")):
                with user_errors():
                    raise RnnkitError(
                        f"run directory {run_dir} is not empty; choose another "
                        f"--run-dir, or continue it with --resume {run_dir}"
                    )
            _dry_run(recipe, params, f"without --dry-run it trains into {where}")
            return
        _load_frameworks()
        from rnnkit.training import runner

        with user_errors():
            resume = params["resume"]
            if resume is not None:
                given = _given_config_params(params)
                if given or params["run_dir"] is not None:
                    raise RnnkitError(
                        "--resume continues a run with its own config.toml; leave out "
                        + ", ".join(given or ["--run-dir"])
                    )
                config = runner.prepare_resume(recipe, resume)
                if strategy is not None and strategy != config.train.strategy:
                    raise RnnkitError(
                        f"--resume continues a run with its own config.toml "
                        f"(train.strategy={config.train.strategy}); leave out "
                        "--strategy"
                    )
                run_dir = resume
            else:
                config = _resolve_config(recipe, params)
                run_dir = params["run_dir"]
            result = runner.run(recipe, config, run_dir, resume=resume is not None)
        if not result.chief:
            click.echo(
                f"\nTrained as a worker; weights fingerprint "
                f"{result.weights_fingerprint} (the chief's is the same). The chief "
                "wrote the run directory and the test metrics."
            )
            return
        _print_metrics(result.metrics)
        click.echo(f"\nRun directory: {result.run_dir}")

    params = [
        *_config_params(),
        click.Option(
            ["--run-dir"],
            type=click.Path(file_okay=False, path_type=Path),
            help="Where to write the run (default: runs/NAME/<timestamp>).",
        ),
        click.Option(
            ["--resume"],
            type=click.Path(file_okay=False, exists=True, path_type=Path),
            help="Continue the interrupted run in this directory.",
        ),
        click.Option(
            ["--strategy"],
            type=click.Choice(["auto", "one", "mirrored", "multiworker"]),
            help="Shortcut for train.strategy: how to spread training over devices "
            "and machines.",
        ),
        click.Option(
            ["--workers"],
            metavar="HOST:PORT,...",
            help="The machines of a multi-worker run, the chief first; the same on "
            "every machine (writes TF_CONFIG; implies --strategy multiworker).",
        ),
        click.Option(
            ["--worker-index"],
            type=click.IntRange(min=0),
            help="This machine's place in --workers (0: the chief, which writes the "
            "run directory).",
        ),
        DRY_RUN_OPTION,
        *_field_options(recipe.Config),
    ]
    return click.Command(
        recipe.name,
        callback=callback,
        params=params,
        help=f"{recipe.summary}\n\nTrains, evaluates on the test split and writes "
        "a run directory. Config options below override --config and --set.",
        short_help=recipe.summary,
    )


@main.group(cls=RecipeGroup, command_for=_run_command)
def run() -> None:
    """Train a recipe and report its test metrics next to the baselines'."""


@main.command()
@click.argument(
    "run_dir", type=click.Path(file_okay=False, exists=True, path_type=Path)
)
@click.option("--data", "data_path", help="Evaluate on this data instead (data.path).")
@click.option("--set", "assignments", multiple=True, metavar="KEY=VALUE")
@click.option(
    "--output",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Also write the metrics to this JSON file.",
)
def evaluate(
    run_dir: Path,
    data_path: str | None,
    assignments: tuple[str, ...],
    output: Path | None,
) -> None:
    """Evaluate the saved model of RUN_DIR on the test split (no retraining)."""
    _load_frameworks()
    from rnnkit.training import runner

    with user_errors():
        recipe, config, model = runner.load_run(run_dir, registry.load)
        overrides = config_lib.parse_assignments(recipe.Config, list(assignments))
        if data_path is not None:
            overrides["data.path"] = data_path
        config = config.with_values(overrides)
        runner.configure_runtime(config.train)
        metrics = {"test": recipe.evaluate(model, recipe.load_data(config), config)}
        if output is not None:
            runner.write_json(output, metrics)
    _print_metrics(metrics)


@main.command(context_settings={"ignore_unknown_options": True})
@click.argument(
    "run_dir", type=click.Path(file_okay=False, exists=True, path_type=Path)
)
@click.argument("inputs", nargs=-1, type=click.UNPROCESSED)
def predict(run_dir: Path, inputs: tuple[str, ...]) -> None:
    """Predict with the saved model of RUN_DIR from INPUTS (files, texts, ...).

    A recipe may accept options among the INPUTS that set config values for the
    prediction (its `predict_options`), e.g. the translation recipe's
    `--beam N --n-best K`.
    """
    _load_frameworks()
    from rnnkit.training import runner

    with user_errors():
        recipe, config, model = runner.load_run(run_dir, registry.load)
        texts, overrides = _predict_options(recipe, list(inputs))
        lines = recipe.predict(model, texts, config.with_values(overrides))
    for line in lines:
        click.echo(line)


def _predict_options(recipe: Recipe, args: list[str]) -> tuple[list[str], dict]:
    """Splits `rnnkit predict` arguments into inputs and the recipe's option values."""
    infos = {info.key: info for info in config_lib.fields_of(recipe.Config)}
    declared = ", ".join(f"--{name}" for name in recipe.predict_options) or "none"
    inputs, values = [], {}
    remaining = iter(args)
    for arg in remaining:
        if arg == "--":  # everything after it is input, even text that starts "--"
            inputs.extend(remaining)
            break
        if not arg.startswith("--"):
            inputs.append(arg)
            continue
        name, has_value, text = arg[2:].partition("=")
        if name not in recipe.predict_options:
            raise RnnkitError(
                f"no such option: --{name} (options of recipe {recipe.name!r} for "
                f"predict: {declared})"
            )
        if not has_value:
            text = next(remaining, None)
            if text is None:
                raise RnnkitError(f"option --{name} needs a value")
        key = recipe.predict_options[name]
        values[key] = config_lib.parse_text(infos[key], text)
    return inputs, values


def _cluster_role(params: dict[str, Any]) -> str | None:
    """Checks --chief, --worker and their options; "chief", "worker" or None."""
    chief, worker = params["chief"], params["worker"]
    if chief is not None:
        tuning_cluster.parse_address(chief)
    if worker is not None:
        tuning_cluster.check_worker_id(worker)
        if chief is None:
            raise RnnkitError(
                "--worker runs trials for a chief: give its address with "
                "--chief HOST:PORT"
            )
        wrong = [
            option
            for option, given in (
                ("--overwrite", params["overwrite"]),
                ("--worker-timeout", params["worker_timeout"] is not None),
            )
            if given
        ]
        if wrong:
            raise RnnkitError(
                f"{', '.join(wrong)} belongs to the chief's command, not a worker's"
            )
        if params["tuner"] == "hyperband" and params["tune_dir"] is None:
            raise RnnkitError(
                "a Hyperband worker continues trials from other workers' "
                "checkpoints: give it the chief's tuning folder on a shared "
                "filesystem (--tune-dir)"
            )
        return "worker"
    if params["connect_timeout"] is not None:
        raise RnnkitError("--connect-timeout is a worker's (--worker ID) option")
    if chief is None and params["worker_timeout"] is not None:
        raise RnnkitError("--worker-timeout is the chief's (--chief) option")
    return None if chief is None else "chief"


def _tune_command(recipe: Recipe) -> click.Command:
    def callback(**params: Any) -> None:
        with user_errors():
            role = _cluster_role(params)
        tune_dir = params["tune_dir"] or Path("runs") / recipe.name / "tuning"
        connect_timeout = params["connect_timeout"] or tuning_cluster.CONNECT_TIMEOUT
        if params.pop("dry_run"):
            if role == "worker":
                what = (
                    f"without --dry-run it runs trials for the chief at "
                    f"{params['chief']} as worker {params['worker']}"
                )
            else:
                what = (
                    f"without --dry-run it searches {params['max_trials']} trial(s) "
                    f"into {tune_dir}"
                    + (f", served to workers at {params['chief']}" if role else "")
                )
            _dry_run(recipe, params, what)
            return
        # Before TensorFlow starts and the data loads, so that these fail in seconds.
        with user_errors():
            if role == "worker":
                tuning_cluster.wait_for_chief(
                    tuning_cluster.parse_address(params["chief"]), connect_timeout
                )
            elif role == "chief":
                tuning_cluster.check_can_listen(
                    tuning_cluster.parse_address(params["chief"])
                )
        if role != "worker":  # a worker's trials run in processes of their own
            _load_frameworks()
        from rnnkit import tuning

        with user_errors():
            config = _resolve_config(recipe, params)
            if role == "worker":
                ran = tuning.tune_worker(
                    recipe,
                    config,
                    params["worker"],
                    params["chief"],
                    tuner=params["tuner"],
                    executions_per_trial=params["executions_per_trial"],
                    directory=params["tune_dir"],
                    connect_timeout=connect_timeout,
                )
            else:
                result = tuning.tune(
                    recipe,
                    config,
                    tuner=params["tuner"],
                    max_trials=params["max_trials"],
                    executions_per_trial=params["executions_per_trial"],
                    directory=tune_dir,
                    overwrite=params["overwrite"],
                    chief=params["chief"],
                    worker_timeout=params["worker_timeout"]
                    or tuning_cluster.WORKER_TIMEOUT,
                )
        if role == "worker":
            click.echo(
                f"\nWorker {ran.worker_id} ran {len(ran.trials)} trial(s) for the "
                f"chief at {ran.chief}:"
            )
            for trial in ran.trials:
                click.echo(
                    f"  trial {trial.trial_id}: {trial.status} in {trial.seconds:g} s, "
                    f"{trial.resident_mib:.0f} MiB resident at its end"
                )
            return
        click.echo(
            f"\n{result.completed} trial(s) completed; best {recipe.objective} = "
            f"{result.best_score:.6g}"
        )
        values = ", ".join(f"{k}={v}" for k, v in result.best_values.items())
        click.echo(f"Best trial:  {result.best_trial_id} ({values})")
        click.echo(f"Best config: {result.best_config_path}")
        click.echo(f"Trials:      {result.trials_path}")
        best = result.best_config_path
        click.echo(f"Train it with: rnnkit run {recipe.name} --config {best}")

    params = [
        click.Option(
            ["--tuner"],
            type=click.Choice(["random", "hyperband", "bayesian"]),
            default="random",
            show_default=True,
            help="Keras Tuner search algorithm.",
        ),
        click.Option(
            ["--max-trials"],
            type=click.IntRange(min=1),
            default=10,
            show_default=True,
            help="Most configurations to try.",
        ),
        click.Option(
            ["--executions-per-trial"],
            type=click.IntRange(min=1),
            default=1,
            show_default=True,
            help="Trainings per configuration (their mean is the score).",
        ),
        click.Option(
            ["--tune-dir"],
            type=click.Path(file_okay=False, path_type=Path),
            help="Tuning state and results (default: runs/NAME/tuning); "
            "running again resumes it.",
        ),
        click.Option(
            ["--overwrite"], is_flag=True, help="Start afresh instead of resuming."
        ),
        click.Option(
            ["--chief"],
            metavar="HOST:PORT",
            help="Distributed search: alone, serve the search to workers at this "
            "address (this machine's); with --worker, the chief to run trials for.",
        ),
        click.Option(
            ["--worker"],
            metavar="ID",
            help="Run trials for the chief at --chief, as worker ID (e.g. 1). "
            "--tune-dir: where to keep its checkpoints (default: a temporary folder).",
        ),
        click.Option(
            ["--connect-timeout"],
            type=click.FloatRange(min=0, min_open=True),
            metavar="SECONDS",
            help="Worker: how long to wait for the chief, at the start and for each "
            f"request [default: {tuning_cluster.CONNECT_TIMEOUT:g}].",
        ),
        click.Option(
            ["--worker-timeout"],
            type=click.FloatRange(min=0, min_open=True),
            metavar="SECONDS",
            help="Chief: how long to wait for a worker while no trial runs "
            f"[default: {tuning_cluster.WORKER_TIMEOUT:g}].",
        ),
        DRY_RUN_OPTION,
        *_config_params(),
        *_field_options(recipe.Config),
    ]
    return click.Command(
        recipe.name,
        callback=callback,
        params=params,
        help=f"{recipe.summary}\n\nSearches the recipe's search space with Keras Tuner "
        "and writes best.toml and trials.csv. Config options set the fixed values.",
        short_help=recipe.summary,
    )


@main.group(cls=RecipeGroup, command_for=_tune_command)
def tune() -> None:
    """Tune a recipe's hyperparameters with Keras Tuner."""


@main.command()
@click.argument(
    "run_dir",
    required=False,
    type=click.Path(file_okay=False, exists=True, path_type=Path),
)
@click.option(
    "--cell",
    "cells",
    multiple=True,
    type=click.Choice(["simple_rnn", "lstm", "gru"]),
    help="Without RUN_DIR: a cell to compare (repeatable; default: all three).",
)
@click.option(
    "--data",
    "data_path",
    help="Without RUN_DIR: text to use (data.path of the "
    "language_model recipe; default: The Time Machine).",
)
@click.option(
    "--level",
    type=click.Choice(["char", "word"]),
    default="char",
    show_default=True,
    help="Without RUN_DIR: tokens.",
)
@click.option(
    "--units",
    type=click.IntRange(min=1),
    default=128,
    show_default=True,
    help="Without RUN_DIR: recurrent units.",
)
@click.option(
    "--steps",
    type=click.IntRange(min=0),
    default=300,
    show_default=True,
    help="Training steps (Adam) between the fresh and trained pictures.",
)
@click.option(
    "--window",
    type=click.IntRange(min=2),
    default=100,
    show_default=True,
    help="T: steps back from the loss at which gradients are measured.",
)
@click.option(
    "--clipnorm",
    type=click.FloatRange(min=0),
    default=1.0,
    show_default=True,
    help="Global clip norm while training (0: none).",
)
@click.option(
    "--learning-rate",
    type=click.FloatRange(min=0, min_open=True),
    default=0.002,
    show_default=True,
    help="Adam's step size.",
)
@click.option("--seed", type=click.IntRange(min=0), default=0, show_default=True)
@click.option(
    "--output",
    type=click.Path(file_okay=False, path_type=Path),
    help="Where to write (default: RUN_DIR/diagnostics, or runs/diagnose/<time>).",
)
def diagnose(run_dir: Path | None, cells: tuple[str, ...], **options: Any) -> None:
    """Gradient-flow diagnostics of a language model (RUN_DIR) or of fresh cells.

    Measures ||dL_T/dh_t|| against T - t on windows of real text, for freshly
    initialised and trained models (SimpleRNN, LSTM, GRU with --cell), with the
    sigma_max(W_hh)^(T-t) bound, sigma_max during training and the global gradient
    norm before and after clipping. Writes CSV and PNG files.
    """
    _load_frameworks()
    from rnnkit import diagnostics

    with user_errors():
        if run_dir is not None and (cells or options["data_path"]):
            raise RnnkitError(
                "--cell and --data compare fresh cells; leave out RUN_DIR"
            )
        fresh, trained, output, data = _diagnose_models(run_dir, cells, options)
        window = options["window"]
        probe = diagnostics.probe_windows(data.test_ids, 16, window + 1)
        written = diagnostics.compare_models(
            fresh,
            data.train_ids,
            probe,
            output,
            trained=trained,
            steps=options["steps"],
            make_optimizer=lambda: _adam(options["learning_rate"]),
            clipnorm=options["clipnorm"],
            seed=options["seed"],
        )
    for path in written.values():
        click.echo(str(path))


def _adam(learning_rate: float) -> Any:
    import keras

    return keras.optimizers.Adam(learning_rate)


def _diagnose_models(
    run_dir: Path | None, cells: tuple[str, ...], options: dict[str, Any]
) -> tuple[dict, dict, Path, Any]:
    """{label: fresh model}, {label: trained model}, the output folder and the data."""
    import datetime

    import keras

    from rnnkit.models.language_model import LanguageModel
    from rnnkit.training import runner

    if run_dir is not None:
        recipe, config, model = runner.load_run(run_dir, registry.load)
        if not isinstance(model, LanguageModel):
            raise RnnkitError(
                f"{run_dir} is a run of recipe {recipe.name!r}; rnnkit diagnose reads "
                "language_model runs"
            )
        runner.configure_runtime(config.train)
        data = recipe.load_data(config)
        trained = model.with_batch_size(None, stateful=False)
        settings = {**model.get_config(), "stateful": False, "batch_size": None}
        settings.pop("name", None)
        fresh = LanguageModel.from_config(settings)
        fresh.build()
        label = model.cell_type
        return (
            {label: fresh},
            {label: trained},
            options["output"] or (run_dir / "diagnostics"),
            data,
        )
    recipe = registry.load("language_model")
    config = config_lib.resolve(
        recipe.Config,
        None,
        {
            "data.path": options["data_path"],
            "data.level": options["level"],
            "train.seed": options["seed"],
            "train.batch_size": 1,
            "train.bptt": 1,
        },
    )
    runner.configure_runtime(config.train)
    data = recipe.load_data(config)
    fresh = {}
    for cell in cells or ("simple_rnn", "lstm", "gru"):
        keras.utils.set_random_seed(options["seed"])
        model = LanguageModel(
            data.tokens, cell, embedding_dim=32, units=options["units"], num_layers=1
        )
        model.build()
        fresh[cell] = model
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    output = options["output"] or Path("runs") / "diagnose" / stamp
    return fresh, {}, output, data


class _ShapeType(click.ParamType):
    """STEPSxUNITS, e.g. 100x256."""

    name = "STEPSxUNITS"

    def convert(self, value: Any, param: Any, ctx: Any) -> tuple[int, int]:
        if isinstance(value, tuple):
            return value
        steps, cross, units = str(value).lower().partition("x")
        if cross and steps.isdigit() and units.isdigit() and int(steps) * int(units):
            return int(steps), int(units)
        self.fail(
            f"{value!r} is not STEPSxUNITS with positive integers (e.g. 100x256)",
            param,
            ctx,
        )


@main.command()
@click.option(
    "--cell",
    "families",
    multiple=True,
    type=click.Choice(["simple_rnn", "lstm", "gru"]),
    help="A recurrent layer to measure (repeatable; default: all three).",
)
@click.option(
    "--shape",
    "shapes",
    multiple=True,
    type=_ShapeType(),
    help="Time steps x units to measure at (repeatable; default: 100x256 and "
    "200x512). Calls at other shapes follow the nearest measured one.",
)
@click.option(
    "--mode",
    "modes",
    multiple=True,
    type=click.Choice(["training", "inference"]),
    help="What to time (repeatable; default: both).",
)
@click.option("--batch", type=click.IntRange(min=1), default=64, show_default=True)
@click.option(
    "--features",
    type=click.IntRange(min=1),
    default=64,
    show_default=True,
    help="Input features per step.",
)
@click.option(
    "--rounds",
    type=click.IntRange(min=1),
    default=9,
    show_default=True,
    help="Interleaved rounds of about 0.25 s per loop (the median decides).",
)
@click.option(
    "--show", is_flag=True, help="Only print this machine's cached measurements."
)
@click.option(
    "--forget",
    is_flag=True,
    help="Drop this machine's cached measurements first (alone: and stop there).",
)
def calibrate(
    families: tuple[str, ...],
    shapes: tuple[tuple[int, int], ...],
    modes: tuple[str, ...],
    show: bool,
    forget: bool,
    **options: Any,
) -> None:
    """Measure where XLA-compiled loops are faster on this machine, and cache it.

    Times each recurrent layer with its time loop XLA-compiled and plain, side by
    side on the CPU (TensorFlow backend), and writes the choice for this machine to
    the cache file (`rnnkit.layers.calibration`). From then on the layers'
    jit_compile=None follows it in every process here; without it, defaults
    measured on one CPU decide.
    """
    _load_frameworks()
    from rnnkit.layers import calibration

    context = click.get_current_context()
    given = [
        name
        for name in ("families", "shapes", "modes", *options)
        if context.get_parameter_source(name) == click.core.ParameterSource.COMMANDLINE
    ]
    measuring = not show and not (forget and not given)
    with user_errors():
        if show and (forget or given):
            raise RnnkitError("--show only prints: leave out the other options")
        if forget:
            dropped = calibration.forget()
            click.echo(
                ("Dropped" if dropped else "There were no")
                + f" measurements for this machine in {calibration.cache_file()}"
            )
        if not measuring:
            if show:
                _show_calibration(calibration)
            return
        calibration.check_can_calibrate()
        calibration.measurements()  # an unreadable cache fails before the timing
        click.echo(f"This machine: {calibration.machine_key()}")
        click.echo(
            f"{'layer':9} {'mode':9} steps x units batch     | {'XLA':>9} "
            f"{'plain':>9}       | XLA/plain (range of rounds) -> choice"
        )
        found = calibration.calibrate(
            [_family_name(name) for name in families] or calibration.FAMILIES,
            list(shapes) or calibration.DEFAULT_SHAPES,
            modes=list(modes) or calibration.MODES,
            report=lambda item: click.echo(item.line()),
            **options,
        )
    plural = "s" * (len(found) != 1)
    click.echo(
        f"\nCached {len(found)} measurement{plural} in {calibration.cache_file()}: "
        "with jit_compile=None the layers compile where the choice says XLA "
        f"(at least {calibration.MIN_GAIN:.0%} faster)."
    )


def _family_name(name: str) -> str:
    """The layer class's name for a `--cell` choice (as `rnnkit diagnose` spells it)."""
    return {"gru": "GRU", "lstm": "LSTM", "simple_rnn": "SimpleRNN"}[name]


def _show_calibration(calibration: Any) -> None:
    found = calibration.measurements()
    click.echo(f"This machine: {calibration.machine_key()}")
    click.echo(f"Cache file: {calibration.cache_file()}")
    if not found:
        click.echo(
            "No measurements for this machine: jit_compile=None follows each "
            "cell's xla_pays (measured on one CPU). Run `rnnkit calibrate`."
        )
    for item in found:
        click.echo(item.line())


@main.command()
def info() -> None:
    """Show versions, the Keras backend and the visible devices."""
    _load_frameworks()
    import keras

    from rnnkit.training.runner import versions

    for name, version in versions().items():
        click.echo(f"{name:<12} {version}")
    click.echo(f"{'backend':<12} {keras.backend.backend()}")
    for device in _devices(keras.backend.backend()):
        click.echo(f"{'device':<12} {device}")
    click.echo(f"{'recipes':<12} {', '.join(registry.available()) or 'none'}")
    if keras.backend.backend() == "tensorflow":
        from rnnkit.layers import calibration

        try:
            count = len(calibration.measurements())
            line = (
                f"{count} measurements for this machine (rnnkit calibrate --show)"
                if count
                else "defaults (not calibrated here: rnnkit calibrate)"
            )
        except calibration.CalibrationError as error:
            line = f"defaults: {error}"
        click.echo(f"{'xla loops':<12} {line}")


def _devices(backend: str) -> list[str]:
    if backend == "tensorflow":
        import tensorflow as tf

        return [f"{d.device_type} {d.name}" for d in tf.config.list_physical_devices()]
    if backend == "jax":
        import jax

        return [f"{d.platform} {d}" for d in jax.devices()]
    if backend == "torch":
        import torch

        gpus = [
            f"cuda {torch.cuda.get_device_name(i)}"
            for i in range(torch.cuda.device_count())
        ]
        return ["cpu", *gpus]
    return []
