"""Typed recipe configuration: dataclass defaults <- TOML file <- command line.

A recipe's configuration is one top-level dataclass (a subclass of `RecipeConfig`) with
four nested sections, each itself a dataclass:

- `data`        where the data comes from and how it is cut (`data.path`, ...)
- `model`       the architecture (`model.units`, `model.cell_type`, ...)
- `train`       the training loop the runner drives (`train.epochs`, `train.seed`, ...)
- `evaluation`  how the test figures are computed (`evaluation.folds`, ...)

Every leaf field is declared with `field(default, help=...)`, so the same declaration
gives the default, the help text of the generated command-line option and the type that
a value from TOML or from `--set key=value` is checked against. A key is always
addressed by its dotted path, the same in all three places:

    rnnkit run stock --set data.path=prices.csv --model.units 64

    # my.toml
    [data]
    path = "prices.csv"
    [model]
    units = 64

Unknown keys are errors that name the nearest valid key. Supported leaf types: `bool`,
`int`, `float`, `str`, `X | None` of those, and `tuple[int, ...]` / `tuple[str, ...]`
(TOML arrays, on the command line too, or comma-separated there). A field may restrict
its values with `choices=(...)`, and a numeric field declares its range beside its
default with `at_least=`, `above=`, `at_most=` and `below=` (for a list, every item):

    dropout: float = field(0.1, help="Dropout rate.", at_least=0.0, below=1.0)

A value outside the range, from TOML, `--set` or Python, is a `ConfigError` that names
the key, the value and the allowed range.

A config file that differs from another in a few keys starts from it and sets only
those (`extend`, at the top, takes a path relative to the file's folder; the base file
may extend another in turn):

    # m4_hourly_linear.toml
    extend = "m4_hourly.toml"
    [model]
    architecture = "linear"

`None` cannot be written in TOML, so an optional field is left out of a written file
when it is `None`; reading the file back gives the default, which is why every optional
field must default to `None`.

This module is light (no TensorFlow, no Keras): `rnnkit list` and `--help` import it.
It stays one module, over 500 lines: declaring a field, checking a value and reading
TOML all turn on the same field metadata (`field`, `Bounds`, `FieldInfo`), and each
part split off would import the others' private helpers.
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
import sys
import types
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeVar

import tomli_w

from rnnkit.errors import ConfigError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib

__all__ = [
    "Bounds",
    "DataConfig",
    "EvaluationConfig",
    "ModelConfig",
    "RecipeConfig",
    "TrainConfig",
    "field",
    "section",
]

SECTIONS = ("data", "model", "train", "evaluation")
# Keras dtype policies a run may compute under (train.precision).
PRECISIONS = ("float32", "mixed_bfloat16", "mixed_float16")
ConfigT = TypeVar("ConfigT", bound="RecipeConfig")


@dataclasses.dataclass(frozen=True)
class Bounds:
    """The allowed range of a numeric field: each limit is optional.

    `at_least`/`at_most` are inclusive limits, `above`/`below` exclusive ones, so
    `Bounds(at_least=0.0, below=1.0)` is the interval [0, 1).

    Example:
    >>> Bounds(at_least=0.0, below=1.0).describe()
    '[0, 1)'
    >>> Bounds(at_least=0.0, below=1.0).contains(1.0)
    False
    """

    at_least: float | None = None
    above: float | None = None
    at_most: float | None = None
    below: float | None = None

    def __post_init__(self) -> None:
        if self.at_least is not None and self.above is not None:
            raise ValueError("give at most one lower limit: at_least or above")
        if self.at_most is not None and self.below is not None:
            raise ValueError("give at most one upper limit: at_most or below")

    def __bool__(self) -> bool:
        return any(
            limit is not None
            for limit in (self.at_least, self.above, self.at_most, self.below)
        )

    def contains(self, value: float) -> bool:
        return not (
            (self.at_least is not None and value < self.at_least)
            or (self.above is not None and value <= self.above)
            or (self.at_most is not None and value > self.at_most)
            or (self.below is not None and value >= self.below)
        )

    def describe(self) -> str:
        """The range as text: ">= 1", "> 0", "[0, 1)", "(0, 1)", "<= 10"."""
        low, low_open = (
            (self.above, True) if self.above is not None else (self.at_least, False)
        )
        high, high_open = (
            (self.below, True) if self.below is not None else (self.at_most, False)
        )
        if low is not None and high is not None:
            return (
                f"{'(' if low_open else '['}{_number(low)}, "
                f"{_number(high)}{')' if high_open else ']'}"
            )
        if low is not None:
            return f"{'>' if low_open else '>='} {_number(low)}"
        if high is not None:
            return f"{'<' if high_open else '<='} {_number(high)}"
        return "any"


def _number(value: float) -> str:
    return repr(int(value)) if float(value).is_integer() else repr(value)


def field(
    default: Any,
    *,
    help: str,  # noqa: A002 - the name click and argparse use
    choices: tuple[Any, ...] | None = None,
    at_least: float | None = None,
    above: float | None = None,
    at_most: float | None = None,
    below: float | None = None,
) -> Any:
    """Declares one configuration value: its default, help text and allowed values.

    Args:
        default: the default value (an immutable value: use tuples, not lists).
        help: one sentence shown by `rnnkit run NAME --help`.
        choices: if given, the only values accepted.
        at_least: numeric fields: the smallest value allowed (inclusive).
        above: numeric fields: values must be greater than this (exclusive).
        at_most: numeric fields: the largest value allowed (inclusive).
        below: numeric fields: values must be less than this (exclusive).
            For a list field the limits apply to every item; `None` (for an
            optional field) is always allowed.
    """
    if choices is not None and default is not None and default not in choices:
        raise ValueError(f"default {default!r} is not one of choices {choices!r}")
    bounds = Bounds(at_least=at_least, above=above, at_most=at_most, below=below)
    items = default if isinstance(default, tuple) else (default,)
    for item in items:
        if bounds and item is not None and not bounds.contains(item):
            raise ValueError(f"default {default!r} is outside {bounds.describe()}")
    return dataclasses.field(
        default=default,
        metadata={"help": help, "choices": choices, "bounds": bounds},
    )


def section(cls: type, help: str = "", **defaults: Any) -> Any:  # noqa: A002
    """Declares a nested section; `defaults` override the section class's own defaults.

    Example: `train: TrainConfig = section(TrainConfig, epochs=30, batch_size=32)`.
    """
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(defaults) - names)
    if unknown:
        raise ValueError(f"{cls.__name__} has no field(s) {unknown}")
    return dataclasses.field(
        default_factory=lambda: cls(**defaults), metadata={"help": help}
    )


@dataclasses.dataclass
class DataConfig:
    """Base of every recipe's `data` section."""

    path: str | None = field(
        None,
        help="Local data file or folder to read instead of the default source.",
    )


