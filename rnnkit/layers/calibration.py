"""Where XLA speeds up the recurrent loops on this machine: measured once, cached.

With `jit_compile=None` (the default), `LSTM`, `GRU` and `SimpleRNN` compile their
time loop with XLA on TensorFlow where that is faster than TensorFlow's plain loop.
Which is faster depends on the CPU and the shape: XLA fuses a step's element-wise
work, while TensorFlow runs independent matmuls of a step side by side on the cores.

`calibrate()` (or `rnnkit calibrate`) times both loops here, side by side in one
process, for each layer, mode (training, inference) and shape asked for, and writes
the result to a cache file keyed by this machine (the CPU model and its family,
vector extensions, visible cores, and the TensorFlow version).

The layers never read that file. A process that wants them to follow it loads it,
once, at a point of its own choosing: `load()` (or `with loaded():` for a block);
`rnnkit run` does so at the start of a run. From then on `jit_compile=None` follows
the loaded measurement of the same cell class and mode at the measured shape nearest
to the call's (by the ratio of units, then steps, then batch) among those measured at
a batch within 4 times the call's (XLA's gain turns with the batch: a measurement at
64 rows says nothing of one); without one, each cell's `xla_pays` decides. Only the
speed depends on it, never a layer's numbers, and `execution_path` says
"XLA-compiled" when the loop was.

It measures the steady state: compilation (per layer and input shape) is not
counted, so a short run of a small model may not earn it back
(docs/performance.md, "Calibrated per machine").

The cache lives in `$RNNKIT_CACHE_DIR`, else `$XDG_CACHE_HOME/rnnkit`, else
`~/.cache/rnnkit`, as `xla_loops.json`, written atomically; `load(path)` reads
another file.

One module over 500 lines on purpose: the cache's format, loading it and measuring
for it change together, behind the one public face of `rnnkit calibrate`.

    >>> from rnnkit.layers import calibration
    >>> [found] = calibration.calibrate(
    ...     ["GRU"], [(20, 16)], modes=["inference"], batch=8, rounds=2, save=False
    ... )
    >>> found.family, found.mode, found.compile == (found.ratio >= 1.03)
    ('GRU', 'inference', True)

Over 500 lines: measuring, caching and choosing share one cache format and one key of
the machine and shape; split apart, each would import the others' private helpers.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import math
import os
import platform
import statistics
import time
import warnings
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

from rnnkit.errors import RnnkitError

# The layers measured by default; any registered one can be (`layer_class`).
FAMILIES = ("GRU", "LSTM", "SimpleRNN")
MODES = ("training", "inference")
DEFAULT_SHAPES = ((100, 256), (200, 512))
# Compile where XLA was at least this much faster (median of the rounds): a gain
# within the rounds' noise does not pay for the compilation.
MIN_GAIN = 0.03
# Each model's calls in one round of the timing fill about this long.
ROUND_SECONDS = 0.25
FILE_NAME = "xla_loops.json"
# 2: measured with the batch in one loop per core (`batch_shards`, the layers'
# default since then); format 1's measurements were of one loop, whose choices
# differ (the LSTM's above all), so they are not used.
_FORMAT = 2


class CalibrationError(RnnkitError):
    """Calibration cannot run here, or the cache file cannot be read."""


@dataclasses.dataclass(frozen=True)
class Measurement:
    """One side-by-side timing of a layer's XLA-compiled and plain loops.

    `ratio` is the XLA loop's median sequences/s over the plain loop's, `low` and
    `high` the range of the per-round ratios; `compile` is the choice it caches."""

    cell: str
    mode: str
    steps: int
    units: int
    batch: int
    features: int
    xla_rate: float
    plain_rate: float
    ratio: float
    low: float
    high: float
    rounds: int
    compile: bool

    @property
    def family(self) -> str:
        return self.cell.rsplit(".", 1)[-1].removesuffix("Cell")

    def line(self) -> str:
        """One line for a table: layer, mode, shape, rates, ratio and the choice."""
        choice = "XLA" if self.compile else "plain"
        return (
            f"{self.family:9} {self.mode:9} {self.steps:>5} x {self.units:<5} "
            f"batch {self.batch:<4} | {self.xla_rate:>9.1f} {self.plain_rate:>9.1f} "
            f"seq/s | {self.ratio:.3f}x ({self.low:.2f}-{self.high:.2f}) -> {choice}"
        )


# -- This machine and its cache file --------------------------------------------------


@functools.cache
def machine() -> dict:
    """What the cache is keyed by: the CPU (model name, family and model numbers), its
    widest vector extension, the cores this process may use, TensorFlow's version;
    and, not in the key, its bfloat16 matrix instructions ("AMX", "AVX512_BF16" or
    None)."""
    import tensorflow as tf

    fields = {}
    try:
        text = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        text = ""
    for line in text.splitlines():
        name, colon, value = line.partition(":")
        if colon:
            fields.setdefault(name.strip(), value.strip())
    cpu = fields.get("model name") or platform.processor() or platform.machine()
    if "cpu family" in fields:
        cpu += f" (family {fields['cpu family']} model {fields.get('model', '?')})"
    flags = set(fields.get("flags", "").split())
    isa = next(
        (
            name
            for name, flag in (("AMX", "amx_tile"), ("AVX-512", "avx512f"))
            if flag in flags
        ),
        "AVX2" if "avx2" in flags else (platform.machine() or "unknown"),
    )
    # The CPU's bfloat16 matrix instructions, which TensorFlow's oneDNN matmuls use:
    # AMX's tiles, or AVX512_BF16's dot products (`_kernels.bfloat16_loop`).
    bfloat16 = next(
        (
            name
            for name, flag in (("AMX", "amx_bf16"), ("AVX512_BF16", "avx512_bf16"))
            if flag in flags
        ),
        None,
    )
    cores = (
        len(os.sched_getaffinity(0))
        if hasattr(os, "sched_getaffinity")
        else os.cpu_count()
    )
    return {
        "cpu": cpu or "unknown",
        "isa": isa,
        "bfloat16": bfloat16,
        "cores": cores,
        "tensorflow": tf.__version__,
    }


def machine_key() -> str:
    """This machine as one line, e.g. "AMD EPYC (family 25 model 17), AVX-512,
    2 cores, TensorFlow 2.21.0"."""
    info = machine()
    return (
        f"{info['cpu']}, {info['isa']}, {info['cores']} cores, "
        f"TensorFlow {info['tensorflow']}"
    )


