"""rnnkit's recurrent layers with and without XLA-compiled loops, A/B in one process.

The same layer (same weights, layer -> Dense(1), Adam, batch 64, input 64) with
`jit_compile=True` and `jit_compile=False`, timed in interleaved rounds of about
0.25 s each: training steps (`train_on_batch`) or inference (`predict_on_batch`).
Printed: the median sequences/s of each, their ratio and the range of the per-round
ratios. This is the measurement behind each cell's `xla_pays` (what `jit_compile=None`
compiles without a calibration), and the one `rnnkit calibrate` takes
(`rnnkit.layers.calibration.measure`) and caches; two models alone in the process vary
less than the four columns of `recurrent.py --uncompiled`. Nothing is cached here.

    python benchmarks/xla_loops.py                       # GRU, LSTM, SimpleRNN
    python benchmarks/xla_loops.py --families LSTM --configs 100x384 --mode infer
"""

from __future__ import annotations

import argparse
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
from timing import cpu_line  # noqa: E402

from rnnkit.layers import calibration  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--families", default="GRU,LSTM,SimpleRNN")
    parser.add_argument(
        "--configs", default="100x256,200x512", help="comma-separated SEQxHIDDEN"
    )
    parser.add_argument("--mode", choices=("train", "infer", "both"), default="both")
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--batch", type=int, default=64)
    args = parser.parse_args()
    print(f"CPU: {cpu_line()}")
    print(
        f"keras {keras.__version__}, backend {keras.backend.backend()}, batch "
        f"{args.batch}, input 64, {args.rounds} interleaved rounds of "
        f"~{calibration.ROUND_SECONDS} s"
    )
    print(
        f"{'layer':9} {'mode':9} steps x units batch     | {'XLA':>9} "
        f"{'plain':>9}       | XLA/plain (range of rounds) -> choice"
    )
    modes = {"train": ["training"], "infer": ["inference"]}.get(
        args.mode, list(calibration.MODES)
    )
    for family in args.families.split(","):
        for config in args.configs.split(","):
            steps, units = (int(v) for v in config.split("x"))
            for mode in modes:
                item = calibration.measure(
                    family, steps, units, mode, batch=args.batch, rounds=args.rounds
                )
                print(item.line(), flush=True)


if __name__ == "__main__":
    main()