@dataclasses.dataclass
class ModelConfig:
    """Base of every recipe's `model` section (recipes add the architecture)."""


@dataclasses.dataclass
class TrainConfig:
    """The training loop's settings (read by the runner and by `build_model`)."""

    epochs: int = field(
        10, help="Maximum number of passes over the training data.", at_least=1
    )
    batch_size: int = field(
        64,
        help="Examples per gradient step on each replica (device); with several "
        "replicas the global batch is this times the replicas.",
        at_least=1,
    )
    learning_rate: float = field(1e-3, help="Optimizer step size.", above=0.0)
    patience: int = field(
        5,
        help="Stop after this many epochs without a better validation loss "
        "(0 disables early stopping); the best weights are kept.",
        at_least=0,
    )
    max_minutes: float = field(
        0.0,
        help="Stop training after this many minutes (0: no limit): the epoch under "
        "way ends at the batch that passes it and is validated; with early stopping "
        "on (train.patience > 0) its best weights are kept. Each fit counts afresh "
        "(a resumed run, a backtest fold, a tuning trial).",
        at_least=0.0,
    )
    shuffle: bool = field(True, help="Shuffle training examples every epoch.")
    seed: int = field(
        1337,
        help="Seed for weights, shuffling and dropout (same seed, same run).",
        at_least=0,
    )
    device: str = field(
        "auto",
        help="Where to train: auto (GPU if present), cpu, or gpu.",
        choices=("auto", "cpu", "gpu"),
    )
    precision: str = field(
        "float32",
        help="The Keras dtype policy: float32, or float32 weights computing in "
        "bfloat16 (mixed_bfloat16) or float16 (mixed_float16, with loss scaling).",
        choices=PRECISIONS,
    )
    mixed_precision: bool = field(
        False,
        help="The older switch: true is a shortcut for train.precision=mixed_float16.",
    )
    strategy: str = field(
        "auto",
        help="How to spread training: auto (all GPUs when there are several, else one "
        "device), one (one device), mirrored (the devices of train.devices, or all "
        "visible GPUs, on this machine), multiworker (the machines of TF_CONFIG, "
        "which --workers and --worker-index write).",
        choices=("auto", "one", "mirrored", "multiworker"),
    )
    worker_timeout: float = field(
        120.0,
        help="strategy=multiworker: seconds to wait for every worker to join, and "
        "for a collective step, before stopping with an error.",
        above=0.0,
    )
    devices: tuple[str, ...] = field(
        (),
        help="GPUs for strategy=mirrored, e.g. --set train.devices=gpu:0,gpu:1. "
        "Empty: all visible GPUs.",
    )

    def dtype_policy(self) -> str:
        """The Keras dtype policy these settings ask for: `precision`, or
        mixed_float16 from the older `mixed_precision = true`.

        Example:
        >>> TrainConfig(mixed_precision=True).dtype_policy()
        'mixed_float16'
        >>> TrainConfig(precision="mixed_bfloat16", mixed_precision=True).dtype_policy()
        Traceback (most recent call last):
        ...
        rnnkit.errors.ConfigError: train.mixed_precision=true means ...
        """
        if not self.mixed_precision or self.precision == "mixed_float16":
            return self.precision
        if self.precision == "float32":
            return "mixed_float16"
        raise ConfigError(
            "train.mixed_precision=true means train.precision=mixed_float16, but "
            f"train.precision={self.precision}; set only train.precision"
        )