def cache_file() -> Path:
    """The cache file (it need not exist)."""
    folder = os.environ.get("RNNKIT_CACHE_DIR")
    if not folder:
        base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
        folder = Path(base) / "rnnkit"
    return Path(folder) / FILE_NAME


_read_memo: dict = {}


def _read(path: Path) -> dict:
    """The cache file's content ({} when there is none); read again only when the
    file changed. Raises `CalibrationError` for a file that is not a cache."""
    try:
        stat = path.stat()
    except FileNotFoundError:
        return {}
    except OSError as error:
        raise CalibrationError(f"cannot read {path}: {error.strerror}") from None
    stamp = (str(path), stat.st_mtime_ns, stat.st_size)
    if _read_memo.get("stamp") == stamp:
        return _read_memo["content"]
    try:
        content = json.loads(path.read_text(encoding="utf-8"))
        if isinstance(content, dict) and content.get("format") == 1:
            raise ValueError(
                "measured before the layers split each batch into one loop per "
                "core, whose XLA choices differ"
            )
        if not isinstance(content, dict) or content.get("format") != _FORMAT:
            raise ValueError(f"not an rnnkit cache of format {_FORMAT}")
        machines = content.get("machines")
        if not isinstance(machines, dict):
            raise ValueError("no 'machines' mapping")
        for entry in machines.values():
            for item in entry.get("measurements", []):
                _check(Measurement(**item))
    except (OSError, ValueError, TypeError, AttributeError) as error:
        raise CalibrationError(
            f"the XLA calibration cache {path} is unreadable ({error}); delete it, "
            "or run `rnnkit calibrate --forget`, and calibrate again"
        ) from None
    _read_memo.update(stamp=stamp, content=content)
    return content


