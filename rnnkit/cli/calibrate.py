"""`rnnkit calibrate`: time the recurrent layers' loops XLA-compiled and plain on this
machine and cache the choice (`rnnkit.layers.calibration`)."""

from __future__ import annotations

from typing import Any

import click

from rnnkit import registry
from rnnkit.cli._common import load_frameworks, user_errors
from rnnkit.errors import RnnkitError


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


@click.command()
@click.option(
    "--cell",
    "families",
    multiple=True,
    type=click.Choice(registry.recurrent_names()),
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
    jit_compile=None follows it in every run and search on this machine (they load
    it); without it, defaults measured on one CPU decide.
    """
    load_frameworks()
    from rnnkit.layers import calibration, get_recurrent

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
            [get_recurrent(name).__name__ for name in families] or calibration.FAMILIES,
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