@dataclasses.dataclass
class EvaluationConfig:
    """How the test figures are computed."""

    folds: int = field(
        0,
        help="Walk-forward backtest folds (expanding window, refit per fold); "
        "0 uses the single chronological split.",
        at_least=0,
    )


@dataclasses.dataclass
class RecipeConfig:
    """Top-level configuration: one dataclass per section.

    A recipe subclasses it and replaces the sections with its own subclasses:

        @dataclasses.dataclass
        class StockConfig(RecipeConfig):
            data: StockData = section(StockData)
            model: StockModel = section(StockModel)
            train: TrainConfig = section(TrainConfig, epochs=30)
    """

    data: DataConfig = section(DataConfig, "Where the data comes from.")
    model: ModelConfig = section(ModelConfig, "The architecture.")
    train: TrainConfig = section(TrainConfig, "The training loop.")
    evaluation: EvaluationConfig = section(EvaluationConfig, "The test evaluation.")

    def to_dict(self) -> dict[str, dict[str, Any]]:
        """Nested plain dictionary {section: {field: value}} (tuples kept as tuples)."""
        return {
            name: {
                f.name: getattr(getattr(self, name), f.name)
                for f in dataclasses.fields(getattr(self, name))
            }
            for name in SECTIONS
        }

    def flat(self) -> dict[str, Any]:
        """Flat dictionary {"section.field": value}."""
        return {
            f"{name}.{key}": value
            for name, values in self.to_dict().items()
            for key, value in values.items()
        }

    def with_values(self: ConfigT, values: Mapping[str, Any]) -> ConfigT:
        """A checked copy with dotted keys set, e.g. `{"model.units": 64}`."""
        return apply_values(self, values, source="value")

    def get(self, key: str) -> Any:
        """The value at a dotted key such as "model.units"."""
        section_name, name = _split_key(type(self), key)
        return getattr(getattr(self, section_name), name)