def _check(item: Measurement) -> None:
    """Raises ValueError for a measurement whose fields have the wrong types."""
    counts = (item.steps, item.units, item.batch, item.features, item.rounds)
    rates = (item.xla_rate, item.plain_rate, item.ratio, item.low, item.high)
    if not (
        isinstance(item.cell, str)
        and item.mode in MODES
        and all(type(v) is int and v > 0 for v in counts)
        and all(isinstance(v, int | float) and not isinstance(v, bool) for v in rates)
        and isinstance(item.compile, bool)
    ):
        raise ValueError(f"a malformed measurement {dataclasses.asdict(item)}")


def measurements(path: Path | None = None) -> list[Measurement]:
    """This machine's measurements in the cache file `path` (by default
    `cache_file()`); empty when it has none."""
    path = cache_file() if path is None else Path(path)
    entry = _read(path).get("machines", {}).get(machine_key(), {})
    return [Measurement(**item) for item in entry.get("measurements", [])]


# The measurements `jit_compile=None` follows in this process; None: none loaded.
_loaded: list[Measurement] | None = None


def load(path: Path | None = None) -> list[Measurement]:
    """Makes this machine's cached measurements (in `path`, by default
    `cache_file()`) the ones the layers' `jit_compile=None` follows in this process,
    until `unload()`, and returns them. The one place the layers' choices come from
    the cache: a layer never reads it itself. An unreadable cache warns and loads
    nothing, so the defaults decide (`rnnkit calibrate --forget` mends it)."""
    global _loaded
    try:
        found = measurements(path)
    except CalibrationError as error:
        warnings.warn(
            f"{error}. Until then the layers use their default XLA choices.",
            RuntimeWarning,
            stacklevel=2,
        )
        found = []
    _loaded = found
    return found


def unload() -> None:
    """Forgets the loaded measurements: the cells' `xla_pays` decide again."""
    global _loaded
    _loaded = None


@contextlib.contextmanager
def loaded(path: Path | None = None):
    """`load(path)` for the block, then back to what was loaded before it."""
    global _loaded
    previous = _loaded
    try:
        yield load(path)
    finally:
        _loaded = previous


def record(found: Iterable[Measurement]) -> Path:
    """Adds `found` to this machine's cached measurements, each replacing any of the
    same cell, mode and shape, and writes the cache atomically."""
    from rnnkit.files import write_json

    path = cache_file()
    content = _read(path) or {"format": _FORMAT, "machines": {}}
    entry = content["machines"].get(machine_key(), {})
    kept = {}
    for item in entry.get("measurements", []):
        kept[_slot(Measurement(**item))] = Measurement(**item)
    for item in found:
        kept[_slot(item)] = item
    content = {
        **content,
        "machines": {
            **content["machines"],
            machine_key(): {
                "machine": machine(),
                "measurements": [dataclasses.asdict(m) for m in kept.values()],
            },
        },
    }
    return write_json(path, content)


def forget() -> bool:
    """Drops this machine's measurements (the whole cache file when it is
    unreadable); whether there was something to drop."""
    from rnnkit.files import write_json

    path = cache_file()
    try:
        content = _read(path)
    except CalibrationError:
        path.unlink()
        return True
    if machine_key() not in content.get("machines", {}):
        return False
    machines = dict(content["machines"])
    del machines[machine_key()]
    write_json(path, {**content, "machines": machines})
    return True


# A measurement decides for calls whose batch is at most this many times larger or
# smaller than the batch it was measured at. What XLA's loop gains turns with the
# batch (the LSTM's inference gains at 8 rows and loses at 64: docs/performance.md,
# "Small batches"), so the default `rnnkit calibrate --batch 64` says nothing of a
# batch of one.
BATCH_REACH = 4


def _slot(item: Measurement) -> tuple:
    return (item.cell, item.mode, item.steps, item.units, item.batch, item.features)


