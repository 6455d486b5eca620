"""Training speed and peak memory of the scan recurrences (MinGRU, MinLSTM) next to
rnnkit's LSTM and GRU, Keras' LSTM and (with `--torch`) PyTorch's, in one process.

Each layer gets the same model around it (layer -> Dense(1)), inputs of `--units`
features and the same batch; a training step is `train_on_batch` (forward, backward,
Adam). Timings are taken in interleaved rounds (every layer once per round, so load
on the machine hits all alike); a row gives each layer's training sequences per
second (median over rounds) and its ratio to rnnkit's LSTM (> 1: faster).
`--memory` then runs each layer at each length in a fresh interpreter and prints
how far its resident memory rises during three training steps above what it held
after a first (traced, warm) one, and the highest it reached over all four steps
above what it held before the first (`child`): the activations a step keeps for its
backward pass, whose growth with T is what a form's memory costs.

    python benchmarks/scan.py                         # T = 64, 256, 1,024, 4,096
    python benchmarks/scan.py --steps 1024 --torch    # and torch.nn.LSTM beside them
    python benchmarks/scan.py --memory                # and peak memory per layer and T
    python benchmarks/scan.py --memory --layers "rnnkit LSTM,MinGRU loop" --batch 64
"""

from __future__ import annotations

import argparse
import json
import os
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402
from timing import (  # noqa: E402
    cpu_line,
    interleaved_seconds,
    run_phase,
    torch_as_tensorflow,
)

import rnnkit.layers  # noqa: E402

LAYERS = {
    "rnnkit LSTM": lambda units: rnnkit.layers.LSTM(units),
    "rnnkit GRU": lambda units: rnnkit.layers.GRU(units),
    "MinGRU scan": lambda units: rnnkit.layers.MinGRU(units, scan="parallel"),
    "MinGRU loop": lambda units: rnnkit.layers.MinGRU(units, scan="sequential"),
    "MinLSTM scan": lambda units: rnnkit.layers.MinLSTM(units, scan="parallel"),
    "MinLSTM loop": lambda units: rnnkit.layers.MinLSTM(units, scan="sequential"),
    "RGLRU scan": lambda units: rnnkit.layers.RGLRU(units, scan="parallel"),
    "RGLRU loop": lambda units: rnnkit.layers.RGLRU(units, scan="sequential"),
    "Keras LSTM": lambda units: keras.layers.LSTM(units),
}


def keras_step(name, steps, units, batch):
    """A function that runs one training step of `name` on a fixed batch."""
    keras.utils.set_random_seed(0)
    model = keras.Sequential(
        [keras.Input((steps, units)), LAYERS[name](units), keras.layers.Dense(1)]
    )
    model.compile(optimizer=keras.optimizers.Adam(1e-3), loss="mse")
    rng = np.random.default_rng(0)
    x = rng.standard_normal((batch, steps, units)).astype("float32")
    y = rng.standard_normal((batch, 1)).astype("float32")
    return lambda: model.train_on_batch(x, y)


def torch_step(steps, units, batch):
    import torch

    torch.manual_seed(0)
    torch.set_num_threads(os.cpu_count() or 1)
    torch_as_tensorflow()  # subnormals flushed, as TensorFlow does
    lstm = torch.nn.LSTM(units, units, batch_first=True)
    head = torch.nn.Linear(units, 1)
    optimizer = torch.optim.Adam([*lstm.parameters(), *head.parameters()], 1e-3)
    x = torch.randn(batch, steps, units)
    y = torch.randn(batch, 1)

    def step():
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(head(lstm(x)[0][:, -1]), y)
        loss.backward()
        optimizer.step()

    return step


