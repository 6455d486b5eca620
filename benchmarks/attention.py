"""Speed and memory of rnnkit's attention layers next to their baselines, in one run.

1. `rnnkit.layers.MultiHeadAttention` vs `keras.layers.MultiHeadAttention`: 8 heads
   of size 32 (model dim 256), batch 32, self-attention over length 128, same weights.
2. `rnnkit.layers.BahdanauAttention` vs the straightforward formulation that
   broadcasts W_q q (batch, Tq, 1, units) + W_k k (batch, 1, Tv, units) into one
   (batch, Tq, Tv, units) tensor before tanh: batch 64, 100 queries, 100 source
   states of size 256, units 256, same weights.

Each model is just the layer, trained on mse against a random target. Timings are
taken in interleaved rounds (rnnkit, baseline, rnnkit, ...) so machine load hits both
alike, each round about 0.5 s per implementation and mode: "train" is a compiled
training step (forward + backward + SGD update, `train_on_batch`), "infer" a compiled
forward pass (`predict_on_batch`); the median over rounds is reported with the ratio
baseline time / rnnkit time (> 1: rnnkit faster).

Peak memory is measured on the host, once the timings are done, in a fresh
subprocess per implementation and mode: once the model is built, the process' peak
resident set (VmHWM, Linux) is reset and its increase during the first two steps
(tracing included) is read. Large
allocations are forced through mmap (MALLOC_MMAP_THRESHOLD_) so that freed buffers
leave the process instead of hiding in malloc's cache. The size of the largest
intermediate tensor of the Bahdanau score computation is printed next to it.

`--jit-compile` compiles both models' whole training and inference steps with XLA
(`model.compile(jit_compile=True)`), the fairest baseline for the Bahdanau layer,
whose per-query loop XLA compiles by default on TensorFlow.

`--precision mixed_bfloat16` (or mixed_float16) builds both models under that dtype
policy and adds both in float32 to the same interleaved rounds: a line under each row
gives their float32 seconds and each one's speed under the policy over its float32
speed (peak memory is measured under the policy too).

    python benchmarks/attention.py
    python benchmarks/attention.py --rounds 3 --skip-memory
    python benchmarks/attention.py --rounds 3 --skip-memory --jit-compile
    python benchmarks/attention.py --rounds 3 --skip-memory --precision mixed_bfloat16
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import os
import statistics
import subprocess
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402
from keras import ops  # noqa: E402
from timing import cpu_line  # noqa: E402

import rnnkit.layers  # noqa: E402

MHA = {"batch": 32, "length": 128, "dim": 256, "heads": 8}
BAHDANAU = {"batch": 64, "queries": 100, "sources": 100, "dim": 256, "units": 256}
FLOAT_BYTES = 4


class BroadcastBahdanau(keras.layers.Layer):
    """Bahdanau attention as usually written: every query-key pair's hidden layer
    tanh(W_q q_i + W_k k_j) at once, in one (batch, Tq, Tv, units) tensor."""

    def __init__(self, units, **kwargs):
        super().__init__(**kwargs)
        self.units = units

    def build(self, query_shape, value_shape):
        self.query_kernel = self.add_weight(
            name="query_kernel", shape=(query_shape[-1], self.units)
        )
        self.key_kernel = self.add_weight(
            name="key_kernel", shape=(value_shape[-1], self.units)
        )
        self.score_vector = self.add_weight(name="score_vector", shape=(self.units,))

    def call(self, query, value):
        projected_query = ops.matmul(query, self.query_kernel)  # (batch, Tq, units)
        projected_key = ops.matmul(value, self.key_kernel)  # (batch, Tv, units)
        hidden = ops.tanh(
            projected_query[:, :, None, :] + projected_key[:, None, :, :]
        )  # (batch, Tq, Tv, units)
        scores = ops.matmul(hidden, self.score_vector)  # (batch, Tq, Tv)
        return ops.matmul(ops.softmax(scores, axis=-1), value)  # (batch, Tq, dim)


def multi_head_models():
    """(rnnkit model, keras model, inputs, targets) with the same weights."""
    batch, length, dim, heads = MHA["batch"], MHA["length"], MHA["dim"], MHA["heads"]

    def model(layer):
        tokens = keras.Input((length, dim), batch_size=batch)
        return keras.Model(tokens, layer(tokens, tokens))

    ours = model(rnnkit.layers.MultiHeadAttention(heads, dim // heads))
    builtin = model(keras.layers.MultiHeadAttention(heads, dim // heads))
    ours.set_weights(builtin.get_weights())
    rng = np.random.default_rng(0)
    x = rng.standard_normal((batch, length, dim), dtype=np.float32)
    y = rng.standard_normal((batch, length, dim), dtype=np.float32)
    return ours, builtin, x, y


def bahdanau_models():
    """(rnnkit model, broadcast model, inputs, targets) with the same weights."""
    b = BAHDANAU

    def model(layer):
        query = keras.Input((b["queries"], b["dim"]), batch_size=b["batch"])
        value = keras.Input((b["sources"], b["dim"]), batch_size=b["batch"])
        return keras.Model([query, value], layer(query, value))

    ours = model(rnnkit.layers.BahdanauAttention(b["units"]))
    broadcast = model(BroadcastBahdanau(b["units"]))
    broadcast.set_weights(ours.get_weights())
    rng = np.random.default_rng(1)
    x = [
        rng.standard_normal((b["batch"], b["queries"], b["dim"]), dtype=np.float32),
        rng.standard_normal((b["batch"], b["sources"], b["dim"]), dtype=np.float32),
    ]
    y = rng.standard_normal((b["batch"], b["queries"], b["dim"]), dtype=np.float32)
    return ours, broadcast, x, y


BENCHMARKS = {
    "multi-head": (multi_head_models, "keras.layers.MultiHeadAttention"),
    "bahdanau": (bahdanau_models, "broadcast-add-tanh"),
}


# `--jit-compile`: compile both models' whole steps with XLA (Keras' `jit_compile`).
JIT_COMPILE = "auto"  # Keras' default: XLA on JAX, not on TensorFlow's CPU
PRECISION = "float32"  # `--precision`: the dtype policy the models are built under


def models_under(name, precision):
    """BENCHMARKS[name]'s models built under the dtype policy `precision`."""
    previous = keras.config.dtype_policy()
    keras.config.set_dtype_policy(precision)
    try:
        return BENCHMARKS[name][0]()
    finally:
        keras.config.set_dtype_policy(previous)


