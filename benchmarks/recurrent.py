"""Speed of rnnkit's recurrent layers next to the Keras built-ins, in one process.

For each configuration both implementations get the same model around the layer
(layer -> Dense(1)), the same weights and the same batch; their timings are taken
in interleaved rounds (rnnkit, keras, rnnkit, keras, ...) so that load on the
machine hits both alike. Reported: sequences per second (median over rounds) for a
training step (forward + backward + Adam update, `train_on_batch`) and for
inference (`predict_on_batch`), and the ratio rnnkit / keras (> 1: rnnkit faster),
then the path (`execution_path`) each rnnkit call took.

    python benchmarks/recurrent.py                 # the issue's four configurations
    python benchmarks/recurrent.py --rounds 3 --configs 100x256
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402

import rnnkit.layers  # noqa: E402

BATCH, FEATURES = 64, 64


def build(layer):
    model = keras.Sequential(
        [keras.Input((None, FEATURES)), layer, keras.layers.Dense(1)]
    )
    model.compile(optimizer="adam", loss="mse")
    return model


def time_call(function, steps):
    start = time.perf_counter()
    for _ in range(steps):
        function()
    return (time.perf_counter() - start) / steps


def run_config(family, steps_in_time, units, rounds, steps_per_round):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((BATCH, steps_in_time, FEATURES), dtype=np.float32)
    y = rng.standard_normal((BATCH, 1), dtype=np.float32)
    builtin = build(getattr(keras.layers, family)(units))
    ours = build(getattr(rnnkit.layers, family)(units))
    ours.set_weights(builtin.get_weights())
    models = {"rnnkit": ours, "keras": builtin}
    # Trace and warm up both; a layer sets `execution_path` when a step is traced.
    ours.train_on_batch(x, y)
    paths = {"training": ours.layers[0].execution_path}
    ours.predict_on_batch(x)
    paths["inference"] = ours.layers[0].execution_path
    builtin.train_on_batch(x, y)
    builtin.predict_on_batch(x)
    timings = {(name, kind): [] for name in models for kind in ("train", "infer")}
    for _ in range(rounds):
        for name, model in models.items():
            timings[name, "train"].append(
                time_call(lambda m=model: m.train_on_batch(x, y), steps_per_round)
            )
            timings[name, "infer"].append(
                time_call(lambda m=model: m.predict_on_batch(x), steps_per_round)
            )
    rates = {key: BATCH / statistics.median(values) for key, values in timings.items()}
    return rates, paths


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--families", default="LSTM,GRU")
    parser.add_argument(
        "--configs", default="100x256,200x512", help="comma-separated SEQxHIDDEN"
    )
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps-per-round", type=int, default=2)
    args = parser.parse_args()
    devices = [
        d.device_type for d in __import__("tensorflow").config.list_logical_devices()
    ]
    print(
        f"keras {keras.__version__}, backend {keras.backend.backend()}, devices "
        f"{devices}, {os.cpu_count()} CPU cores, batch {BATCH}, input {FEATURES}, "
        f"{args.rounds} interleaved rounds x {args.steps_per_round} steps"
    )
    header = (
        f"{'layer':5} {'seq':>4} {'hidden':>6} | {'train seq/s rnnkit':>18} "
        f"{'keras':>8} {'ratio':>6} | {'infer seq/s rnnkit':>18} {'keras':>8} "
        f"{'ratio':>6}"
    )
    print(header)
    print("-" * len(header))
    path_notes = set()
    for family in args.families.split(","):
        for config in args.configs.split(","):
            steps_in_time, units = (int(v) for v in config.split("x"))
            rates, paths = run_config(
                family, steps_in_time, units, args.rounds, args.steps_per_round
            )
            train = rates["rnnkit", "train"] / rates["keras", "train"]
            infer = rates["rnnkit", "infer"] / rates["keras", "infer"]
            print(
                f"{family:5} {steps_in_time:>4} {units:>6} | "
                f"{rates['rnnkit', 'train']:>18.1f} {rates['keras', 'train']:>8.1f} "
                f"{train:>5.2f}x | {rates['rnnkit', 'infer']:>18.1f} "
                f"{rates['keras', 'infer']:>8.1f} {infer:>5.2f}x",
                flush=True,
            )
            path_notes.update(paths.items())
    for kind, path in sorted(path_notes):
        print(f"rnnkit {kind}: {path}")


if __name__ == "__main__":
    main()
