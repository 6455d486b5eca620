"""The docs site builds offline with `mkdocs build --strict`, and its examples run.

Every ```python, ```bash and ```toml block of the hand-written pages under docs/ runs
here as tests/test_readme.py runs the README's (helpers: tests/markdown_examples.py).
Two kinds of block are run elsewhere: the opening set-up commands of docs/index.md
are README's own (checked equal here, run by CI), and the plugin-install commands of
the own-recipe guide run in tests/test_example_recipe.py. The recipe pages are
generated from recipes/*/README.md at build time (docs/gen_pages.py); their commands
are checked without training at the end of this file.
"""

from __future__ import annotations

import html
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests import preloaded, smoke_runs

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

from tests.markdown_examples import (
    ROOT,
    block_id,
    blocks,
    make_workdir,
    run_python,
    run_shell_block,
    shell_commands,
)

DOCS = ROOT / "docs"
PAGES = sorted(DOCS.rglob("*.md"))
OWN_RECIPE_PAGE = DOCS / "guides" / "own-recipe.md"
IMAGES = (
    "stock_forecast.png",
    "attention_heatmap.png",
    "lstm_gates.png",
    "vanishing_gradients.png",
    "captioning_attention.png",
)


def page_blocks(language: str) -> list[tuple[Path, str]]:
    return [
        (page, block)
        for page in PAGES
        for block in blocks(page.read_text(encoding="utf-8"), language)
    ]


def example_id(example) -> str:
    page, block = example
    return f"{page.relative_to(DOCS)}: {block_id(block)}"


def shell_examples() -> list[tuple[Path, str]]:
    examples = page_blocks("bash")
    setup = (
        DOCS / "index.md",
        blocks((DOCS / "index.md").read_text("utf-8"), "bash")[0],
    )
    return [
        (page, block)
        for page, block in examples
        if (page, block) != setup and page != OWN_RECIPE_PAGE
    ]


# -- The site --------------------------------------------------------------------------


def mkdocs_env() -> dict[str, str]:
    # In a virtual environment nbconvert looks for its templates under the venv's
    # prefix only; the base interpreter's share/jupyter holds them.
    jupyter_path = os.pathsep.join(
        p
        for p in (os.environ.get("JUPYTER_PATH"), f"{sys.base_prefix}/share/jupyter")
        if p
    )
    return {
        **os.environ,
        "JUPYTER_PATH": jupyter_path,
        # Banners of the MkDocs 2 debate, printed on every build.
        "NO_MKDOCS_2_WARNING": "1",
        "DISABLE_MKDOCS_2_WARNING": "true",
    }


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    site_dir = tmp_path_factory.mktemp("site")
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "mkdocs",
            "build",
            "--strict",
            "--site-dir",
            str(site_dir),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env=mkdocs_env(),
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-5000:]
    return site_dir


def read(site: Path, page: str) -> str:
    return (site / page / "index.html").read_text(encoding="utf-8")


def test_recipe_pages_are_the_recipe_readmes_with_their_config_keys(site):
    from rnnkit import config, registry

    for readme in sorted((ROOT / "recipes").glob("*/README.md")):
        name = readme.parent.name
        page = read(site, f"recipes/{name}")
        title = readme.read_text(encoding="utf-8").splitlines()[0].lstrip("# ")
        assert html.escape(title, quote=False) in page, name
        for info in config.fields_of(registry.load(name).Config):
            assert f"<code>{info.key}</code>" in page, (name, info.key)
            assert html.escape(info.help, quote=False) in page, (name, info.key)


def test_config_reference_shows_every_field_help(site):
    import dataclasses

    from rnnkit.config import TrainConfig

    page = read(site, "reference/config")
    for declared in dataclasses.fields(TrainConfig):
        assert f'id="rnnkit.config.TrainConfig.{declared.name}"' in page
        help_text = html.escape(declared.metadata["help"], quote=False)
        assert help_text in page, declared.name


def test_api_reference_documents_the_public_layers(site):
    import rnnkit.layers

    page = read(site, "reference/layers")
    for name in dir(rnnkit.layers):
        if isinstance(getattr(rnnkit.layers, name), type):
            assert f'id="rnnkit.layers.{name}"' in page, name


def test_notebooks_are_rendered_with_their_outputs(site):
    for notebook in sorted((ROOT / "notebooks").glob("*.ipynb")):
        page = read(site, f"notebooks/{notebook.stem}")
        assert "jp-Notebook" in page, notebook.name
        if '"image/png"' in notebook.read_text(encoding="utf-8"):
            assert "data:image/png;base64," in page, notebook.name


