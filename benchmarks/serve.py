"""`rnnkit serve` under load: latency and throughput of the Keras and ONNX runtimes.

    python benchmarks/serve.py --sentiment RUN_DIR --translation RUN_DIR \\
        [--runtimes keras onnx] [--clients 32] [--seconds 30]

Each runtime is served by its own `rnnkit serve` process on loopback (started here,
stopped at the end). For each recipe and runtime it measures, on the same inputs
(IMDB test reviews, Multi30k test sentences from ../shared/data):

- batch 1: one client, one input per request, one request at a time (p50, p99);
- under load: `--clients` concurrent clients for `--seconds` seconds (failed
  requests, p50, p99, requests per second);

each with the server's request batching on and off.

It prints one table, with the CPU's model name and flags. A failed request fails
the benchmark (exit status 1).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import timing

ROOT = Path(__file__).resolve().parents[1]


@dataclass
class Load:
    """What a load test saw: requests answered, failures, latencies in seconds."""

    requests: int
    failures: int
    seconds: float
    latencies: list[float]
    first_failure: str = ""

    def quantile(self, q: float) -> float:
        ordered = sorted(self.latencies)
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else 0

    @property
    def per_second(self) -> float:
        return self.requests / self.seconds if self.seconds else 0.0

    def row(self) -> str:
        return (
            f"{self.requests} requests, {self.failures} failed, "
            f"p50 {1000 * self.quantile(0.5):.1f} ms, "
            f"p99 {1000 * self.quantile(0.99):.1f} ms, {self.per_second:.1f} req/s"
        )


def post(url: str, body: dict, timeout: float = 60) -> tuple[int, dict]:
    """One JSON POST: (status, decoded answer)."""
    request = urllib.request.Request(
        url,
        data=json.dumps(body).encode("utf-8"),
        headers={"Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read() or b"{}")


def load_test(
    url: str, bodies: list[dict], clients: int, seconds: float, check=None
) -> Load:
    """`clients` threads POST `bodies` (in turn) to `url` for `seconds`; a request
    fails on a status other than 200 or when `check(answer)` is false."""
    latencies: list[float] = []
    failures: list[str] = []
    lock = threading.Lock()
    deadline = time.perf_counter() + seconds

    def client(index: int) -> None:
        turn = index
        while time.perf_counter() < deadline:
            body = bodies[turn % len(bodies)]
            turn += clients
            start = time.perf_counter()
            try:
                status, answer = post(url, body)
                ok = status == 200 and (check is None or check(answer))
                why = "" if ok else f"status {status}: {str(answer)[:200]}"
            except Exception as error:  # a refused or dropped connection
                ok, why = False, f"{type(error).__name__}: {error}"
            elapsed = time.perf_counter() - start
            with lock:
                latencies.append(elapsed)
                if not ok:
                    failures.append(why)

    started = time.perf_counter()
    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return Load(
        len(latencies),
        len(failures),
        time.perf_counter() - started,
        latencies,
        failures[0] if failures else "",
    )


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_for(url: str, process: subprocess.Popen, timeout: float = 600) -> None:
    """Waits until GET `url` answers 200; raises if the process ends first."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the server ended with status {process.returncode}")
        with contextlib.suppress(OSError):
            with urllib.request.urlopen(url, timeout=2) as response:
                if response.status == 200:
                    return
        time.sleep(0.3)
    raise TimeoutError(f"no answer from {url} in {timeout} s")


@contextlib.contextmanager
def server(
    runs: list[str], runtime: str, log: Path, batching: bool = True
) -> Iterator[str]:
    """`rnnkit serve RUNS --runtime RUNTIME` on a free loopback port; its URL."""
    port = free_port()
    flag = "--batching" if batching else "--no-batching"
    with open(log, "w") as output:
        process = subprocess.Popen(
            ["rnnkit", "serve", *runs, "--runtime", runtime, "--port", str(port)]
            + [flag],
            stdout=output,
            stderr=subprocess.STDOUT,
            env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"},
        )
        url = f"http://127.0.0.1:{port}"
        try:
            wait_for(url + "/health", process)
            yield url
        finally:
            process.terminate()
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                process.kill()


def cpu_flags() -> str:
    """The flags that move these figures (AVX2, AVX-512, its bfloat16, AMX)."""
    info = Path("/proc/cpuinfo")
    text = info.read_text() if info.exists() else ""
    flags = next((line for line in text.splitlines() if line.startswith("flags")), "")
    marks = [f for f in ("avx2", "avx512f", "avx512_bf16", "amx_bf16") if f in flags]
    return ", ".join(marks) or "none of AVX2, AVX-512, AMX"


def inputs(recipe: str, count: int) -> list[str]:
    """The first `count` IMDB test reviews, or Multi30k test sentences (German)."""
    import gzip

    import pandas as pd

    shared = ROOT.parent / "shared" / "data"
    if recipe == "sentiment":
        frame = pd.read_csv(shared / "sentiment" / "imdb_test.csv.gz", nrows=count)
        return list(frame.text)
    path = shared / "translation" / "multi30k_test_2016_flickr.de.gz"
    with gzip.open(path, "rt", encoding="utf-8") as lines:
        return [next(lines).strip() for _ in range(count)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sentiment", type=Path)
    parser.add_argument("--translation", type=Path)
    parser.add_argument("--runtimes", nargs="+", default=["keras", "onnx"])
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--seconds", type=float, default=30)
    parser.add_argument("--log-dir", type=Path, default=Path("serve-logs"))
    args = parser.parse_args()
    runs = {
        name: str(path)
        for name, path in (
            ("sentiment", args.sentiment),
            ("translation", args.translation),
        )
        if path is not None
    }
    args.log_dir.mkdir(parents=True, exist_ok=True)
    print(f"CPU: {timing.cpu_line()}; flags: {cpu_flags()}")
    print(
        "| recipe | runtime | batching | batch 1: p50 / p99 ms | "
        f"{args.clients} clients, {args.seconds:g} s: p50 / p99 ms | req/s | failed |"
    )
    print("| --- | --- | --- | ---: | ---: | ---: | ---: |")
    failed = 0
    for runtime in args.runtimes:
        for batching in (True, False):
            specs = [f"{name}={path}" for name, path in runs.items()]
            log = args.log_dir / f"{runtime}-{batching}.log"
            with server(specs, runtime, log, batching) as url:
                for name in runs:
                    failed += measure(url, name, runtime, batching, args)
    sys.exit(1 if failed else 0)


def measure(url: str, name: str, runtime: str, batching: bool, args) -> int:
    """Prints one row of the table; returns the failed requests."""
    bodies = [{"inputs": [text]} for text in inputs(name, 256)]
    endpoint = f"{url}/models/{name}/predict"
    load_test(endpoint, bodies[:4], 1, 2)  # warm-up (traces, caches)
    single = load_test(endpoint, bodies, 1, min(args.seconds, 10))
    loaded = load_test(endpoint, bodies, args.clients, args.seconds)
    print(
        f"| {name} | {runtime} | {'on' if batching else 'off'} | "
        f"{1000 * single.quantile(0.5):.1f} / {1000 * single.quantile(0.99):.1f} | "
        f"{1000 * loaded.quantile(0.5):.1f} / {1000 * loaded.quantile(0.99):.1f} | "
        f"{loaded.per_second:.1f} | {loaded.failures} of {loaded.requests} |",
        flush=True,
    )
    if loaded.first_failure:
        print(f"  first failure: {loaded.first_failure}")
    return single.failures + loaded.failures


if __name__ == "__main__":
    main()
