"""`rnnkit info`: versions, the Keras backend, the devices, the recipes."""

from __future__ import annotations

import click

from rnnkit import registry
from rnnkit.cli._common import load_frameworks


@click.command()
def info() -> None:
    """Show versions, the Keras backend and the visible devices."""
    load_frameworks()
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
