"""The main job with the layers' XLA choice on and off (issue 34 point 6).

`rnnkit run stock` (the default config: two LSTM(32) layers, batch 64) trains in a
fresh process per run, alternately with the recurrent layers' own XLA choice (the
default: `LSTMCell.xla_pays`, or this machine's `rnnkit calibrate` measurements) and
with it answering "never compile". Prints each arm's wall time of the run
(`run.json`'s `wall_seconds`), of the whole process (start-up included), of its first
epoch and the median of its later epochs; then each run's test metrics, which must not
depend on the choice (only the speed does). Run it with nothing else on the CPU; the
figures and the machine they came from are in docs/performance.md ("One loop per
core").

    python benchmarks/stock_xla.py --runs 3
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from timing import cpu_line

ROOT = Path(__file__).resolve().parents[1]

# One run in a fresh process: the layers' choice as it is ("on"), or every recurrent
# cell answering that XLA does not pay and no calibration read ("off").
RUN = """
import json, sys, time
arm, run_dir = sys.argv[1], sys.argv[2]
from rnnkit import config as config_lib, registry
from rnnkit.training import runner
if arm == "off":
    import rnnkit.layers as layers
    from rnnkit.layers import calibration
    calibration.measured_choice = lambda *args, **kwargs: None
    for cell in (layers.LSTMCell, layers.GRUCell, layers.SimpleRNNCell):
        cell.xla_pays = lambda self, training, side_by_side=False, batch=None: False
import keras
class Epochs(keras.callbacks.Callback):
    def on_epoch_begin(self, epoch, logs=None):
        self.started = time.perf_counter()
    def on_epoch_end(self, epoch, logs=None):
        seconds.append(time.perf_counter() - self.started)
seconds = []
recipe = registry.load("stock")
config = config_lib.resolve(recipe.Config, "recipes/stock/configs/default.toml", {})
result = runner.run(recipe, config, run_dir, verbose=0, callbacks=[Epochs()])
test = result.metrics["test"]["model"]
print(json.dumps({"epochs": seconds, "test": test}))
"""


def one_run(arm: str, folder: Path) -> dict:
    run_dir = folder / f"{arm}-{time.monotonic_ns()}"
    started = time.perf_counter()
    completed = subprocess.run(
        [sys.executable, "-c", RUN, arm, str(run_dir)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    process = time.perf_counter() - started
    if completed.returncode != 0:
        raise SystemExit(f"the {arm} run failed:\n{completed.stderr[-3000:]}")
    figures = json.loads(completed.stdout.strip().splitlines()[-1])
    run = json.loads((run_dir / "run.json").read_text())
    return {**figures, "process": process, "wall": run["wall_seconds"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3, help="runs per arm")
    args = parser.parse_args()
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    results: dict[str, list[dict]] = {"on": [], "off": []}
    with tempfile.TemporaryDirectory() as scratch:
        for _ in range(args.runs):
            for arm in results:  # alternated, so drifts of the machine hit both
                results[arm].append(one_run(arm, Path(scratch)))
    print(f"CPU: {cpu_line()}")
    print("| XLA choice | run (wall_seconds) | process | first epoch | later epochs")
    for arm, runs in results.items():
        walls = ", ".join(f"{r['wall']:.2f}" for r in runs)
        mean = statistics.mean(r["wall"] for r in runs)
        process = ", ".join(f"{r['process']:.1f}" for r in runs)
        first = ", ".join(f"{r['epochs'][0]:.2f}" for r in runs)
        later = ", ".join(f"{statistics.median(r['epochs'][1:]):.2f}" for r in runs)
        name = "on (the default)" if arm == "on" else "off"
        print(f"| {name} | {walls} s (mean {mean:.2f}) | {process} s | {first} s "
              f"| {later} s |")  # fmt: skip
    for arm, runs in results.items():
        for run in runs:
            print(f"{arm}: {len(run['epochs'])} epochs, test {run['test']}")


if __name__ == "__main__":
    main()
