"""The plumbing of a distributed search: Keras Tuner's own chief/worker mode over gRPC.

Keras Tuner runs a search on several machines when each process is told its role
through three environment variables before its tuner is constructed:
`KERASTUNER_TUNER_ID` ("chief", or the worker's id), `KERASTUNER_ORACLE_IP` and
`KERASTUNER_ORACLE_PORT` (the chief's address). The chief's oracle then serves
`CreateTrial`/`UpdateTrial`/`EndTrial` requests; each worker builds and trains the
trials it is given. rnnkit adds no scheduler of its own; it sets the variables for the
duration of one search (`role`), and replaces two things of Keras Tuner that wait
forever with bounded waits:

- the chief's serving loop (`serve_oracle`, Keras Tuner's `OracleServicer` in a gRPC
  server): it stops when the search is done, and fails with a `ClusterError` when no
  worker has asked for a trial for `worker_timeout` seconds while none was running;
- a worker's wait for the chief: `wait_for_chief` before anything is built, and each
  request to the chief bounded by the same timeout instead of Keras Tuner's hour.

Nothing here imports TensorFlow, so the launcher can check an address, and whether a
chief answers there, before it starts the frameworks. `Address` is the training
cluster's (rnnkit.training.cluster): a search's chief is named the same way.
"""

from __future__ import annotations

import contextlib
import os
import re
import time
from collections.abc import Iterator
from concurrent import futures
from typing import Any

from rnnkit.errors import ClusterError, ConfigError
from rnnkit.training import cluster as training_cluster
from rnnkit.training.cluster import Address

CHIEF_ID = "chief"
# A worker's id names its state file in the tuning folder; Keras Tuner takes any id
# that contains "chief" for the chief.
WORKER_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
CONNECT_TIMEOUT = 60.0
WORKER_TIMEOUT = 600.0
# Once the last trial ended, how long the chief waits for the workers it knows to ask
# for another and be told to stop (a worker that died never asks). A worker that runs
# each trial in a fresh process asks only once that process has started TensorFlow
# and loaded the data: 10 s was too short on a busy 2-core CPU, where a worker then
# found the chief gone and failed after a search that had succeeded.
STOP_GRACE_SECONDS = 60.0
POLL_SECONDS = 0.2
ENVIRONMENT = ("KERASTUNER_TUNER_ID", "KERASTUNER_ORACLE_IP", "KERASTUNER_ORACLE_PORT")


def parse_address(text: str, option: str = "--chief") -> Address:
    """The chief's `HOST:PORT` -> Address, or a ConfigError that names `option`
    (rnnkit.training.cluster.parse_address, with `--chief` for the option)."""
    return training_cluster.parse_address(text, option)


def check_worker_id(worker_id: str) -> str:
    if not WORKER_ID.fullmatch(worker_id) or CHIEF_ID in worker_id.lower():
        raise ConfigError(
            f"--worker expects an id of letters, digits, '.', '_' or '-' that does not "
            f"contain 'chief' (Keras Tuner's name for the oracle), e.g. 1 or gpu-a; "
            f"got {worker_id!r}"
        )
    return worker_id


def check_can_listen(address: Address) -> None:
    """A ClusterError now, before a chief loads anything, if it could not listen at
    `address` (the port is taken, or the host is not this machine's)."""
    import socket

    try:
        family, kind, proto, _, sockaddr = socket.getaddrinfo(
            address.host.strip("[]"), address.port, type=socket.SOCK_STREAM
        )[0]
        with socket.socket(family, kind, proto) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind(sockaddr)
    except OSError as error:
        raise ClusterError(_cannot_listen(address, error.strerror)) from None


def _cannot_listen(address: Address, reason: str | None) -> str:
    return (
        f"the chief cannot listen on {address}: {reason or 'bind failed'} (is the "
        "port in use, or the host not an address of this machine? 0.0.0.0 listens "
        "on all of them)"
    )


