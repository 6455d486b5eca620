"""The exported recurrent loop's cost against the sequence length: milliseconds per
batch of the sentiment recipe's default recurrent body (token ids -> embedding 128
-> bidirectional GRU 128 over every step -> mean over time -> 2 classes) in Keras
`predict`, LiteRT (`ai_edge_litert`, builtin ops only) and onnxruntime, at each
length, side by side in one run.

The layers' export loop (`rnnkit.layers._export.rnn`) writes one step's output per
iteration; a loop that is linear in the sequence length doubles its time when the
length doubles. The model is untrained (timing only) and built once: batch size and
length stay dynamic in the converted files, which are converted once and run at every
length. Each figure is the median of `--repeats` calls after one warm-up call, taken
in interleaved rounds (every runtime once per round) so that load on the machine hits
all alike; a runtime whose call has taken over `--budget` seconds at a length is
timed once at longer lengths.

    python benchmarks/export_loop.py                        # T = 100 200 400 800
    python benchmarks/export_loop.py --lengths 50 100 --batch 8 --repeats 5
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
from timing import cpu_line  # noqa: E402

VOCABULARY_SIZE = 30000
EMBEDDING = 128
UNITS = 128


def build_model():
    import keras

    from rnnkit import layers

    tokens = keras.Input((None,), dtype="int32", name="tokens")
    embedded = keras.layers.Embedding(VOCABULARY_SIZE, EMBEDDING, mask_zero=True)(
        tokens
    )  # (batch, time, 128)
    encoded = keras.layers.Bidirectional(layers.GRU(UNITS, return_sequences=True))(
        embedded
    )  # (batch, time, 256)
    pooled = keras.layers.GlobalAveragePooling1D()(encoded)  # (batch, 256)
    probabilities = keras.layers.Dense(2, activation="softmax")(pooled)
    return keras.Model(tokens, probabilities, name="bigru")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lengths", type=int, nargs="+", default=[100, 200, 400, 800])
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--budget", type=float, default=20.0)
    args = parser.parse_args()

    import keras

    from rnnkit.export import convert

    keras.utils.set_random_seed(0)
    model = build_model()
    started = time.perf_counter()
    tflite = convert.to_tflite(model)
    onnx = convert.to_onnx(model)
    print(f"converted in {time.perf_counter() - started:.1f} s")
    # One interpreter and one session for all calls: the runtimes' own cost per call.
    calls = {
        "Keras predict": lambda x: model.predict(x, batch_size=len(x), verbose=0),
        "LiteRT": _tflite_runner(tflite),
        "ONNX": _onnx_runner(onnx),
    }
    generator = np.random.default_rng(0)
    rows = []
    slow: set[str] = set()
    for length in args.lengths:
        batch = generator.integers(1, VOCABULARY_SIZE, (args.batch, length))
        batch = batch.astype("int32")
        outputs = {name: call(batch) for name, call in calls.items()}  # warm-up
        for name in ("LiteRT", "ONNX"):
            error = np.max(np.abs(outputs[name] - outputs["Keras predict"]))
            if error > 1e-4:
                raise SystemExit(
                    f"{name} differs from Keras by {error:.3g} at {length}"
                )
        times: dict[str, list[float]] = {name: [] for name in calls}
        for round in range(args.repeats):
            for name, call in calls.items():
                if round and name in slow:
                    continue
                started = time.perf_counter()
                call(batch)
                times[name].append(time.perf_counter() - started)
                if times[name][-1] > args.budget:
                    slow.add(name)
        rows.append((length, {n: 1e3 * statistics.median(t) for n, t in times.items()}))
        print(f"  T={length} done", flush=True)

    names = list(calls)
    print(f"\nms per batch of {args.batch} (bidirectional GRU {UNITS}, {cpu_line()})")
    print(f"{'T':>5}  " + "  ".join(f"{n:>13}" for n in names) + "  LiteRT/Keras")
    for length, figures in rows:
        cells = "  ".join(f"{figures[n]:13.1f}" for n in names)
        ratio = figures["LiteRT"] / figures["Keras predict"]
        print(f"{length:>5}  {cells}  {ratio:12.2f}")
    print(f"median of {args.repeats} calls (1 where a call took > {args.budget:g} s)")


def _tflite_runner(flatbuffer: bytes):
    from ai_edge_litert.interpreter import Interpreter

    interpreter = Interpreter(model_content=flatbuffer, num_threads=os.cpu_count())
    runner = interpreter.get_signature_runner()
    return lambda batch: next(iter(runner(tokens=batch).values()))


def _onnx_runner(serialized: bytes):
    import onnxruntime

    session = onnxruntime.InferenceSession(
        serialized, providers=["CPUExecutionProvider"]
    )
    name = session.get_inputs()[0].name
    return lambda batch: session.run(None, {name: batch})[0]


if __name__ == "__main__":
    main()
