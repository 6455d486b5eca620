"""`rnnkit serve RUN_DIR...`: trained runs behind an HTTP API and a page
(`rnnkit.serving`)."""

from __future__ import annotations

import click

from rnnkit.cli._common import load_frameworks, user_errors
from rnnkit.serving.runtimes import RUNTIMES


@click.command()
@click.argument("runs", nargs=-1, required=True)
@click.option(
    "--runtime",
    type=click.Choice(RUNTIMES),
    default="keras",
    show_default=True,
    help="Serve the run's Keras model, or its SavedModel, ONNX or LiteRT export "
    "(exported to RUN_DIR/export/FORMAT first when missing).",
)
@click.option("--host", default="127.0.0.1", show_default=True, help="Address.")
@click.option("--port", default=8000, show_default=True, type=int, help="Port.")
@click.option(
    "--max-body-bytes",
    default=1 << 20,
    show_default=True,
    type=click.IntRange(1),
    help="Largest request body accepted (413 above it).",
)
@click.option(
    "--max-instances",
    default=64,
    show_default=True,
    type=click.IntRange(1),
    help="Most inputs in one request.",
)
@click.option(
    "--max-new-tokens",
    default=512,
    show_default=True,
    type=click.IntRange(1),
    help="Most tokens a language model generates for one request.",
)
@click.option(
    "--batching/--no-batching",
    default=True,
    show_default=True,
    help="Run the /predict requests that wait for a busy model as one call.",
)
def serve(
    runs: tuple[str, ...],
    runtime: str,
    host: str,
    port: int,
    max_body_bytes: int,
    max_instances: int,
    max_new_tokens: int,
    batching: bool,
) -> None:
    """Serve the models of RUNS (RUN_DIR or NAME=RUN_DIR) over HTTP.

    The page at / tries each model; POST /v1/models/NAME:predict takes TensorFlow
    Serving's JSON on the model's inputs, POST /models/NAME/predict what a person
    gives (texts, sentences); GET /health and /metadata. docs/guides/serving.md has
    the JSON of each route.
    """
    load_frameworks()
    from rnnkit import serving
    from rnnkit._optional import optional_import

    with user_errors():
        uvicorn = optional_import("uvicorn")
        optional_import("fastapi")
        models = serving.load_all(list(runs), runtime)
        limits = serving.Limits(
            max_body_bytes=max_body_bytes,
            max_instances=max_instances,
            max_new_tokens=max_new_tokens,
            batching=batching,
        )
        app = serving.create_app(models, limits)
    for model in models:
        click.echo(f"serving {model.name} ({model.recipe.name}, {runtime})")
    click.echo(f"page and API at http://{host}:{port}/", err=True)
    uvicorn.run(app, host=host, port=port, log_level="warning")