# -- Field introspection ------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class FieldInfo:
    """One leaf field of a config class: its dotted key, type, default and help."""

    key: str
    type: Any
    default: Any
    help: str
    choices: tuple[Any, ...] | None
    bounds: Bounds = Bounds()

    @property
    def is_numeric(self) -> bool:
        """True for int and float fields and lists of them (bool is not numeric)."""
        base, _ = _strip_optional(self.type)
        if typing.get_origin(base) is tuple:
            base = typing.get_args(base)[0]
        return base in (int, float)


def fields_of(config_cls: type[RecipeConfig]) -> list[FieldInfo]:
    """Every leaf field of a config class, section by section, in declaration order."""
    defaults = config_cls()
    top_hints = typing.get_type_hints(config_cls)
    infos = []
    for section_name in SECTIONS:
        section_cls = top_hints[section_name]
        hints = typing.get_type_hints(section_cls)
        section_default = getattr(defaults, section_name)
        for f in dataclasses.fields(section_cls):
            infos.append(
                FieldInfo(
                    key=f"{section_name}.{f.name}",
                    type=hints[f.name],
                    default=getattr(section_default, f.name),
                    help=f.metadata.get("help", ""),
                    choices=f.metadata.get("choices"),
                    bounds=f.metadata.get("bounds", Bounds()),
                )
            )
    return infos


def _field_map(config_cls: type[RecipeConfig]) -> dict[str, FieldInfo]:
    return {info.key: info for info in fields_of(config_cls)}


def _suggest(key: str, valid: list[str]) -> str:
    close = difflib.get_close_matches(key, valid, n=1, cutoff=0.5)
    if not close:
        # A bare field name ("units") usually means the dotted key that ends with it.
        close = [v for v in valid if v.split(".")[-1] == key.split(".")[-1]][:1]
    return f"; did you mean {close[0]!r}?" if close else ""


def _split_key(config_cls: type[RecipeConfig], key: str) -> tuple[str, str]:
    valid = list(_field_map(config_cls))
    if key not in valid:
        raise ConfigError(f"unknown config key {key!r}{_suggest(key, valid)}")
    section_name, name = key.split(".", 1)
    return section_name, name


# -- Value checking and parsing -------------------------------------------------------


def _strip_optional(tp: Any) -> tuple[Any, bool]:
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) == 1:
            return args[0], len(args) != len(typing.get_args(tp))
    return tp, False


def type_name(tp: Any) -> str:
    """Short human name of a field type, for help text and errors."""
    base, optional = _strip_optional(tp)
    if typing.get_origin(base) is tuple:
        name = f"list of {typing.get_args(base)[0].__name__}"
    else:
        name = base.__name__
    return f"{name} or none" if optional else name