def test_site_needs_nothing_from_the_network(site):
    """No web fonts, analytics, or scripts and styles from elsewhere."""
    remote = re.compile(
        r"<(?:script|link|img)\b[^>]*\b(?:src|href)=\"(?:https?:)?//[^\"]+\"", re.I
    )
    for page in site.rglob("*.html"):
        text = page.read_text(encoding="utf-8")
        found = remote.findall(text)
        assert not found, (page.relative_to(site), found[:3])
        assert "fonts.googleapis" not in text, page.relative_to(site)


# -- The examples on the pages --------------------------------------------------------


def python_pages() -> list:
    """Each page with its ```python blocks, in order: one test per page."""
    pages: dict[Path, list[str]] = {}
    for page, block in page_blocks("python"):
        pages.setdefault(page, []).append(block)
    return [
        pytest.param(sources, id=str(page.relative_to(DOCS)))
        for page, sources in pages.items()
    ]


@pytest.mark.parametrize("sources", python_pages())
def test_docs_python_examples_run(sources, tmp_path):
    """A page's examples run in one fresh interpreter (one start-up of the framework
    per page), each block in its own namespace."""
    run_python(sources, tmp_path)


def shell_pages() -> list:
    """Each page with its shell blocks, in order: one test per page."""
    pages: dict[Path, list[str]] = {}
    for page, block in shell_examples():
        pages.setdefault(page, []).append(block)
    return [
        pytest.param(page, page_blocks_, id=str(page.relative_to(DOCS)))
        for page, page_blocks_ in pages.items()
    ]


@pytest.mark.parametrize(("page", "shell_blocks"), shell_pages())
def test_docs_shell_commands_run(
    page, shell_blocks, tmp_path, monkeypatch, tmp_path_factory
):
    """A page's commands build on each other (launcher.md writes msft.csv in one
    block and reads it in a later one), so they run in one test, in order, in one
    scratch folder: split into a test per block, xdist ran two blocks of one page on
    two workers (in two folders) although they were grouped to run on one."""
    workdir = make_workdir(tmp_path)
    for block in shell_blocks:
        run_shell_block(block, workdir, monkeypatch, tmp_path_factory)


def test_every_recipe_smoke_command_is_shared_by_the_pages():
    """The recipes page gives each recipe's smoke command word for word as
    tests/smoke_runs.py runs it once for all the pages and recipe tests that need it;
    a command with anything more is a command of its own, run where it stands."""
    page = (DOCS / "recipes" / "index.md").read_text("utf-8")
    commands = [c for block in blocks(page, "bash") for c in shell_commands(block)]
    shared = [smoke_runs.recipe_of(command) for command in commands]
    recipes = (ROOT / "recipes").glob("*/configs/smoke.toml")
    assert sorted(name for name in shared if name) == sorted(
        path.parents[1].name for path in recipes
    )
    stock = smoke_runs.COMMAND.format(name="stock")
    assert smoke_runs.recipe_of(stock.replace(" ", "  ")) == "stock"
    assert smoke_runs.recipe_of(f"{stock} --set train.epochs=1") is None
    assert smoke_runs.recipe_of(stock.replace("runs/stock/smoke", "runs/x")) is None


def test_docs_home_opens_with_the_readme_commands():
    home = blocks((DOCS / "index.md").read_text("utf-8"), "bash")[0]
    readme = blocks((ROOT / "README.md").read_text("utf-8"), "bash")[0]
    assert home == readme


@pytest.mark.parametrize("example", page_blocks("toml"), ids=example_id)
def test_docs_toml_example_is_a_valid_config(example, tmp_path):
    """A config file shown in the docs loads with the recipe its comment names."""
    from rnnkit import config, registry

    page, text = example
    document = tomllib.loads(text)
    command = re.search(r"rnnkit run (\w+) --config (\S+)", text)
    if "project" in document:  # the example plugin's pyproject.toml
        entry_points = document["project"]["entry-points"]["rnnkit.recipes"]
        assert entry_points, page
        return
    assert command, f"{page}: say which recipe the file configures"
    path = tmp_path / command.group(2)
    path.write_text(text, encoding="utf-8")
    loaded = config.load_toml(registry.load(command.group(1)).Config, path)
    for section, values in document.items():
        for key, value in values.items():
            assert loaded.get(f"{section}.{key}") == value


# -- Pictures -------------------------------------------------------------------------


def test_committed_pictures_are_small_and_linked():
    linked = "".join(page.read_text("utf-8") for page in PAGES)
    linked += (ROOT / "README.md").read_text("utf-8")
    for name in IMAGES:
        path = DOCS / "images" / name
        assert path.is_file(), name
        # Photographs (the captioning overlays) take more bytes than charts.
        largest = 400_000 if name == "captioning_attention.png" else 200_000
        assert 10_000 < path.stat().st_size < largest, (name, path.stat().st_size)
        assert f"images/{name}" in linked, f"{name} is on no page"


