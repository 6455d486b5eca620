"""rnnkit's recurrent layers with and without XLA-compiled loops, A/B in one process.

The same layer (same weights, layer -> Dense(1), Adam, batch 64, input 64) with
`jit_compile=True` and `jit_compile=False`, timed in interleaved rounds of three
steps: a training step (`train_on_batch`) or inference (`predict_on_batch`). Printed:
the median sequences/s of each, their ratio and the range of the per-round ratios.
This is the measurement behind each cell's `xla_pays` (what `jit_compile=None`
compiles); two models alone in the process vary less than the four columns of
`recurrent.py --uncompiled`.

    python benchmarks/xla_loops.py                       # GRU, LSTM, SimpleRNN
    python benchmarks/xla_loops.py --families LSTM --configs 100x384 --mode infer
"""

from __future__ import annotations

import argparse
import os
import statistics

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402
from recurrent import BATCH, FEATURES, build, time_call  # noqa: E402
from timing import cpu_line  # noqa: E402

import rnnkit.layers  # noqa: E402

STEPS_PER_ROUND = 3


def compare(family, steps_in_time, units, rounds, mode):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((BATCH, steps_in_time, FEATURES), dtype=np.float32)
    y = rng.standard_normal((BATCH, 1), dtype=np.float32)
    models = {
        jit: build(getattr(rnnkit.layers, family)(units, jit_compile=jit))
        for jit in (True, False)
    }
    models[False].set_weights(models[True].get_weights())
    steps = {
        jit: (lambda m=m: m.train_on_batch(x, y))
        if mode == "train"
        else (lambda m=m: m.predict_on_batch(x))
        for jit, m in models.items()
    }
    for step in steps.values():  # trace, compile, warm up
        step()
        step()
    rates = {jit: [] for jit in steps}
    for _ in range(rounds):
        for jit, step in steps.items():
            rates[jit].append(BATCH / time_call(step, STEPS_PER_ROUND))
    ratios = [a / b for a, b in zip(rates[True], rates[False], strict=True)]
    compiled, plain = (statistics.median(rates[jit]) for jit in (True, False))
    print(
        f"{family:9} {steps_in_time:>4} {units:>6} {mode:5} | {compiled:>9.1f} "
        f"{plain:>9.1f} | {compiled / plain:>5.3f}x  {min(ratios):.2f}-"
        f"{max(ratios):.2f}",
        flush=True,
    )


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--families", default="GRU,LSTM,SimpleRNN")
    parser.add_argument(
        "--configs", default="100x256,200x512", help="comma-separated SEQxHIDDEN"
    )
    parser.add_argument("--mode", choices=("train", "infer", "both"), default="both")
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()
    print(f"CPU: {cpu_line()}")
    print(
        f"keras {keras.__version__}, backend {keras.backend.backend()}, batch "
        f"{BATCH}, input {FEATURES}, {args.rounds} interleaved rounds x "
        f"{STEPS_PER_ROUND} steps"
    )
    print(
        f"{'layer':9} {'seq':>4} {'hidden':>6} {'mode':5} | {'XLA seq/s':>9} "
        f"{'plain':>9} | ratio   per-round range"
    )
    modes = ("train", "infer") if args.mode == "both" else (args.mode,)
    for family in args.families.split(","):
        for config in args.configs.split(","):
            steps_in_time, units = (int(v) for v in config.split("x"))
            for mode in modes:
                compare(family, steps_in_time, units, args.rounds, mode)


if __name__ == "__main__":
    main()
