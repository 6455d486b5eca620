"""Generates pages at `mkdocs build` time (mkdocs-gen-files), so each has one source.

- `recipes/<name>.md`: the recipe's own `recipes/<name>/README.md`, followed by a table
  of every config key (type, default, allowed values, help text) read from the recipe's
  `Config` dataclass, the same declarations `rnnkit run NAME --help` prints.
- `notebooks/*.ipynb`: the committed notebooks (with their outputs), which
  mkdocs-jupyter renders without executing them.
"""

from __future__ import annotations

import html
import re
from pathlib import Path

import mkdocs_gen_files

from rnnkit import config as config_lib
from rnnkit import registry

ROOT = Path(__file__).resolve().parents[1]

# Python-Markdown needs a blank line between a paragraph and the list after it;
# GitHub (where the READMEs are also read) does not.
LIST_AFTER_TEXT = re.compile(r"^(?P<text>[^\n#>|`\s-][^\n]*)\n(?P<item>- )", re.M)


def markdown_for_mkdocs(text: str) -> str:
    """The README as Python-Markdown reads it the way GitHub does."""
    return LIST_AFTER_TEXT.sub(r"\g<text>\n\n\g<item>", text)


def cell(value: object) -> str:
    return str(value).replace("|", "\\|").replace("\n", " ")


def config_table(recipe_name: str) -> str:
    """Markdown table of every config key of the installed recipe `recipe_name`."""
    recipe = registry.load(recipe_name)
    rows = [
        "| key | type | default | allowed | help |",
        "| --- | --- | --- | --- | --- |",
    ]
    for info in config_lib.fields_of(recipe.Config):
        if info.choices:
            allowed = ", ".join(f"`{choice}`" for choice in info.choices)
        elif info.bounds:
            allowed = cell(info.bounds.describe())
        else:
            allowed = ""
        default = "none" if info.default is None else f"`{info.default!r}`"
        # Escaped: a help text may hold `<unk>`, which Markdown takes for HTML.
        help_text = html.escape(info.help, quote=False)
        rows.append(
            f"| `{info.key}` | {cell(config_lib.type_name(info.type))} | "
            f"{cell(default)} | {allowed} | {cell(help_text)} |"
        )
    return "\n".join(rows)


def recipe_page(readme: Path) -> str:
    name = readme.parent.name
    return (
        markdown_for_mkdocs(readme.read_text(encoding="utf-8")).rstrip()
        + "\n\n## Configuration keys\n\n"
        + f"Generated from the recipe's `Config` dataclass; `rnnkit run {name} --help`"
        + " prints the same. Set them in a TOML file (`--config`), with"
        + " `--set KEY=VALUE` or with `--KEY VALUE`.\n\n"
        + config_table(name)
        + "\n"
    )


def main() -> None:
    for readme in sorted((ROOT / "recipes").glob("*/README.md")):
        page = f"recipes/{readme.parent.name}.md"
        with mkdocs_gen_files.open(page, "w") as handle:
            handle.write(recipe_page(readme))
        mkdocs_gen_files.set_edit_path(page, readme.relative_to(ROOT).as_posix())
    for notebook in sorted((ROOT / "notebooks").glob("*.ipynb")):
        with mkdocs_gen_files.open(f"notebooks/{notebook.name}", "w") as handle:
            handle.write(notebook.read_text(encoding="utf-8"))


main()
