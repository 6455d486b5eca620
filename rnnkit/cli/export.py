"""`rnnkit export RUN_DIR --format F`: the run's model as a SavedModel, LiteRT or
ONNX files, as its recipe declares them (`rnnkit.export`)."""

from __future__ import annotations

from pathlib import Path

import click

from rnnkit.cli._common import load_frameworks, user_errors
from rnnkit.export.plan import FORMATS, QUANTIZE


@click.command()
@click.argument("run_dir", type=click.Path(path_type=Path))
@click.option(
    "--format",
    "format_",
    required=True,
    type=click.Choice(FORMATS),
    help="saved_model (TensorFlow), tflite (LiteRT, builtin ops only) or onnx.",
)
@click.option(
    "--output",
    type=click.Path(path_type=Path),
    help="The folder to write (default: RUN_DIR/export/FORMAT).",
)
@click.option(
    "--quantize",
    type=click.Choice(QUANTIZE),
    default="none",
    show_default=True,
    help="LiteRT only: int8 weights (dynamic) or float16 weights.",
)
@click.option("--force", is_flag=True, help="Replace an existing output folder.")
def export(
    run_dir: Path, format_: str, output: Path | None, quantize: str, force: bool
) -> None:
    """Export the model of RUN_DIR: SavedModel, LiteRT or ONNX.

    What the exported model takes and returns depends on the recipe (raw strings or
    token ids, one step of a language model, an encoder and a one-step decoder, ...);
    export.json in the output folder lists every file, input and output, and
    docs/guides/export.md shows a client for each recipe.
    """
    load_frameworks()
    from rnnkit.export import ExportError
    from rnnkit.export import export as export_run

    with user_errors():
        try:
            result = export_run(
                run_dir, format=format_, output=output, quantize=quantize, force=force
            )
        except ExportError as error:
            raise click.ClickException(str(error)) from None
    click.echo(f"{result.format} export written to {result.output}")
    for name in result.files:
        click.echo(f"  {name}")
