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


# The CPU flags a speed figure depends on (lscpu / /proc/cpuinfo names): the
# AVX-512 float32 and bfloat16 instructions and Intel's AMX tiles, which oneDNN and
# PyTorch use for bfloat16 matmuls.
FLAGS = (("avx512f", "AVX-512"), ("avx512_bf16", "AVX512_BF16"), ("amx_bf16", "AMX"))


def cpu_flags(flags: set[str] | None = None) -> str:
    """Which of `FLAGS` the CPU has: "AVX-512, AVX512_BF16, no AMX" (from
    /proc/cpuinfo's flags, or `flags`); "flags unknown" where they cannot be read."""
    if flags is None:
        try:
            text = Path("/proc/cpuinfo").read_text()
        except OSError:
            return "flags unknown"
        lines = [line for line in text.splitlines() if line.startswith("flags")]
        if not lines:
            return "flags unknown"
        flags = set(lines[0].split(":", 1)[1].split())
    return ", ".join(name if flag in flags else f"no {name}" for flag, name in FLAGS)


def cpu_line() -> str:
    """`CPU model (N cores visible; its FLAGS)`, for a benchmark's header or footer."""
    return f"{cpu_model()} ({os.cpu_count()} cores visible; {cpu_flags()})"


def torch_as_tensorflow() -> None:
    """Make PyTorch treat subnormal floats as TensorFlow does on a CPU: flushed to zero.

    TensorFlow sets the CPU's flush-to-zero and denormals-are-zero modes in its
    threads; PyTorch does not by default. A gradient that vanishes over hundreds of
    steps reaches subnormal values, whose arithmetic runs many times slower on x86:
    `torch.nn.LSTM`'s training at 500 steps measured 23 sequences/s without this and
    187 with it on the same CPU. A benchmark compares against PyTorch configured as
    a user who cares about its speed would, not against that pitfall."""
    import torch

    torch.set_flush_denormal(True)


def read_epoch_record(record: Path) -> tuple[list[float], list[str]]:
    """The seconds and the CPU model of each epoch `epoch_timer` recorded in `record`
    (epochs recorded before the CPU was, as a bare list of seconds, read as
    "unknown")."""
    data = json.loads(record.read_text())
    if isinstance(data, list):
        return [float(s) for s in data], ["unknown"] * len(data)
    return [float(s) for s in data["seconds"]], [str(c) for c in data["cpus"]]


def epoch_timer(max_minutes: float = 0.0, record: Path | None = None):
    """A Keras callback whose `seconds` lists each training epoch's wall time
    (validation included, as `fit` runs it), and `cpus` the CPU model each epoch
    ran on.

    With `max_minutes` > 0 it ends training after the epoch past which one more
    epoch, at the mean epoch time so far, would end after `max_minutes`: the run is
    then the same as one with train.epochs set to the epochs it trained.

    With `record` (a JSON file, in the run directory) the times and CPUs are written
    there after every epoch, so that a run resumed from its backup (`runner.run(...,
    resume=True)`) counts the epochs an earlier process trained, on whichever
    machine: those before the epoch training resumes at are read back, later ones (an
    epoch cut off before its backup was written) dropped.
    """
    import keras

    cpu = cpu_model()

    class EpochTimer(keras.callbacks.Callback):
        def on_train_begin(self, logs=None):
            self.seconds, self.cpus = [], []
            if record is not None and record.is_file():
                self.seconds, self.cpus = read_epoch_record(record)

        def on_epoch_begin(self, epoch, logs=None):
            del self.seconds[epoch:]
            del self.cpus[epoch:]
            self.started = time.perf_counter()

        def on_epoch_end(self, epoch, logs=None):
            self.seconds.append(time.perf_counter() - self.started)
            self.cpus.append(cpu)
            if record is not None:
                temporary = record.with_name(f".{record.name}.tmp")
                temporary.write_text(
                    json.dumps({"seconds": self.seconds, "cpus": self.cpus})
                )
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


def run_phase(script: str, phase: str, options: list[str], cwd: Path) -> dict:
    """Runs `script --child PHASE OPTIONS...` in a fresh interpreter (a memory
    benchmark's phase, whose peak RSS is its own) and returns the JSON object of its
    last output line; stops the benchmark with the phase's error output if it fails."""
    import sys

    completed = subprocess.run(
        [sys.executable, str(Path(script).resolve()), "--child", phase, *options],
        capture_output=True, text=True, cwd=cwd, check=False,
    )  # fmt: skip
    if completed.returncode != 0:
        raise SystemExit(f"{phase} failed:\n{completed.stderr[-3000:]}")
    return json.loads(completed.stdout.strip().splitlines()[-1])


def interleaved_seconds(calls: dict, rounds: int, repeat: int = 1) -> dict:
    """Median seconds per call of each of `calls` (name -> function of no
    argument), timed in interleaved rounds (every call once per round, `repeat`
    times in a row, so that load on the machine hits all alike)."""
    import statistics
    import time

    seconds = {name: [] for name in calls}
    for _ in range(rounds):
        for name, call in calls.items():
            start = time.perf_counter()
            for _ in range(repeat):
                call()
            seconds[name].append((time.perf_counter() - start) / repeat)
    return {name: statistics.median(values) for name, values in seconds.items()}
