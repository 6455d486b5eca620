"""rnnkit.config: defaults <- TOML <- command line, checked types, helpful errors."""

from __future__ import annotations

import dataclasses

import pytest

from rnnkit import config as config_lib
from rnnkit.config import (
    DataConfig,
    ModelConfig,
    RecipeConfig,
    TrainConfig,
    field,
    section,
)
from rnnkit.errors import ConfigError


@dataclasses.dataclass
class ToyData(DataConfig):
    window: int = field(30, help="Past steps.")
    sizes: tuple[int, ...] = field((1, 2), help="A list.")
    label: str | None = field(None, help="Optional text.")


@dataclasses.dataclass
class ToyModel(ModelConfig):
    units: int = field(64, help="Units.")
    cell_type: str = field("lstm", help="Cell.", choices=("lstm", "gru"))
    dropout: float = field(0.1, help="Dropout.")


@dataclasses.dataclass
class ToyConfig(RecipeConfig):
    data: ToyData = section(ToyData)
    model: ToyModel = section(ToyModel)
    train: TrainConfig = section(TrainConfig, epochs=3)


def test_defaults_and_section_overrides():
    config = ToyConfig()
    assert config.train.epochs == 3
    assert config.train.batch_size == TrainConfig().batch_size
    assert config.get("model.units") == 64
    assert "evaluation.folds" in config.flat()


def test_toml_round_trip(tmp_path):
    config = ToyConfig().with_values(
        {"data.label": 'a "quoted" name', "data.sizes": (3,), "model.dropout": 0.25}
    )
    path = tmp_path / "c.toml"
    path.write_text(config_lib.to_toml(config, "header line"))
    assert config_lib.load_toml(ToyConfig, path) == config
    # None cannot be written in TOML: the optional field is left out and reads back.
    assert config_lib.load_toml(ToyConfig, path).data.path is None


def test_toml_round_trip_of_any_string(tmp_path):
    """Control characters (CR, U+0001, DEL), quotes, backslashes and non-ASCII text
    are escaped: the written file reads back, so its run can resume or evaluate."""
    config = RecipeConfig().with_values({"data.path": 'a\rb\x01c\x7fd"e\\f\u00e9'})
    path = tmp_path / "c.toml"
    path.write_text(config_lib.to_toml(config, "header line"), "utf-8")
    assert config_lib.load_toml(RecipeConfig, path) == config


def test_toml_text_has_a_header_then_one_line_per_key():
    text = config_lib.to_toml(ToyConfig(), "header line\n\nsecond line")
    assert text.startswith(
        "# header line\n#\n# second line\n\n"
        "[data]\n# path is unset (None)\nwindow = 30\nsizes = [1, 2]\n"
        "# label is unset (None)\n\n"
        '[model]\nunits = 64\ncell_type = "lstm"\ndropout = 0.1\n\n[train]\n'
    )
    assert text.endswith("devices = []\n\n[evaluation]\nfolds = 0\n")


def test_precedence_default_file_command_line(tmp_path):
    path = tmp_path / "c.toml"
    path.write_text("[model]\nunits = 8\ncell_type = 'gru'\n[train]\nepochs = 5\n")
    overrides = config_lib.parse_assignments(ToyConfig, ["model.units=16"])
    config = config_lib.resolve(ToyConfig, path, overrides)
    assert (config.model.units, config.model.cell_type) == (16, "gru")
    assert config.train.epochs == 5
    assert config.model.dropout == 0.1


def test_assignments_are_typed():
    values = config_lib.parse_assignments(
        ToyConfig,
        [
            "data.sizes=4, 5",
            "data.label=none",
            "train.shuffle=false",
            "model.dropout=1e-1",
            "data.path=prices.csv",
        ],
    )
    assert values == {
        "data.sizes": (4, 5),
        "data.label": None,
        "train.shuffle": False,
        "model.dropout": 0.1,
        "data.path": "prices.csv",
    }


@dataclasses.dataclass
class ListData(DataConfig):
    names: tuple[str, ...] = field((), help="Names.")


@dataclasses.dataclass
class ListConfig(RecipeConfig):
    data: ListData = section(ListData)