def measured_choice(cell, training: bool, steps: int | None, batch: int | None):
    """The loaded choice (True: compile) for `cell`'s class and mode at the measured
    shape nearest to (units, steps, batch), among the shapes measured at a batch
    within `BATCH_REACH` times the call's; None without such a measurement (then the
    cell's own `xla_pays` decides)."""
    if not _loaded:
        return None
    found = _loaded
    name = _cell_name(type(cell))
    mode = "training" if training else "inference"
    candidates = [
        m
        for m in found
        if m.cell == name
        and m.mode == mode
        and (not batch or abs(math.log(batch / m.batch)) <= math.log(BATCH_REACH))
    ]
    if not candidates:
        return None

    def distance(m):
        far = [abs(math.log(cell.units / m.units))]
        far.append(abs(math.log(steps / m.steps)) if steps else 0.0)
        far.append(abs(math.log(batch / m.batch)) if batch else 0.0)
        return far

    return min(candidates, key=distance).compile


def _cell_name(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


# -- Measuring ------------------------------------------------------------------------


def measure(
    family: str,
    steps: int,
    units: int,
    mode: str,
    *,
    batch: int = 64,
    features: int = 64,
    rounds: int = 9,
    round_seconds: float = ROUND_SECONDS,
    min_gain: float = MIN_GAIN,
) -> Measurement:
    """Times `family(units)` (a registered layer, `layer_class`) with
    `jit_compile=True` and `False`: the same weights, layer -> Dense(1), Adam, MSE,
    `batch` random sequences of `steps` x `features`; a training step
    (`train_on_batch`) or an inference (`predict_on_batch`), both warmed up twice
    (tracing and compiling), then `rounds` interleaved rounds in which each runs as
    many calls (at least three) as fill about `round_seconds` (timer noise swamps
    rounds of a few milliseconds)."""
    import keras
    import numpy as np

    rng = np.random.default_rng(0)
    x = rng.standard_normal((batch, steps, features), dtype=np.float32)
    y = rng.standard_normal((batch, 1), dtype=np.float32)
    models = {}
    for jit in (True, False):
        layer = layer_class(family)(units, jit_compile=jit)
        model = keras.Sequential(
            [keras.Input((steps, features)), layer, keras.layers.Dense(1)]
        )
        model.compile(optimizer="adam", loss="mse")
        models[jit] = model
    models[False].set_weights(models[True].get_weights())
    calls = {
        jit: (lambda m=m: m.train_on_batch(x, y))
        if mode == "training"
        else (lambda m=m: m.predict_on_batch(x))
        for jit, m in models.items()
    }
    seconds = []
    for call in calls.values():
        call()
        start = time.perf_counter()
        call()
        seconds.append(time.perf_counter() - start)
    per_round = max(3, math.ceil(round_seconds / max(min(seconds), 1e-6)))
    rates = {jit: [] for jit in calls}
    for _ in range(rounds):
        for jit, call in calls.items():
            start = time.perf_counter()
            for _ in range(per_round):
                call()
            rates[jit].append(batch * per_round / (time.perf_counter() - start))
    ratios = [a / b for a, b in zip(rates[True], rates[False], strict=True)]
    xla_rate, plain_rate = (statistics.median(rates[jit]) for jit in (True, False))
    # The choice follows the ratio as recorded: a raw 1.02996 is stored as 1.03, and
    # a cache whose ratio reads 1.03 must say "compile".
    ratio = round(xla_rate / plain_rate, 4)
    return Measurement(
        cell=_cell_name(type(models[True].layers[0].cell)),
        mode=mode,
        steps=steps,
        units=units,
        batch=batch,
        features=features,
        xla_rate=round(xla_rate, 2),
        plain_rate=round(plain_rate, 2),
        ratio=ratio,
        low=round(min(ratios), 4),
        high=round(max(ratios), 4),
        rounds=rounds,
        compile=ratio >= 1 + min_gain,
    )


def layer_classes() -> dict[str, type]:
    """Every registered recurrent layer (`rnnkit.layers.get_recurrent`), by its
    class's name ("GRU") and by its registered name ("gru")."""
    from rnnkit.layers import registry

    found = {}
    for name in registry.recurrent_layer_names():
        layer_cls = registry.get_recurrent(name)
        found[layer_cls.__name__] = found[name] = layer_cls
    return found


def layer_class(family: str) -> type:
    """The layer class that `family` names (a key of `layer_classes()`)."""
    found = layer_classes()
    if family not in found:
        raise CalibrationError(_unknown_families([family], found))
    return found[family]


def _unknown_families(unknown, found) -> str:
    names = sorted({cls.__name__ for cls in found.values()})
    return (
        f"unknown or no family: {', '.join(map(str, unknown)) or 'none given'}"
        f" (choose from {', '.join(names)})"
    )


def check_can_calibrate() -> None:
    """Raises `CalibrationError` where `jit_compile=None` never compiles, so that
    there is nothing to calibrate: another backend, no XLA, a visible GPU."""
    import keras

    backend = keras.backend.backend()
    if backend != "tensorflow":
        raise CalibrationError(
            f"the Keras backend is {backend}: only the TensorFlow backend chooses "
            "between an XLA-compiled and a plain loop (JAX compiles every step, "
            "PyTorch does not compile), so there is nothing to calibrate; run with "
            "KERAS_BACKEND=tensorflow"
        )
    import tensorflow as tf

    from rnnkit.layers import _xla

    if tf.config.list_logical_devices("GPU"):
        raise CalibrationError(
            "a GPU is visible: there the layers run cuDNN or the plain loop and "
            "never compile by default, so there is nothing to calibrate; to "
            "calibrate this machine's CPU, hide the GPU (CUDA_VISIBLE_DEVICES=)"
        )
    if not _xla.available():
        raise CalibrationError(
            "this TensorFlow cannot compile with XLA on the CPU: the layers always "
            "run the plain loop"
        )


def calibrate(
    families: Sequence[str] = FAMILIES,
    shapes: Sequence[tuple[int, int]] = DEFAULT_SHAPES,
    *,
    modes: Sequence[str] = MODES,
    batch: int = 64,
    features: int = 64,
    rounds: int = 9,
    min_gain: float = MIN_GAIN,
    save: bool = True,
    report: Callable[[Measurement], None] | None = None,
) -> list[Measurement]:
    """Measures (`measure`) each family (a registered layer: its class's name or
    its registered name), shape (steps, units) and mode here, and with `save`
    caches the choices for this machine (`record`; `load` them to use them).
    `report` is called with each measurement as soon as it is taken. Bad arguments
    and a machine where nothing can be calibrated raise `CalibrationError`."""
    families, modes, shapes = list(families), list(modes), list(shapes)
    known = layer_classes()
    unknown = [family for family in families if family not in known]
    if unknown or not families:
        raise CalibrationError(_unknown_families(unknown, known))
    unknown = [mode for mode in modes if mode not in MODES]
    if unknown or not modes:
        raise CalibrationError(
            f"unknown or no mode: {', '.join(map(str, unknown)) or 'none given'}"
            f" (choose from {', '.join(MODES)})"
        )
    if not shapes or any(len(shape) != 2 or min(shape) < 1 for shape in shapes):
        raise CalibrationError(
            f"shapes must be (steps, units) pairs of positive integers, got {shapes}"
        )
    for name, value in (("batch", batch), ("features", features), ("rounds", rounds)):
        if value < 1:
            raise CalibrationError(f"{name} must be at least 1, got {value}")
    check_can_calibrate()
    if save:
        measurements()  # an unreadable cache fails now, not after the timing
    found = []
    for family in families:
        for steps, units in shapes:
            for mode in modes:
                item = measure(
                    family,
                    steps,
                    units,
                    mode,
                    batch=batch,
                    features=features,
                    rounds=rounds,
                    min_gain=min_gain,
                )
                found.append(item)
                if report is not None:
                    report(item)
    if save:
        record(found)
    return found
