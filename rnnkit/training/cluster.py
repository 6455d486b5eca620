"""The machines of a cluster: `HOST:PORT` addresses and TensorFlow's `TF_CONFIG`.

`write_tf_config` turns `--workers HOST:PORT,...` and `--worker-index N` into
`TF_CONFIG`; `cluster_from_environment` reads it back, checked, as (number of workers,
this worker's index). Worker 0 is the chief: it writes the run directory, the others
write nothing. A distributed search (rnnkit.tuning.cluster) names its chief with the
same `HOST:PORT` form, so `parse_address` lives here, below both.

Nothing here imports TensorFlow, so the launcher can check a cluster description
before it starts the frameworks.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
from typing import Any

from rnnkit.errors import ConfigError

TF_CONFIG = "TF_CONFIG"
ADDRESS = re.compile(r"(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9][A-Za-z0-9.-]*):(\d{1,5})")


@dataclasses.dataclass(frozen=True)
class Address:
    """A machine's HOST:PORT."""

    host: str
    port: int

    def __str__(self) -> str:
        return f"{self.host}:{self.port}"


def parse_address(text: str, option: str) -> Address:
    """`HOST:PORT` (`[::1]:PORT` for IPv6) -> Address, or a ConfigError that names
    `option` (where the text came from) and says why."""
    match = ADDRESS.fullmatch(text.strip())
    if match is None or not 0 < int(match.group(2)) < 65536:
        raise ConfigError(
            f"{option}: {text.strip()!r} is not HOST:PORT with a port from 1 to "
            "65535, e.g. 10.0.0.5:8470 or 127.0.0.1:8470"
        )
    return Address(match.group(1), int(match.group(2)))


def write_tf_config(workers: str, index: int) -> dict[str, Any]:
    """Sets `TF_CONFIG` for worker `index` of `workers` ("HOST:PORT,HOST:PORT,...").

    Worker 0 is the chief. Returns the value written.
    """
    addresses = [part.strip() for part in workers.split(",") if part.strip()]
    if not addresses:
        raise ConfigError(
            "--workers expects HOST:PORT,HOST:PORT,... (one per machine, the chief "
            f"first), e.g. 10.0.0.5:12345,10.0.0.6:12345; got {workers!r}"
        )
    for address in addresses:
        parse_address(address, "--workers")
    if len(set(addresses)) != len(addresses):
        raise ConfigError(f"--workers lists an address twice: {workers!r}")
    if not 0 <= index < len(addresses):
        raise ConfigError(
            f"--worker-index {index} is not one of 0..{len(addresses) - 1} for the "
            f"{len(addresses)} addresses of --workers (0 is the chief)"
        )
    value = {
        "cluster": {"worker": addresses},
        "task": {"type": "worker", "index": index},
    }
    os.environ[TF_CONFIG] = json.dumps(value)
    return value


def cluster_from_environment() -> tuple[int, int]:
    """(number of workers, this worker's index) from `TF_CONFIG`, checked."""
    text = os.environ.get(TF_CONFIG, "").strip()
    fix = (
        "give every machine the same --workers HOST:PORT,... and its own "
        "--worker-index (0 for the chief), or set TF_CONFIG"
    )
    if not text:
        raise ConfigError(f"train.strategy=multiworker needs the cluster: {fix}")
    try:
        value = json.loads(text)
        cluster = value["cluster"]
        task = value["task"]
        kind, index = task["type"], int(task["index"])
        workers = list(cluster.get("chief", [])) + list(cluster.get("worker", []))
    except (ValueError, KeyError, TypeError) as error:
        raise ConfigError(
            f"TF_CONFIG is not a cluster description ({error}); {fix}"
        ) from None
    if kind not in ("chief", "worker"):
        raise ConfigError(
            f"TF_CONFIG task type {kind!r}: rnnkit trains with chief and worker "
            "tasks only (no parameter servers or evaluators)"
        )
    if "chief" in cluster and kind == "worker":
        index += len(cluster["chief"])
    if not 0 <= index < len(workers):
        raise ConfigError(f"TF_CONFIG task index {index} is outside the cluster; {fix}")
    return len(workers), index


def cluster_addresses() -> list[str]:
    """Every worker's HOST:PORT in `TF_CONFIG`, the chief first."""
    cluster = json.loads(os.environ[TF_CONFIG])["cluster"]
    return [*cluster.get("chief", []), *cluster.get("worker", [])]
