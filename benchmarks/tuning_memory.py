"""Memory of a tuning worker over many trials: the resident set size (RSS) of the
process that ran each trial, when the trial ends, with one process for all trials and
with a fresh process per trial (what `rnnkit tune --worker` does).

For each mode it starts a chief (`rnnkit tune stock --chief 127.0.0.1:PORT`, a
subprocess) and runs one worker through `rnnkit.tuning.tune_worker` on the stock smoke
config (real MSFT prices) with a random search: each trial builds another model (LSTM
or GRU, 16 or 64 units, 1 or 2 layers, window 10 to 60). A leak shows as a rising
trend, not as the up-and-down of models of different sizes.

    python benchmarks/tuning_memory.py                      # 20 trials, both modes
    python benchmarks/tuning_memory.py --mode one-process --trials 40
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from timing import hardware

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

ROOT = Path(__file__).resolve().parents[1]
SMOKE = ROOT / "recipes" / "stock" / "configs" / "smoke.toml"


def rss_mib() -> float:
    """This process's resident set size now (Linux /proc), in MiB."""
    with open("/proc/self/statm") as statm:
        resident_pages = int(statm.read().split()[1])
    return resident_pages * os.sysconf("SC_PAGE_SIZE") / 2**20


def measure(process_per_trial: bool, trials: int, epochs: int, timeout: float) -> None:
    from rnnkit_recipes.stock.recipe import StockRecipe

    from rnnkit import config as config_lib
    from rnnkit import tuning

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        address = f"127.0.0.1:{probe.getsockname()[1]}"
    config = config_lib.resolve(StockRecipe.Config, SMOKE, {"train.epochs": epochs})
    mode = "a fresh process per trial" if process_per_trial else "one process"
    print(f"\n{trials} trials, {mode}:", flush=True)
    with tempfile.TemporaryDirectory() as tune_dir:
        chief = subprocess.Popen(
            [
                sys.executable, "-c", "from rnnkit.cli import main; main()",
                "tune", "stock", "--config", str(SMOKE),
                "--epochs", str(epochs), "--max-trials", str(trials),
                "--chief", address, "--tune-dir", tune_dir,
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )  # fmt: skip
        try:
            begin = time.monotonic()
            result = tuning.tune_worker(
                StockRecipe(),
                config,
                "1",
                address,
                verbose=0,
                connect_timeout=120,
                process_per_trial=process_per_trial,
            )
            chief.wait(timeout=max(1.0, timeout - (time.monotonic() - begin)))
        finally:
            if chief.poll() is None:
                os.killpg(chief.pid, signal.SIGKILL)
                chief.wait()
    rss = [trial.resident_mib for trial in result.trials]
    for index, trial in enumerate(result.trials, start=1):
        print(
            f"  trial {index:3d} ({trial.status}, {trial.seconds:4.1f} s): "
            f"RSS {trial.resident_mib:7.1f} MiB"
        )
    print(
        f"  {len(rss)} trials in {time.monotonic() - begin:.0f} s; median RSS of the "
        f"first 5 {statistics.median(rss[:5]):.1f} MiB, of the last 5 "
        f"{statistics.median(rss[-5:]):.1f} MiB; trend "
        f"{statistics.linear_regression(range(len(rss)), rss).slope:+.2f} MiB per "
        f"trial; this process now {rss_mib():.1f} MiB",
        flush=True,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=20)
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument(
        "--mode", choices=["both", "one-process", "process-per-trial"], default="both"
    )
    parser.add_argument(
        "--timeout", type=float, default=900, help="Seconds before a chief is killed."
    )
    args = parser.parse_args()
    print(hardware())
    for process_per_trial in (False, True):
        if args.mode == "both" or args.mode.startswith("process") == process_per_trial:
            measure(process_per_trial, args.trials, args.epochs, args.timeout)


if __name__ == "__main__":
    main()