def compile_for_benchmark(model):
    model.compile(
        optimizer=keras.optimizers.SGD(1e-3), loss="mse", jit_compile=JIT_COMPILE
    )


def steps(model, x, y):
    return {
        "train": lambda: model.train_on_batch(x, y),
        "infer": lambda: model.predict_on_batch(x),
    }


def time_interleaved(name, rounds, seconds_per_round=0.5):
    """Median seconds per step for (implementation, mode), and the largest output
    difference between the two implementations (same weights).

    A round runs each (implementation, mode) for the same number of steps, enough
    for the slower implementation to take about `seconds_per_round`, so that short
    steps are not drowned in timer and scheduling noise.
    """
    ours, baseline, x, y = models_under(name, PRECISION)
    difference = float(
        np.max(
            np.abs(
                ops.convert_to_numpy(ops.cast(ours.predict_on_batch(x), "float32"))
                - ops.convert_to_numpy(
                    ops.cast(baseline.predict_on_batch(x), "float32")
                )
            )
        )
    )
    models = {"rnnkit": ours, "baseline": baseline}
    if PRECISION != "float32":
        ours_float32, baseline_float32, _, _ = models_under(name, "float32")
        ours_float32.set_weights(ours.get_weights())
        baseline_float32.set_weights(baseline.get_weights())
        models["rnnkit float32"] = ours_float32
        models["baseline float32"] = baseline_float32
    for model in models.values():
        compile_for_benchmark(model)
        for step in steps(model, x, y).values():  # trace and warm up
            step()
    repeats = {}
    for mode in ("train", "infer"):
        slowest = max(
            _seconds_per_step(steps(model, x, y)[mode], 1) for model in models.values()
        )
        repeats[mode] = max(1, math.ceil(seconds_per_round / slowest))
    timings = {(impl, mode): [] for impl in models for mode in repeats}
    for _ in range(rounds):
        for impl, model in models.items():
            for mode, step in steps(model, x, y).items():
                timings[impl, mode].append(_seconds_per_step(step, repeats[mode]))
    path = getattr(ours.layers[-1], "execution_path", None)
    medians = {key: statistics.median(v) for key, v in timings.items()}
    return medians, difference, path


def _seconds_per_step(step, repeats):
    start = time.perf_counter()
    for _ in range(repeats):
        step()
    return (time.perf_counter() - start) / repeats


def _memory_kib(field):
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"{field} not in /proc/self/status")


def measure_peak_memory(name, impl, mode):
    """Child process: peak host memory increase (MiB) of the first two steps of one
    mode, over the resident set of the built model.

    The first step's tracing is included (alike for both implementations): measuring
    only a later step would miss buffers that TensorFlow keeps from the first one
    and reuses.
    """
    ours, baseline, x, y = models_under(name, PRECISION)
    model = ours if impl == "rnnkit" else baseline
    compile_for_benchmark(model)
    step = steps(model, x, y)[mode]
    gc.collect()
    with open("/proc/self/clear_refs", "w") as clear_refs:
        clear_refs.write("5")  # resets VmHWM to the current resident set
    before = _memory_kib("VmRSS")
    step()
    step()
    print(json.dumps((_memory_kib("VmHWM") - before) / 1024))


