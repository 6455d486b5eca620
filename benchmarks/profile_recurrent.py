"""Where the time of one rnnkit (or Keras) recurrent step goes, op type by op type.

Builds the model of `benchmarks/recurrent.py` (layer -> Dense(1), batch 64, input 64,
Adam), warms it up, times `--steps` training (or inference) steps, then runs as many
again under the TensorFlow profiler and sums the time of every TensorFlow op by type
over the host threads. TensorFlow backend only.

    python benchmarks/profile_recurrent.py GRU
    python benchmarks/profile_recurrent.py LSTM --config 200x512 --mode infer
    python benchmarks/profile_recurrent.py GRU --keras      # keras.layers.GRU instead
"""

from __future__ import annotations

import argparse
import collections
import os
import tempfile
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from recurrent import BATCH, FEATURES, build, time_call  # noqa: E402
from timing import cpu_line  # noqa: E402

import rnnkit.layers  # noqa: E402
from rnnkit import _keras_private  # noqa: E402

# Ops that only wrap others (the step function, the loop): their time is their body's.
WRAPPERS = {"While", "StatefulPartitionedCall", "PartitionedCall", "Run", "Process"}


def op_times(logdir: str) -> tuple[collections.Counter, collections.Counter]:
    """(milliseconds, calls) per TensorFlow op type in the profile under `logdir`."""
    profile = next(Path(logdir).rglob("*.xplane.pb"))
    space = _keras_private.read_profile(profile.read_bytes())
    milliseconds, calls = collections.Counter(), collections.Counter()
    for plane in space.planes:
        if plane.name != "/host:CPU":
            continue
        names = {key: meta.name for key, meta in plane.event_metadata.items()}
        for line in plane.lines:
            for event in line.events:
                name = names.get(event.metadata_id, "")
                if ":" not in name:  # not a TensorFlow op ("scope/name:Type")
                    continue
                op = name.rsplit(":", 1)[1].strip()
                if op in WRAPPERS or op.startswith("__inference"):
                    continue
                milliseconds[op] += event.duration_ps / 1e9
                calls[op] += 1
    return milliseconds, calls


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("family", choices=["LSTM", "GRU", "SimpleRNN"])
    parser.add_argument("--config", default="100x256", help="SEQxHIDDEN")
    parser.add_argument("--mode", choices=["train", "infer"], default="train")
    parser.add_argument("--keras", action="store_true", help="Profile the built-in.")
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--top", type=int, default=12)
    args = parser.parse_args()
    if keras.backend.backend() != "tensorflow":
        parser.error("the TensorFlow profiler needs KERAS_BACKEND=tensorflow")
    steps_in_time, units = (int(v) for v in args.config.split("x"))
    module = keras.layers if args.keras else rnnkit.layers
    model = build(getattr(module, args.family)(units))
    rng = np.random.default_rng(0)
    x = rng.standard_normal((BATCH, steps_in_time, FEATURES), dtype=np.float32)
    y = rng.standard_normal((BATCH, 1), dtype=np.float32)
    step = {
        "train": lambda: model.train_on_batch(x, y),
        "infer": lambda: model.predict_on_batch(x),
    }[args.mode]
    for _ in range(3):  # trace and warm up
        step()
    wall = time_call(step, args.steps) * 1e3
    with tempfile.TemporaryDirectory() as logdir:
        tf.profiler.experimental.start(logdir)
        for _ in range(args.steps):
            step()
        tf.profiler.experimental.stop()
        milliseconds, calls = op_times(logdir)
    threads = os.cpu_count()
    print(f"CPU: {cpu_line()}")
    print(
        f"{'keras' if args.keras else 'rnnkit'} {args.family} {args.config} "
        f"{args.mode}: {wall:.1f} ms per step unprofiled, so {threads} threads "
        f"hold {threads * wall:.0f} thread-ms; ops summed over threads, per step:"
    )
    total = sum(milliseconds.values()) / args.steps
    print(f"{'op':24} {'ms':>8} {'share':>6} {'calls':>7} {'us/call':>8}")
    for op, ms in milliseconds.most_common(args.top):
        per_step = ms / args.steps
        print(
            f"{op:24} {per_step:8.2f} {per_step / (threads * wall):6.0%} "
            f"{calls[op] / args.steps:7.0f} {ms / calls[op] * 1e3:8.1f}"
        )
    print(f"{'all ops':24} {total:8.2f} {total / (threads * wall):6.0%}")


if __name__ == "__main__":
    main()