def test_a_list_on_the_command_line_may_be_a_toml_array():
    """As in a config file: the way to give items that hold commas."""

    def parsed(config_cls, assignment):
        return config_lib.parse_assignments(config_cls, [assignment])

    assert parsed(ListConfig, 'data.names=["a=1,2", "b"]') == {
        "data.names": ("a=1,2", "b")
    }
    assert parsed(ListConfig, "data.names=a=1,2") == {"data.names": ("a=1", "2")}
    assert parsed(ListConfig, "data.names= []") == {"data.names": ()}
    assert parsed(ToyConfig, "data.sizes=[4, 5]") == {"data.sizes": (4, 5)}
    for config_cls, assignment, message in (
        (ListConfig, 'data.names=["a"', "data.names: '[\"a\"' is not a TOML array"),
        (ListConfig, "data.names=[a, b]", 'e.g. ["a", "b"] (strings quoted)'),
        (ListConfig, 'data.names=["a", 1]', "expected str, got 1"),
        (ToyConfig, "data.sizes=[4.5]", "expected int, got 4.5"),
    ):
        with pytest.raises(ConfigError) as error:
            parsed(config_cls, assignment)
        assert message in str(error.value)
        assert "\n" not in str(error.value)


@pytest.mark.parametrize(
    "assignment, message",
    [
        (
            "model.unit=3",
            "unknown config key 'model.unit' (--set); did you mean 'model.units'?",
        ),
        ("units=3", "did you mean 'model.units'?"),
        ("model.units=many", "model.units: expected int, got 'many'"),
        ("train.shuffle=maybe", "train.shuffle: expected bool"),
        ("model.units", "--set expects key=value"),
    ],
)
def test_bad_assignments_name_the_problem(assignment, message):
    with pytest.raises(ConfigError, match=None) as error:
        config_lib.parse_assignments(ToyConfig, [assignment])
    assert message in str(error.value)


def test_choices_are_enforced():
    with pytest.raises(ConfigError, match="'rnn' is not one of lstm, gru"):
        ToyConfig().with_values({"model.cell_type": "rnn"})


@pytest.mark.parametrize(
    "text, message",
    [
        ("[model]\nunitz = 3\n", "unknown config key 'model.unitz'"),
        ("[modle]\nunits = 3\n", "did you mean 'model.units'?"),
        ("[model]\nunits = '3'\n", "model.units"),
        ("units = 3\n", "must be a table"),
        ("[model\n", "is not valid TOML"),
    ],
)
def test_bad_toml_files(tmp_path, text, message):
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(ConfigError) as error:
        config_lib.load_toml(ToyConfig, path)
    assert message in str(error.value)
    assert "\n" not in str(error.value)


def test_missing_config_file(tmp_path):
    with pytest.raises(ConfigError, match="config file not found"):
        config_lib.load_toml(ToyConfig, tmp_path / "nope.toml")


def test_a_file_extends_another_and_overrides_its_keys(tmp_path):
    """`extend` reads the named file (relative to the extending one's folder, which
    may extend a third) first, then the file's own keys over it."""
    (tmp_path / "base").mkdir()
    (tmp_path / "base" / "root.toml").write_text(
        "[model]\nunits = 8\ncell_type = 'gru'\n[train]\nepochs = 7\n"
    )
    (tmp_path / "base" / "middle.toml").write_text(
        "extend = 'root.toml'\n[model]\nunits = 16\n[data]\nwindow = 5\n"
    )
    (tmp_path / "leaf.toml").write_text(
        "extend = 'base/middle.toml'\n[model]\ndropout = 0.25\n[data]\nwindow = 9\n"
    )
    config = config_lib.load_toml(ToyConfig, tmp_path / "leaf.toml")
    assert (config.model.units, config.model.cell_type, config.train.epochs) == (
        16,
        "gru",
        7,
    )
    assert (config.data.window, config.model.dropout) == (9, 0.25)
    assert config_lib.toml_keys(tmp_path / "leaf.toml") == {
        "model.units", "model.cell_type", "train.epochs", "data.window",
        "model.dropout",
    }  # fmt: skip
    resolved = config_lib.resolve(
        ToyConfig, tmp_path / "leaf.toml", {"model.units": 32}
    )
    assert (resolved.model.units, resolved.data.window) == (32, 9)
    # What a run writes is the whole config, which reads back without the chain.
    written = tmp_path / "written.toml"
    written.write_text(config_lib.to_toml(config))
    assert "extend" not in written.read_text()
    assert config_lib.load_toml(ToyConfig, written) == config