def speed_rows(lengths, units, batch, rounds, with_torch, layers):
    names = [*layers, *(["PyTorch LSTM"] if with_torch else [])]
    print(f"training sequences/s (ratio to rnnkit LSTM); batch {batch}, {units} units")
    print(f"{'T':>6}  " + "  ".join(f"{n:>22}" for n in names))
    for steps in lengths:
        runs = {
            name: torch_step(steps, units, batch)
            if name == "PyTorch LSTM"
            else keras_step(name, steps, units, batch)
            for name in names
        }
        repeat = max(1, 1024 // steps)  # steps per timing, so short T is measurable
        for run in runs.values():  # trace and warm up
            run(), run()
        seconds = interleaved_seconds(runs, rounds, repeat)
        speed = {name: batch / s for name, s in seconds.items()}
        base = speed["rnnkit LSTM"]
        cells = [f"{speed[n]:>12.1f} ({speed[n] / base:>5.2f}x)" for n in names]
        print(f"{steps:>6}  " + "  ".join(f"{c:>22}" for c in cells), flush=True)


def resident_mib() -> float:
    """This process's resident set size now, MiB (Linux)."""
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def highest_resident_mib(work) -> float:
    """The highest resident set size while `work()` runs, sampled every 2 ms, MiB."""
    import threading

    highest, done = [resident_mib()], threading.Event()

    def sample():
        while not done.is_set():
            highest.append(resident_mib())
            time.sleep(0.002)

    sampler = threading.Thread(target=sample)
    sampler.start()
    try:
        work()
    finally:
        done.set()
        sampler.join()
    return max(*highest, resident_mib())


def child(name, steps, units, batch):
    """One layer at one length, in MiB: how far the resident memory rises above
    what the process held after its first training step (traced, compiled, warm),
    over three more steps (`peak_mib`), and the highest it reached over all four
    above what it held with the model built and no step run (`peak_from_start_mib`:
    tracing and compiling too, the same for every length, and every activation the
    step keeps, which the first measure misses where the allocator kept the warm
    step's memory); sampled every 2 ms."""
    run = keras_step(name, steps, units, batch)
    start = resident_mib()
    first = highest_resident_mib(run)
    before = resident_mib()
    later = highest_resident_mib(lambda: [run() for _ in range(3)])
    print(
        json.dumps(
            {
                "peak_mib": later - before,
                "peak_from_start_mib": max(first, later) - start,
            }
        )
    )


def memory_rows(lengths, units, batch, layers):
    print(
        f"\nresident MiB above a warm step's, 3 training steps / highest above the "
        f"built model's, 4 steps; batch {batch}, {units} units"
    )
    print(f"{'T':>6}  " + "  ".join(f"{n:>16}" for n in layers))
    here = os.path.dirname(os.path.abspath(__file__))
    for steps in lengths:
        peaks = [
            run_phase(__file__, name, [str(steps), str(units), str(batch)], here)
            for name in layers
        ]
        print(
            f"{steps:>6}  "
            + "  ".join(
                f"{p['peak_mib']:>7.0f} / {p['peak_from_start_mib']:>6.0f}"
                for p in peaks
            ),
            flush=True,
        )


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", default="64,256,1024,4096")
    parser.add_argument("--units", type=int, default=64)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--torch", action="store_true")
    parser.add_argument("--memory", action="store_true")
    parser.add_argument(
        "--layers",
        default=",".join(LAYERS),
        help="comma-separated names among: " + ", ".join(LAYERS),
    )
    parser.add_argument("--child", nargs=4, metavar=("LAYER", "T", "UNITS", "BATCH"))
    args = parser.parse_args()
    if args.child:
        name, steps, units, batch = args.child
        return child(name, int(steps), int(units), int(batch))
    lengths = [int(s) for s in args.steps.split(",")]
    layers = args.layers.split(",")
    unknown = sorted(set(layers) - set(LAYERS))
    if unknown or "rnnkit LSTM" not in layers:
        parser.error(
            f"--layers: unknown {unknown} or no 'rnnkit LSTM' (the ratios' base); "
            f"choose among {', '.join(LAYERS)}"
        )
    print(f"{cpu_line()}; Keras {keras.__version__} ({keras.backend.backend()})")
    speed_rows(lengths, args.units, args.batch, args.rounds, args.torch, layers)
    if args.memory:
        memory_rows(lengths, args.units, args.batch, layers)


if __name__ == "__main__":
    main()