def peak_memories():
    """`measure_peak_memory` of every benchmark, implementation and mode, each in a
    fresh process, two at a time (timings are over): {(name, impl): {mode: MiB}}."""
    if not os.path.exists("/proc/self/clear_refs"):
        return {}
    environment = dict(os.environ, MALLOC_MMAP_THRESHOLD_=str(1 << 20))
    jobs = [
        (name, impl, mode)
        for name in BENCHMARKS
        for impl in ("rnnkit", "baseline")
        for mode in ("train", "infer")
    ]
    peaks = {}
    for start in range(0, len(jobs), 2):
        children = {
            job: subprocess.Popen(
                [
                    sys.executable,
                    os.path.abspath(__file__),
                    "--memory-of",
                    *job,
                    *(["--jit-compile"] if JIT_COMPILE is True else []),
                    "--precision",
                    PRECISION,
                ],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                env=environment,
            )
            for job in jobs[start : start + 2]
        }
        for (name, impl, mode), child in children.items():
            stdout, stderr = child.communicate()
            if child.returncode != 0:
                sys.stderr.write(stderr[-2000:])
                continue
            peaks.setdefault((name, impl), {})[mode] = json.loads(
                stdout.strip().splitlines()[-1]
            )
    return peaks


def bahdanau_intermediates_mib():
    """Largest score-computation tensor: broadcast vs one query at a time."""
    b = BAHDANAU
    per_query = b["batch"] * b["sources"] * b["units"] * FLOAT_BYTES / 2**20
    return {"rnnkit": per_query, "baseline": per_query * b["queries"]}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--skip-memory", action="store_true")
    parser.add_argument(
        "--jit-compile",
        action="store_true",
        help="Compile every model's whole step with XLA (jit_compile=True).",
    )
    parser.add_argument(
        "--precision",
        choices=("float32", "mixed_bfloat16", "mixed_float16"),
        default="float32",
        help="Dtype policy of the compared models; a mixed one adds both in float32 "
        "(a line under each row: the policy's speed over float32).",
    )
    parser.add_argument("--memory-of", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    global JIT_COMPILE, PRECISION
    JIT_COMPILE = True if args.jit_compile else "auto"
    PRECISION = args.precision
    if args.memory_of:
        measure_peak_memory(*args.memory_of)
        return

    print(
        f"keras {keras.__version__}, backend {keras.backend.backend()}, "
        f"{os.cpu_count()} CPU cores, {args.rounds} interleaved rounds of about "
        "0.5 s per implementation and mode, median seconds per step, "
        f"whole steps XLA-compiled: {JIT_COMPILE}, dtype policy {PRECISION}"
    )
    print(f"CPU: {cpu_line()}")
    print(f"multi-head: {MHA}; bahdanau: {BAHDANAU}")
    header = (
        f"{'layer':10} {'baseline':32} {'mode':5} | {'rnnkit s':>9} "
        f"{'baseline s':>10} {'ratio':>6} | {'peak MiB rnnkit':>15} "
        f"{'baseline':>8} | {'largest score tensor MiB':>24}"
    )
    print(header)
    print("-" * len(header))
    intermediates = bahdanau_intermediates_mib()
    results = {name: time_interleaved(name, args.rounds) for name in BENCHMARKS}
    memory = {} if args.skip_memory else peak_memories()
    for name, (timings, difference, path) in results.items():
        for mode in ("train", "infer"):
            ours, theirs = timings["rnnkit", mode], timings["baseline", mode]
            peaks = [
                f"{memory[name, impl][mode]:.0f}"
                if mode in memory.get((name, impl), {})
                else "n/a"
                for impl in ("rnnkit", "baseline")
            ]
            largest = "-"
            if name == "bahdanau":
                largest = (
                    f"{intermediates['rnnkit']:.1f} vs {intermediates['baseline']:.0f}"
                )
            print(
                f"{name:10} {BENCHMARKS[name][1]:32} {mode:5} | {ours:>9.3f} "
                f"{theirs:>10.3f} {theirs / ours:>5.2f}x | {peaks[0]:>15} "
                f"{peaks[1]:>8} | {largest:>24}"
            )
            if PRECISION != "float32":
                ours32 = timings["rnnkit float32", mode]
                theirs32 = timings["baseline float32", mode]
                print(
                    f"{'':10} {'  float32':32} {mode:5} | {ours32:>9.3f} "
                    f"{theirs32:>10.3f} | {PRECISION} over float32: rnnkit "
                    f"{ours32 / ours:.2f}x, baseline {theirs32 / theirs:.2f}x"
                )
        print(f"{'':10} same weights, max abs output difference {difference:.1e}")
        if path:
            print(f"{'':10} rnnkit path: {path}")


if __name__ == "__main__":
    main()