def wait_for_chief(address: Address, timeout: float) -> None:
    """Returns once a gRPC server answers at `address`; a ClusterError after
    `timeout` seconds."""
    import grpc

    with grpc.insecure_channel(str(address)) as channel:
        try:
            grpc.channel_ready_future(channel).result(timeout=timeout)
        except grpc.FutureTimeoutError:
            raise ClusterError(
                f"no chief answered at {address} within {timeout:g} s "
                f"(--connect-timeout); start it first with `rnnkit tune NAME --chief "
                f"{address}` on that machine, and check the address and firewall"
            ) from None


def rpc_error(error: Any, address: Address, timeout: float) -> ClusterError:
    """A worker's one-line error for a failed request to the chief (a grpc.RpcError)."""
    import grpc

    if error.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
        return ClusterError(
            f"lost the chief at {address}: it did not answer within {timeout:g} s "
            "(--connect-timeout); the same chief command resumes the search"
        )
    return ClusterError(f"the chief at {address} failed: {error.details()}")


@contextlib.contextmanager
def role(tuner_id: str, address: Address, timeout: float) -> Iterator[None]:
    """Keras Tuner's chief/worker variables for one search, restored afterwards.

    A worker's requests to the chief wait at most `timeout` seconds for it (Keras
    Tuner's own limit is an hour, so a worker whose chief died would hang that long).
    """
    from rnnkit import _keras_private

    saved = {name: os.environ.get(name) for name in ENVIRONMENT}
    os.environ.update(
        KERASTUNER_TUNER_ID=tuner_id,
        KERASTUNER_ORACLE_IP=address.host,
        KERASTUNER_ORACLE_PORT=str(address.port),
    )
    try:
        with _keras_private.tuner_request_timeout(timeout):
            yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def serve_oracle(oracle: Any, address: Address, worker_timeout: float) -> str | None:
    """Serves `oracle` to the workers at `address` until the search is done.

    Returns None when the oracle has no more trials to give, or the reason the search
    stopped early (Keras Tuner's limit of consecutive failed trials). Raises a
    ClusterError if it cannot listen at `address`, or if no trial ran and no worker
    asked for one for `worker_timeout` seconds.
    """
    import grpc

    from rnnkit import _keras_private

    # Keras Tuner's oracle is not thread-safe beyond its @synchronized methods, and
    # its own server uses one thread too. Without so_reuseport a second chief on the
    # same port fails here instead of sharing it.
    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=1), options=[("grpc.so_reuseport", 0)]
    )
    servicer = _keras_private.serve_tuner_oracle(oracle, server)
    try:
        bound = server.add_insecure_port(str(address))
    except RuntimeError:
        bound = 0
    if not bound:
        raise ClusterError(_cannot_listen(address, None))
    server.start()
    try:
        return _wait_until_done(oracle, servicer, address, worker_timeout)
    finally:
        server.stop(grace=None)


def _wait_until_done(
    oracle: Any, servicer: Any, address: Address, worker_timeout: float
) -> str | None:
    idle_since = time.monotonic()
    done_since = None
    while True:
        time.sleep(POLL_SECONDS)
        now = time.monotonic()
        # Keras Tuner raises this inside `end_trial`, which leaves the trial ongoing.
        stopped = _consecutive_failures(oracle)
        if stopped:
            return stopped
        if oracle.ongoing_trials:
            idle_since = now
            continue
        if servicer.stop_triggered:
            done_since = done_since or now
            if not oracle.tuner_ids or now - done_since > STOP_GRACE_SECONDS:
                return None
            continue
        if now - idle_since > worker_timeout:
            ran = len(oracle.trials)
            raise ClusterError(
                f"no worker asked the chief at {address} for a trial for "
                f"{worker_timeout:g} s (--worker-timeout); {ran} trial(s) ran. Start "
                f"workers with `rnnkit tune NAME --worker ID --chief {address}`; "
                "the same chief command resumes the search"
            )


def _consecutive_failures(oracle: Any) -> str | None:
    """Keras Tuner's reason to stop a search whose last trials all failed."""
    limit = oracle.max_consecutive_failed_trials
    last = [oracle.trials[trial_id] for trial_id in oracle.end_order[-limit:]]
    if limit and len(last) == limit and all(t.status == "FAILED" for t in last):
        return f"the last {limit} trials failed"
    return None
