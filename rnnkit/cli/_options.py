"""Options made from a recipe's config, for `rnnkit run NAME` and `rnnkit tune NAME`.

Every field of the recipe's `Config` dataclass becomes an option (`--model.units 64`)
with the field's help text, beside `--config FILE`, `--set key=value` and the
shortcuts `--epochs`, `--seed`, `--device`, `--precision` (and the older
`--mixed-precision`, for mixed_float16); precedence is
defaults < config file < command line (`rnnkit.config.resolve`). `RecipeGroup` makes
one such command per installed recipe, loading a recipe only when it is named.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from rnnkit import config as config_lib
from rnnkit import registry
from rnnkit.cli._common import user_errors
from rnnkit.errors import RnnkitError
from rnnkit.recipe import Recipe

FIELD_PREFIX = "cfg__"


def field_options(config_cls: type[config_lib.RecipeConfig]) -> list[click.Option]:
    """One option per config field, `--section.key`, with its help and default."""
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


def config_params() -> list[click.Option]:
    """--config, --set and the shortcuts for the most used train.* keys."""
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
            ["--precision"],
            type=click.Choice(config_lib.PRECISIONS),
            help="Shortcut for train.precision.",
        ),
        click.Option(
            ["--mixed-precision/--no-mixed-precision"],
            default=None,
            help="Shortcut for train.mixed_precision (the older switch: "
            "--precision mixed_float16).",
        ),
    ]


def resolve_config(recipe: Recipe, params: dict[str, Any]) -> config_lib.RecipeConfig:
    """The config that defaults, --config, --set, the shortcuts and the field
    options give, in that order of precedence."""
    overrides = config_lib.parse_assignments(recipe.Config, list(params["assignments"]))
    overrides.update(_field_values(recipe.Config, params))
    shortcuts = {
        "train.epochs": params["epochs"],
        "train.seed": params["seed"],
        "train.device": params["device"],
        "train.precision": params["precision"],
        "train.mixed_precision": params["mixed_precision"],
    }
    overrides.update({k: v for k, v in shortcuts.items() if v is not None})
    return config_lib.resolve(recipe.Config, params["config_file"], overrides)


def given_config_params(params: dict[str, Any]) -> list[str]:
    """The config options given on the command line, as the user spelled them."""
    given = [
        f"--{name.replace('_', '-')}"
        for name in (
            "config_file",
            "epochs",
            "seed",
            "device",
            "precision",
            "mixed_precision",
        )
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


DRY_RUN_OPTION = click.Option(
    ["--dry-run"],
    is_flag=True,
    help="Check the command and its config (values, ranges, combinations that cannot "
    "work, config file), print the resolved config and exit, without loading data, "
    "training or writing anything.",
)


def dry_run(recipe: Recipe, params: dict[str, Any], what: str) -> None:
    """Resolves the config as the real command would, prints it, touches nothing."""
    with user_errors():
        if params.get("resume") is not None:
            config = config_lib.load_toml(
                recipe.Config, Path(params["resume"]) / "config.toml"
            )
        else:
            config = resolve_config(recipe, params)
        recipe.check_config(config)
    click.echo(config_lib.to_toml(config, f"rnnkit {recipe.name}: resolved config"))
    click.echo(f"Dry run: the config is valid; {what}")


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