def test_make_images_draws_every_picture(tmp_path_factory, tmp_path):
    """docs/make_images.py at its smallest size: real data, tiny runs. The captioning
    and translation pictures are drawn from the session's smoke runs
    (--captioning-run, --translation-run: the smoke configs the script trains with
    --small, tests/smoke_runs.py), the image features cached in the test's folder."""
    import numpy as np
    from PIL import Image

    captioning = smoke_runs.smoke_run(tmp_path_factory, "captioning")
    assert captioning.exit_code == 0, captioning.output[-3000:]
    translation = smoke_runs.smoke_run(tmp_path_factory, "translation")
    assert translation.exit_code == 0, translation.output[-3000:]
    output = tmp_path / "images"
    result = preloaded.run(
        [
            "docs/make_images.py", "--small", "--output", str(output),
            "--captioning-run", str(captioning.run_dir),
            "--translation-run", str(translation.run_dir),
        ],
        cwd=ROOT,
        env={
            **os.environ,
            "MPLBACKEND": "Agg",
            "RNNKIT_DATA_DIR": str(tmp_path / "rnnkit-data"),
        },
        timeout=600,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    for name in IMAGES:
        with Image.open(output / name) as image:
            pixels = np.asarray(image.convert("L"), dtype="float64")
        assert image.format == "PNG", name
        assert min(pixels.shape) >= 150, (name, pixels.shape)
        # Not blank: a drawn figure has many distinct grey levels.
        assert len(np.unique(pixels)) > 20, name


# -- The commands of the recipe pages -------------------------------------------------
# The recipe pages (recipes/*/README.md) list full-size commands: hour-long trainings,
# downloads, benchmarks. Their smoke-config runs, predictions and evaluations run in
# the recipe tests; here every command line is checked as far as it can be without
# training: `rnnkit run/tune` with --dry-run (recipe, config file, every --set key and
# value, every option), `predict/evaluate/diagnose/ensemble` parsed by the launcher
# with the recipe's own predict options and config keys, and `python benchmarks/...`
# against the script's --help.

RECIPE_READMES = sorted((ROOT / "recipes").glob("*/README.md"))


def recipe_commands() -> list[tuple[str, str]]:
    from tests.markdown_examples import shell_commands

    return [
        (readme.parent.name, command.split(" #")[0].strip())
        for readme in RECIPE_READMES
        for block in blocks(readme.read_text(encoding="utf-8"), "bash")
        for command in shell_commands(block)
    ]


def test_recipe_pages_have_commands():
    assert {name for name, _ in recipe_commands()} >= {
        "captioning", "language_model", "sentiment", "translation"
    }  # fmt: skip


@pytest.mark.parametrize(
    "recipe_name, command", recipe_commands(), ids=lambda value: value[:60]
)
def test_recipe_page_command_is_valid(recipe_name, command, tmp_path, monkeypatch):
    import shlex

    from click.testing import CliRunner

    from rnnkit import cli, registry
    from rnnkit import config as config_lib
    from rnnkit.cli.predict import split_predict_options

    monkeypatch.chdir(ROOT)  # the pages' paths are relative to the repository root
    words = shlex.split(command)
    if words[0] == "python":
        script, *options = words[1:]
        assert (ROOT / script).is_file(), script
        result = subprocess.run(
            [sys.executable, script, "--help"],
            cwd=ROOT, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert result.returncode == 0, result.stderr[-2000:]
        for option in options:
            if option.startswith("--"):
                assert option.split("=")[0] in result.stdout, (script, option)
        return
    assert words[0] == "rnnkit", command
    action, *args = words[1:]
    if action in ("run", "tune"):
        if "--run-dir" in args:  # a fresh folder, as the page's first run has
            args[args.index("--run-dir") + 1] = str(tmp_path / "run")
        result = CliRunner().invoke(cli.main, [action, *args, "--dry-run"])
        assert result.exit_code == 0, result.output[-2000:]
        assert "Dry run: the config is valid" in result.output
        return
    # predict, evaluate, diagnose: RUN_DIR and inputs are the reader's; parse the
    # options with the launcher, and the recipe's predict options and config keys.
    recipe = registry.load(recipe_name)
    placeholder = str(tmp_path)
    command_obj = cli.main.get_command(None, action)
    assert command_obj is not None, action
    if action == "ensemble":  # every RUN_DIR before the first option
        first_option = next(
            (i for i, a in enumerate(args) if a.startswith("-")), len(args)
        )
        args[:first_option] = [placeholder] * first_option
    elif action in ("predict", "evaluate") or (args and not args[0].startswith("-")):
        args[0] = placeholder
    context = command_obj.make_context(action, list(args))
    if action == "predict":
        texts, overrides = split_predict_options(recipe, list(args[1:]))
        assert texts, command
        recipe.Config().with_values(overrides)
    if action == "evaluate":
        config_lib.parse_assignments(
            recipe.Config, list(context.params.get("assignments") or ())
        )