def _parse_bool(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off"):
        return False
    raise ValueError(f"expected true or false, got {text!r}")


def _parse_scalar(base: type, text: str) -> Any:
    if base is bool:
        return _parse_bool(text)
    if base is int:
        return int(text)
    if base is float:
        return float(text)
    return text


def parse_text(info: FieldInfo, text: str) -> Any:
    """Converts command-line text to the field's type ("none" clears an optional)."""
    base, optional = _strip_optional(info.type)
    stripped = text.strip()
    if optional and stripped.lower() in ("none", "null", ""):
        return None
    if typing.get_origin(base) is tuple and stripped.startswith("["):
        return check_value(info, _toml_array(info, stripped), "command line")
    try:
        if typing.get_origin(base) is tuple:
            item_type = typing.get_args(base)[0]
            items = [t.strip() for t in text.split(",") if t.strip()]
            return tuple(_parse_scalar(item_type, t) for t in items)
        return _parse_scalar(base, text)
    except ValueError:
        raise ConfigError(
            f"{info.key}: expected {type_name(info.type)}, got {text!r}"
        ) from None


def _toml_array(info: FieldInfo, text: str) -> list[Any]:
    """A list's command-line text written as a TOML array, as in a config file (the
    way to give items that hold commas); a one-line error when it is not one."""
    try:
        return tomllib.loads(f"value = {text}")["value"]
    except tomllib.TOMLDecodeError:
        raise ConfigError(
            f"{info.key}: {text!r} is not a TOML array; write it as in a config "
            'file, e.g. ["a", "b"] (strings quoted), or as items separated by commas'
        ) from None


def check_value(info: FieldInfo, value: Any, source: str) -> Any:
    """Returns `value` converted to the field's type, or raises ConfigError."""
    base, optional = _strip_optional(info.type)
    where = f"{info.key} ({source})"
    if value is None:
        if optional:
            return None
        raise ConfigError(f"{where}: a value is required")
    if typing.get_origin(base) is tuple:
        if not isinstance(value, list | tuple):
            raise ConfigError(
                f"{where}: expected {type_name(info.type)}, got {value!r}"
            )
        item_type = typing.get_args(base)[0]
        fake = FieldInfo(info.key, item_type, None, "", None, info.bounds)
        return tuple(check_value(fake, item, source) for item in value)
    if base is bool:
        ok = isinstance(value, bool)
    elif base is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif base is float:
        ok = isinstance(value, int | float) and not isinstance(value, bool)
        value = float(value) if ok else value
    else:
        ok = isinstance(value, base)
    if not ok:
        raise ConfigError(f"{where}: expected {type_name(info.type)}, got {value!r}")
    if info.choices is not None and value not in info.choices:
        allowed = ", ".join(str(c) for c in info.choices)
        raise ConfigError(f"{where}: {value!r} is not one of {allowed}")
    if info.bounds and base in (int, float) and not info.bounds.contains(value):
        raise ConfigError(
            f"{where}: {value!r} is out of range; allowed: {info.bounds.describe()}"
        )
    return value


def apply_values(
    config: ConfigT, values: Mapping[str, Any], source: str = "value"
) -> ConfigT:
    """A deep copy of `config` with dotted keys set to (type-checked) values."""
    fields = _field_map(type(config))
    result = copy.deepcopy(config)
    for key, value in values.items():
        if key not in fields:
            raise ConfigError(
                f"unknown config key {key!r} ({source}){_suggest(key, list(fields))}"
            )
        section_name, name = key.split(".", 1)
        setattr(
            getattr(result, section_name), name, check_value(fields[key], value, source)
        )
    return result


def parse_assignments(
    config_cls: type[RecipeConfig], assignments: list[str]
) -> dict[str, Any]:
    """Parses `--set key=value` strings into {dotted key: typed value}."""
    fields = _field_map(config_cls)
    values = {}
    for assignment in assignments:
        key, sep, text = assignment.partition("=")
        key = key.strip()
        if not sep:
            raise ConfigError(f"--set expects key=value, got {assignment!r}")
        if key not in fields:
            raise ConfigError(
                f"unknown config key {key!r} (--set){_suggest(key, list(fields))}"
            )
        values[key] = parse_text(fields[key], text)
    return values


# -- TOML -------------------------------------------------------------------------


# A config file may start from another: `extend = "base.toml"` at its top (a path
# relative to the file's folder) reads that file first, then this file's values over it.
EXTEND_KEY = "extend"


def _flatten_toml(document: Mapping[str, Any], path: Path) -> dict[str, Any]:
    flat = {}
    for section_name, table in document.items():
        if not isinstance(table, dict):
            raise ConfigError(
                f"{path}: top-level key {section_name!r} must be a table "
                f"such as [{section_name}]; valid tables: {', '.join(SECTIONS)} "
                f'(and, before them, {EXTEND_KEY} = "another.toml")'
            )
        for name, value in table.items():
            flat[f"{section_name}.{name}"] = value
    return flat


def _extended_files(path: Path) -> list[tuple[Path, dict[str, Any]]]:
    """(path, dotted values) of the config file `path` and of the files it extends,
    the first that extends nothing first; one-line errors for a missing base file, a
    value that is not a path, and files that extend each other."""
    chain: list[tuple[Path, dict[str, Any]]] = []
    seen = {path.resolve()}
    while True:
        document = read_toml(path)
        base = document.pop(EXTEND_KEY, None)
        chain.insert(0, (path, _flatten_toml(document, path)))
        if base is None:
            return chain
        if not isinstance(base, str) or not base:
            raise ConfigError(
                f"{path}: {EXTEND_KEY} takes the path of another config file, "
                f'relative to this one\'s folder, e.g. {EXTEND_KEY} = "default.toml"'
            )
        extended = path.parent / base
        if not extended.is_file():
            raise ConfigError(
                f"{path}: {EXTEND_KEY} = {base!r} names no file ({extended}); give a "
                f"config file's path relative to {path.parent}"
            )
        resolved = extended.resolve()
        if resolved in seen:
            raise ConfigError(
                f"{path}: {EXTEND_KEY} = {base!r} leads back to a file that extends "
                f"{path.name}; remove {EXTEND_KEY} from one of them"
            )
        seen.add(resolved)
        path = extended


def toml_keys(path: str | Path) -> set[str]:
    """The dotted keys a TOML config file sets, those of the files it extends too. A
    run's config.toml sets every key its recipe's config had when it ran, except those
    left None (written as comments)."""
    return {key for _, values in _extended_files(Path(path)) for key in values}


def read_toml(path: str | Path) -> dict[str, Any]:
    """The tables of a TOML config file, unchecked; a missing, unreadable or invalid
    file is a one-line `ConfigError`."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"config file not found: {path}") from None
    except (OSError, UnicodeDecodeError) as error:
        raise ConfigError(f"cannot read config file {path}: {error}") from None
    return parse_toml(text, path)


def parse_toml(text: str, path: str | Path) -> dict[str, Any]:
    """The tables of the TOML `text` read from `path`, unchecked; invalid TOML is a
    one-line `ConfigError` naming `path`."""
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise ConfigError(f"{path} is not valid TOML: {error}") from None


def load_toml(config_cls: type[ConfigT], path: str | Path) -> ConfigT:
    """Defaults of `config_cls` overridden by the values in a TOML file (after those
    of the file it extends, if it starts with `extend = "other.toml"`)."""
    config = config_cls()
    for file, values in _extended_files(Path(path)):
        config = apply_values(config, values, source=str(file))
    return config


def resolve(
    config_cls: type[ConfigT],
    config_file: str | Path | None = None,
    overrides: Mapping[str, Any] | None = None,
) -> ConfigT:
    """Defaults <- TOML file <- typed overrides (e.g. from `parse_assignments`).

    Example:
    >>> resolve(RecipeConfig, None, {"train.epochs": 3}).train.epochs
    3
    >>> resolve(RecipeConfig, None, {"train.epoch": 3})
    Traceback (most recent call last):
    ...
    rnnkit.errors.ConfigError: unknown config key 'train.epoch' ...; did you mean...
    """
    config = load_toml(config_cls, config_file) if config_file else config_cls()
    return apply_values(config, overrides or {}, source="command line")


def _toml_value(value: Any) -> str:
    """`value` as a TOML value, written by tomli-w; a list stays on one line."""
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_toml_value(item) for item in value) + "]"
    return tomli_w.dumps({"value": value}).removeprefix("value = ").removesuffix("\n")


def to_toml(config: RecipeConfig, header: str = "") -> str:
    """The config as TOML text that `load_toml` reads back to an equal config."""
    lines = [f"# {line}" if line else "#" for line in header.splitlines()]
    for section_name, values in config.to_dict().items():
        if lines:
            lines.append("")
        lines.append(f"[{section_name}]")
        for name, value in values.items():
            if value is None:
                lines.append(f"# {name} is unset (None)")
            else:
                lines.append(f"{name} = {_toml_value(value)}")
    return "\n".join(lines) + "\n"
