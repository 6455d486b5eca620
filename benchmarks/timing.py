"""What every benchmark script reports beside its figures: the CPU it ran on and the
seconds of each training epoch. Imported by the scripts in this folder (run as
`python benchmarks/NAME.py`, which puts this folder on the import path)."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import time
from pathlib import Path

# Where `epoch_timer` records a run's epoch times (in its run directory).
EPOCH_SECONDS = "epoch_seconds.json"


def cpu_model() -> str:
    """The CPU's model name as `lscpu` gives it (the processor string without lscpu)."""
    try:
        output = subprocess.run(
            ["lscpu"], capture_output=True, text=True, check=True
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        return platform.processor() or "unknown"
    for line in output.splitlines():
        if line.startswith("Model name:"):
            return line.split(":", 1)[1].strip()
    return "unknown"


def cpu_line() -> str:
    """`CPU model (N cores visible)`, for a benchmark's header or footer."""
    return f"{cpu_model()} ({os.cpu_count()} cores visible)"


def epoch_timer(max_minutes: float = 0.0, record: Path | None = None):
    """A Keras callback whose `seconds` lists each training epoch's wall time
    (validation included, as `fit` runs it).

    With `max_minutes` > 0 it ends training after the epoch past which one more
    epoch, at the mean epoch time so far, would end after `max_minutes`: the run is
    then the same as one with train.epochs set to the epochs it trained.

    With `record` (a JSON file, in the run directory) the times are written there
    after every epoch, so that a run resumed from its backup (`runner.run(...,
    resume=True)`) counts the epochs an earlier process trained: the times of the
    epochs before the one training resumes at are read back, later ones (an epoch
    cut off before its backup was written) dropped.
    """
    import keras

    class EpochTimer(keras.callbacks.Callback):
        def on_train_begin(self, logs=None):
            self.seconds = []
            if record is not None and record.is_file():
                self.seconds = [float(s) for s in json.loads(record.read_text())]

        def on_epoch_begin(self, epoch, logs=None):
            del self.seconds[epoch:]
            self.started = time.perf_counter()

        def on_epoch_end(self, epoch, logs=None):
            self.seconds.append(time.perf_counter() - self.started)
            if record is not None:
                temporary = record.with_name(f".{record.name}.tmp")
                temporary.write_text(json.dumps(self.seconds))
                os.replace(temporary, record)
            spent = sum(self.seconds)
            mean = spent / len(self.seconds)
            if max_minutes > 0 and spent + mean > max_minutes * 60:
                print(
                    f"--max-minutes {max_minutes:g}: training stops after "
                    f"{len(self.seconds)} epochs ({spent / 60:.1f} min)"
                )
                self.model.stop_training = True

    return EpochTimer()


def hardware() -> str:
    """The CPU model, cores, GPUs and Keras version and backend, in one line."""
    import keras

    devices = "CPU"
    if keras.backend.backend() == "tensorflow":
        import tensorflow as tf

        gpus = tf.config.list_physical_devices("GPU")
        devices = f"{len(gpus)} GPU" if gpus else "CPU only"
    return (
        f"{cpu_model()}, {os.cpu_count()} cores, {devices}, "
        f"Keras {keras.__version__} ({keras.backend.backend()})"
    )