@pytest.mark.parametrize(
    "files, message",
    [
        ({"a.toml": "extend = 'none.toml'\n"}, "extend = 'none.toml' names no file"),
        ({"a.toml": "extend = 3\n"}, "extend takes the path of another config"),
        ({"a.toml": "extend = 'a.toml'\n"}, "leads back to a file that extends"),
        (
            {"a.toml": "extend = 'b.toml'\n", "b.toml": "extend = 'a.toml'\n"},
            "leads back to a file that extends",
        ),
        (
            {"a.toml": "extend = 'b.toml'\n", "b.toml": "[model]\nunits = 'x'\n"},
            "b.toml",
        ),
    ],
)
def test_bad_extends_are_one_line_errors(tmp_path, files, message):
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    with pytest.raises(ConfigError) as error:
        config_lib.load_toml(ToyConfig, tmp_path / "a.toml")
    assert message in str(error.value)
    assert "\n" not in str(error.value)


def test_fields_carry_help_and_types():
    infos = {info.key: info for info in config_lib.fields_of(ToyConfig)}
    assert infos["model.units"].help == "Units."
    assert infos["model.cell_type"].choices == ("lstm", "gru")
    assert config_lib.type_name(infos["data.label"].type) == "str or none"
    assert config_lib.type_name(infos["data.sizes"].type) == "list of int"
    assert all(info.help for info in infos.values())


def test_field_rejects_default_outside_choices():
    with pytest.raises(ValueError, match="not one of choices"):
        field("rnn", help="x", choices=("lstm",))


def test_section_rejects_unknown_defaults():
    with pytest.raises(ValueError, match="no field"):
        section(TrainConfig, epoch=3)


@dataclasses.dataclass
class RangedModel(ModelConfig):
    units: int = field(64, help="Units.", at_least=1)
    dropout: float = field(0.1, help="Dropout.", at_least=0.0, below=1.0)
    scale: float = field(1.0, help="Scale.", above=0.0)
    sizes: tuple[int, ...] = field((1, 2), help="Sizes.", at_least=1, at_most=8)
    width: int | None = field(None, help="Optional width.", at_least=1)


@dataclasses.dataclass
class RangedConfig(RecipeConfig):
    model: RangedModel = section(RangedModel)


@pytest.mark.parametrize(
    ("key", "value", "allowed"),
    [
        ("model.units", 0, ">= 1"),
        ("model.dropout", -0.1, "[0, 1)"),
        ("model.dropout", 1.0, "[0, 1)"),
        ("model.scale", 0.0, "> 0"),
        ("model.sizes", (1, 9), "[1, 8]"),
        ("model.width", 0, ">= 1"),
        ("train.epochs", -3, ">= 1"),
        ("train.learning_rate", 0.0, "> 0"),
    ],
)
def test_ranges_are_enforced_everywhere(tmp_path, key, value, allowed):
    message = f"{key} (value): {value if not isinstance(value, tuple) else value[1]!r}"
    with pytest.raises(ConfigError) as error:
        RangedConfig().with_values({key: value})
    assert str(error.value).startswith(message)
    assert str(error.value).endswith(f"is out of range; allowed: {allowed}")
    # The same check from the command line and from a TOML file.
    text = ",".join(map(str, value)) if isinstance(value, tuple) else str(value)
    with pytest.raises(ConfigError, match="out of range"):
        config_lib.resolve(
            RangedConfig,
            overrides=config_lib.parse_assignments(RangedConfig, [f"{key}={text}"]),
        )
    section_name, name = key.split(".")
    toml_value = list(value) if isinstance(value, tuple) else value
    path = tmp_path / "bad.toml"
    path.write_text(f"[{section_name}]\n{name} = {toml_value!r}\n")
    with pytest.raises(ConfigError, match=f"{key} \\({path}\\).*out of range"):
        config_lib.load_toml(RangedConfig, path)


def test_values_inside_ranges_pass():
    config = RangedConfig().with_values(
        {
            "model.units": 1,
            "model.dropout": 0.0,
            "model.sizes": (8,),
            "model.width": None,
        }
    )
    assert (config.model.units, config.model.dropout) == (1, 0.0)
    assert config.model.width is None


def test_bounds_describe_and_declaration_errors():
    assert config_lib.Bounds(at_least=0.0, below=1.0).describe() == "[0, 1)"
    assert config_lib.Bounds(above=0.0, below=1.0).describe() == "(0, 1)"
    assert config_lib.Bounds(at_most=10).describe() == "<= 10"
    assert config_lib.Bounds(above=0.5).describe() == "> 0.5"
    with pytest.raises(ValueError, match="outside >= 1"):
        field(0, help="x", at_least=1)
    with pytest.raises(ValueError, match="one lower limit"):
        field(1, help="x", at_least=1, above=0)
