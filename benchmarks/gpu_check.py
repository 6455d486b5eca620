"""What a lent GPU is for: the GPU figures docs/performance.md lacks, in one run.

    KERAS_BACKEND=torch python benchmarks/gpu_check.py --json torch.jsonl
    KERAS_BACKEND=jax python benchmarks/gpu_check.py --json jax.jsonl
    python benchmarks/gpu_check.py --quick      # toy sizes: seconds, on any device

Three sections, each row printed as it is measured (and appended as one JSON object
per line to `--json`), on whatever device the Keras backend computes on:

1. **Parity**: rnnkit's `LSTM` and `GRU` against Keras' built-ins (which run cuDNN on
   a GPU) with the same weights, unmasked and with right-padded masks: the outputs,
   and the gradients of every weight, read from one SGD step of learning rate 1 on
   each model (so the same code on every backend). Float32 with TF32 off; a row passes
   within 1e-4 of the largest value (cuDNN's float32 tolerance, docs/performance.md).
   Then the same under `mixed_bfloat16`: how far each model's outputs move from its
   own float32 outputs (no pass line: a measure of the precision).
2. **Speed**: training and inference sequences per second of rnnkit's layers and
   Keras' at batch 64, input 64, T x units 100 x 256 and 200 x 512, masked and not,
   float32 and `mixed_bfloat16`, timed in interleaved rounds; the ratio rnnkit / Keras.
3. **Scan recurrences**: training sequences per second and peak GPU memory (PyTorch) of
   MinGRU, MinLSTM, the LRU and the RG-LRU as prefix scans, and MinGRU's step loop,
   against rnnkit's LSTM, at T = 256, 1,024 and 4,096 (batch 16, 256 units).

`--max-minutes` (default 7) stops measuring once spent and names the rows left out,
so that the whole run fits a GPU loan of a few minutes; a model that fails to build or
run (Keras 3.15's cuDNN LSTM under `mixed_bfloat16` on JAX did) gives a row with
`failed=` and the run goes on.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import scan  # noqa: E402
from recurrent import accelerator_line  # noqa: E402
from timing import cpu_line, interleaved_seconds  # noqa: E402

import rnnkit.layers  # noqa: E402

FEATURES = 64
PARITY_TOLERANCE = 1e-4
FAMILIES = {
    "LSTM": (rnnkit.layers.LSTM, keras.layers.LSTM),
    "GRU": (rnnkit.layers.GRU, keras.layers.GRU),
}
# benchmarks/scan.py's layers (the CPU table's), with the LRU beside them.
SCAN_LAYERS = {
    **{
        name: scan.LAYERS[name]
        for name in ("rnnkit LSTM", "MinGRU scan", "MinGRU loop", "MinLSTM scan")
    },
    "LRU scan": lambda units: rnnkit.layers.LRU(units, scan="parallel"),
    "RGLRU scan": scan.LAYERS["RGLRU scan"],
}


def full_float32() -> None:
    """Float32 matrix products (no TF32), as the layer tests ask for."""
    backend = keras.backend.backend()
    if backend == "torch":
        import torch

        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    elif backend == "jax":
        import jax

        jax.config.update("jax_default_matmul_precision", "highest")
    else:
        import tensorflow as tf

        tf.config.experimental.enable_tensor_float_32_execution(False)


def model_of(make_layer, steps, precision="float32", masked=False):
    """(batch, steps, FEATURES) [+ mask] -> make_layer() -> Dense(1), the layer made
    under the dtype policy `precision` (the head in float32)."""
    previous = keras.config.dtype_policy()
    keras.config.set_dtype_policy(precision)
    try:
        inputs = keras.Input((steps, FEATURES))
        x = keras.layers.Masking(0.0)(inputs) if masked else inputs
        outputs = keras.layers.Dense(1, dtype="float32")(make_layer()(x))
        model = keras.Model(inputs, outputs)
    finally:
        keras.config.set_dtype_policy(previous)
    return model


def batch(size, steps, masked, sequences=False, seed=0):
    """Inputs (right-padded with zeros to lengths in [steps / 2, steps] when
    `masked`) and regression targets, one per step with `sequences`."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((size, steps, FEATURES)).astype("float32")
    if masked:
        lengths = rng.integers(steps // 2, steps + 1, size=size)
        x[np.arange(steps)[None, :] >= lengths[:, None]] = 0.0
    targets = (size, steps, 1) if sequences else (size, 1)
    return x, rng.standard_normal(targets).astype("float32")


def sgd_gradients(model, x, y):
    """Every weight's gradient of the mean squared error, as one SGD step of
    learning rate 1 moves it (the same code on every backend)."""
    before = [np.array(w) for w in model.get_weights()]
    model.compile(keras.optimizers.SGD(1.0), "mse")
    model.train_on_batch(x, y)
    after = model.get_weights()
    model.set_weights(before)
    return [b - a for b, a in zip(before, after, strict=True)]


def one_line(error: Exception) -> str:
    """An exception as one short line, for a row that could not be measured."""
    text = " ".join(str(error).split())
    return f"{type(error).__name__}: {text[:200]}"


def relative(a, b):
    a, b = np.asarray(a, "float64"), np.asarray(b, "float64")
    return float(np.max(np.abs(a - b)) / max(np.max(np.abs(b)), 1e-12))


def parity_rows(sizes, emit):
    size, steps, units = sizes
    for family, (ours_class, keras_class) in FAMILIES.items():
        for masked in (False, True):
            x, y = batch(size, steps, masked, sequences=True)
            ours = model_of(
                functools.partial(ours_class, units, return_sequences=True),
                steps,
                masked=masked,
            )
            reference = model_of(
                functools.partial(keras_class, units, return_sequences=True),
                steps,
                masked=masked,
            )
            reference.set_weights(ours.get_weights())
            try:
                outputs = relative(
                    ours.predict_on_batch(x), reference.predict_on_batch(x)
                )
                gradients = max(
                    relative(a, b)
                    for a, b in zip(
                        sgd_gradients(ours, x, y),
                        sgd_gradients(reference, x, y),
                        strict=True,
                    )
                )
            except Exception as error:
                emit(
                    section="parity", family=family, masked=masked,
                    failed=one_line(error),
                )  # fmt: skip
                continue
            layer = ours.layers[2 if masked else 1]
            emit(
                section="parity", family=family, masked=masked,
                outputs_vs_keras=outputs, gradients_vs_keras=gradients,
                passed=max(outputs, gradients) <= PARITY_TOLERANCE,
                rnnkit_path=getattr(layer, "execution_path", ""),
            )  # fmt: skip
            for name, model in (("rnnkit", ours), ("keras", reference)):
                mixed_class = ours_class if name == "rnnkit" else keras_class
                row = dict(section="bfloat16", family=family, masked=masked, layer=name)
                try:
                    mixed = model_of(
                        functools.partial(mixed_class, units, return_sequences=True),
                        steps,
                        "mixed_bfloat16",
                        masked,
                    )
                    mixed.set_weights(model.get_weights())
                    outputs = mixed.predict_on_batch(x)
                except Exception as error:  # e.g. Keras' cuDNN LSTM on JAX
                    emit(**row, failed=one_line(error))
                    continue
                emit(
                    **row,
                    outputs_vs_float32=relative(outputs, model.predict_on_batch(x)),
                )


def speed_rows(configs, size, rounds, repeat, emit, deadline):
    for steps, units in configs:
        for masked in (False, True):
            for precision in ("float32", "mixed_bfloat16"):
                if time.monotonic() > deadline:
                    emit(
                        section="speed", skipped=f"T {steps} units {units} {precision}"
                    )
                    continue
                x, y = batch(size, steps, masked)
                calls = {}
                for family, classes in FAMILIES.items():
                    for name, layer_class in zip(
                        ("rnnkit", "keras"), classes, strict=True
                    ):
                        try:
                            model = model_of(
                                functools.partial(layer_class, units),
                                steps,
                                precision,
                                masked,
                            )
                            model.compile(keras.optimizers.Adam(1e-3), "mse")
                            model.train_on_batch(x, y)  # trace
                            model.predict_on_batch(x)
                        except Exception as error:  # e.g. Keras' cuDNN LSTM on JAX
                            emit(
                                section="speed", family=family, layer=name,
                                steps=steps, units=units, masked=masked,
                                precision=precision, failed=one_line(error),
                            )  # fmt: skip
                            continue
                        calls[f"{family} {name} training"] = functools.partial(
                            model.train_on_batch, x, y
                        )
                        calls[f"{family} {name} inference"] = functools.partial(
                            model.predict_on_batch, x
                        )
                speed = {
                    k: size / s
                    for k, s in interleaved_seconds(calls, rounds, repeat).items()
                }
                for family in FAMILIES:
                    for mode in ("training", "inference"):
                        ours = speed.get(f"{family} rnnkit {mode}")
                        theirs = speed.get(f"{family} keras {mode}")
                        if ours is None or theirs is None:
                            continue
                        emit(
                            section="speed", family=family, steps=steps, units=units,
                            masked=masked, precision=precision, mode=mode,
                            rnnkit_per_s=ours, keras_per_s=theirs, ratio=ours / theirs,
                        )  # fmt: skip


def peak_memory_reset():
    if keras.backend.backend() == "torch":
        import torch

        if torch.cuda.is_available():
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()


def peak_memory_mib():
    """Peak GPU memory since the last reset, PyTorch only: None on JAX (whose
    device statistics hold the process's peak and cannot be reset) and on a CPU."""
    backend = keras.backend.backend()
    if backend == "torch":
        import torch

        if torch.cuda.is_available():
            return torch.cuda.max_memory_allocated() / 2**20
    return None


def scan_rows(lengths, size, units, rounds, emit, deadline):
    for steps in lengths:
        calls = {}
        for name, make in SCAN_LAYERS.items():
            if time.monotonic() > deadline:
                emit(section="scan", skipped=f"T {steps} {name}")
                continue
            x, y = batch(size, steps, masked=False)
            model = model_of(functools.partial(make, units), steps)
            model.compile(keras.optimizers.Adam(1e-3), "mse")
            peak_memory_reset()
            model.train_on_batch(x, y)
            model.train_on_batch(x, y)
            calls[name] = (
                functools.partial(model.train_on_batch, x, y),
                peak_memory_mib(),
            )
        if not calls:
            continue
        seconds = interleaved_seconds({n: c for n, (c, _) in calls.items()}, rounds)
        base = size / seconds["rnnkit LSTM"] if "rnnkit LSTM" in seconds else None
        for name, (_, peak) in calls.items():
            speed = size / seconds[name]
            emit(
                section="scan", layer=name, steps=steps, units=units,
                training_per_s=speed, vs_lstm=speed / base if base else None,
                peak_mib=peak,
            )  # fmt: skip


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="toy sizes (seconds)")
    parser.add_argument("--json", help="append one JSON object per row to this file")
    parser.add_argument("--max-minutes", type=float, default=7.0)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    full_float32()
    deadline = time.monotonic() + 60 * args.max_minutes
    print(f"{cpu_line()}; accelerator: {accelerator_line()}; Keras "
          f"{keras.__version__} ({keras.backend.backend()})", flush=True)  # fmt: skip
    rows = []

    def emit(**row):
        row = {"backend": keras.backend.backend(), **row}
        rows.append(row)
        shown = {k: f"{v:.4g}" if isinstance(v, float) else v for k, v in row.items()}
        print("  ".join(f"{k}={v}" for k, v in shown.items()), flush=True)
        if args.json:
            with open(args.json, "a", encoding="utf-8") as file:
                file.write(json.dumps(row) + "\n")

    if args.quick:
        parity_rows((4, 12, 8), emit)
        speed_rows([(12, 8)], 8, 2, 1, emit, deadline)
        scan_rows([16], 4, 8, 2, emit, deadline)
    else:
        parity_rows((16, 100, 256), emit)
        speed_rows([(100, 256), (200, 512)], 64, args.rounds, 5, emit, deadline)
        scan_rows([256, 1024, 4096], 16, 256, args.rounds, emit, deadline)
    failed = [r for r in rows if r.get("passed") is False]
    broken = [r for r in rows if "failed" in r]
    if broken:
        print(f"{len(broken)} rows could not be measured (their failed= says why)")
    skipped = [r["skipped"] for r in rows if "skipped" in r]
    if skipped:
        print(f"left out for time (--max-minutes {args.max_minutes:g}): {skipped}")
    if failed:
        raise SystemExit(f"{len(failed)} parity rows above {PARITY_TOLERANCE:g}")
    print(f"every parity row within {PARITY_TOLERANCE:g} of Keras")


if __name__ == "__main__":
    main()
