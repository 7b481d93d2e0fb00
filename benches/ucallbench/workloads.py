# SPDX-License-Identifier: Apache-2.0
"""The workloads: what each sends, what reply it expects, and which servers it runs on."""

from __future__ import annotations

import base64
import json
import random
import sys
from dataclasses import dataclass

from ucallbench.config import PEERS_DIR
from ucallbench.servers import Endpoint, Server

# The peers' own copy of the procedures (benches/peers/procs.py, run by the peers' interpreters
# as a sibling of their scripts) gives the results every server must compute.
sys.path.insert(0, str(PEERS_DIR))
import procs  # noqa: E402

# The arguments of each call, shared by every dialect (benches/peers/procs.py computes the
# expected results). The echo payloads are bytes: base64 in JSON, raw in gRPC.
ECHO_16B = bytes(range(65, 81))
ECHO_BATCH = random.Random(7).randbytes(32 * 224 * 224)  # a 32x224x224 uint8 batch, 1.6 MB
SUM_PARAMS = {"a": 1, "b": 2}
COMPLEX = {"id": 42, "name": "benchmark-name", "flag1": True, "flag2": False, "vals": list(range(3, 15))}
DOUBLES = [1.5, -2.25, 3.0, 4.75, 5.5, -6.0, 7.125, 8.0, 9.5, 10.25]
UINTS = [(i * 7919) % 100003 for i in range(1000)]


@dataclass(frozen=True)
class Workload:
    name: str
    title: str
    proto: str
    # "rps" (requests/s), "cps" (calls/s: requests/s times the batch size), both higher is
    # better; or "p50" (median latency in µs, lower is better)
    metric: str
    load_args: tuple[str, ...] = ()  # for ucall-load (and ucall-load-grpc)
    tool: str = "ucall-load"  # or "wrk"
    connections: int = 1  # for wrk
    method: str = "sum"
    params: dict | None = None  # None: SUM_PARAMS
    echo: bytes | None = None  # echo's payload, sent as {"data": base64}
    batch: int = 1  # calls per JSON-RPC batch
    scenario: str | None = None  # a dependent chain run by ucall-load --scenario
    group: str = "sum"  # the table it appears in
    quick: bool = False  # also measured by --quick
    kinds: tuple[str, ...] = ("reference", "ucall", "peer")  # Server.kind it runs on
    dialects: tuple[str, ...] = ("jsonrpc", "rest", "grpc")
    only: tuple[str, ...] = ()  # if set, the servers (by name) it runs on

    @property
    def methods(self) -> set[str]:
        return {"gen_rand_ints", "fibonacci", "average_container"} if self.scenario else {self.method}

    def call_params(self) -> dict:
        if self.echo is not None:
            return {"data": base64.b64encode(self.echo).decode()}
        return self.params if self.params is not None else SUM_PARAMS


def rpchpp(name: str, title: str, method: str, params: dict, quick: bool = False) -> Workload:
    return Workload(
        name, title, "http", "p50", ("--connections", "1"), method=method, params=params, group="rpc.hpp", quick=quick
    )


WORKLOADS: list[Workload] = [
    Workload("sum-1conn", "sum, 1 connection", "http", "p50", ("--connections", "1"), quick=True),
    Workload("sum-32conn", "sum, 32 connections", "http", "rps", ("--connections", "32"), quick=True),
    Workload(
        "sum-32conn-pipe16",
        "sum, 32 connections, 16 pipelined",
        "http",
        "rps",
        ("--connections", "32", "--pipeline", "16"),
    ),
    Workload(
        "sum-newconn",
        "sum, new connection per request (32 at once)",
        "http",
        "rps",
        ("--connections", "32", "--new-connection"),
        kinds=("reference", "ucall", "peer"),
        dialects=("jsonrpc", "rest"),
    ),
    Workload(
        "sum-batch32",
        "sum, JSON-RPC batches of 32, 32 connections",
        "http",
        "cps",
        ("--connections", "32"),
        batch=32,
        kinds=("ucall", "peer"),
        dialects=("jsonrpc",),
    ),
    Workload(
        "wrk-sum-32conn",
        "sum, 32 connections, measured by wrk",
        "http",
        "rps",
        tool="wrk",
        connections=32,
        dialects=("jsonrpc",),
        # A cross-check of the load generator: the reference and one UCall server suffice.
        only=("c-reference", "ucall-rust-poll"),
    ),
    Workload(
        "echo-16B",
        "echo 16 bytes, 32 connections",
        "http",
        "rps",
        ("--connections", "32"),
        method="echo",
        echo=ECHO_16B,
        group="echo",
    ),
    Workload(
        "echo-1.6MB",
        "echo 1.6 MB (32x224x224 uint8), 1 connection",
        "http",
        "p50",
        ("--connections", "1"),
        method="echo",
        echo=ECHO_BATCH,
        group="echo",
        quick=True,
    ),
    rpchpp("fibonacci", "Fibonacci(20), naive recursion, 1 connection", "fibonacci", {"n": 20}, quick=True),
    rpchpp("hash-complex", "HashComplex(struct of 5 fields), 1 connection", "hash_complex", {"obj": COMPLEX}),
    rpchpp("std-dev", "StdDev(10 doubles), 1 connection", "std_dev", {"values": DOUBLES}),
    rpchpp("average-container", "AverageContainer(1,000 uint64), 1 connection", "average_container", {"values": UINTS}),
    Workload(
        "sequential",
        "Sequential: GenRandInts(5, 30, 1000), a Fibonacci per number, AverageContainer; calls/s",
        "http",
        "rps",
        ("--connections", "1"),
        scenario="sequential",
        group="rpc.hpp",
        dialects=("jsonrpc", "rest", "grpc"),
    ),
    Workload("tcp-sum-1conn", "sum over raw TCP, 1 connection", "tcp", "p50", ("--connections", "1"), group="tcp"),
    Workload(
        "tcp-sum-32conn",
        "sum over raw TCP, 32 connections",
        "tcp",
        "rps",
        ("--connections", "32"),
        group="tcp",
        quick=True,
    ),
    Workload(
        "tcp-sum-32conn-pipe16",
        "sum over raw TCP, 32 connections, 16 pipelined",
        "tcp",
        "rps",
        ("--connections", "32", "--pipeline", "16"),
        group="tcp",
    ),
    Workload("tls-sum-1conn", "sum over HTTPS, 1 connection", "https", "p50", ("--connections", "1"), group="tls"),
    Workload(
        "tls-sum-32conn",
        "sum over HTTPS, 32 connections",
        "https",
        "rps",
        ("--connections", "32"),
        group="tls",
        quick=True,
    ),
    Workload(
        "tls-sum-newconn",
        "sum over HTTPS, a new connection (and TLS handshake) per request, 32 at once",
        "https",
        "rps",
        ("--connections", "32", "--new-connection"),
        group="tls",
        dialects=("jsonrpc", "rest"),
    ),
    Workload("ws-sum-1conn", "sum over WebSocket, 1 connection", "ws", "p50", ("--connections", "1"), group="ws"),
    Workload(
        "ws-sum-32conn",
        "sum over WebSocket, 32 connections",
        "ws",
        "rps",
        ("--connections", "32"),
        group="ws",
        quick=True,
    ),
]

# One connection that keeps 1,000 requests in flight (written at once, then one per reply):
# each engine must answer a deep pipeline without pausing between groups of replies.
WORKLOADS += [
    Workload(
        f"{prefix}sum-1conn-pipe1000",
        f"sum{over}, 1 connection, 1,000 pipelined",
        proto,
        "rps",
        ("--connections", "1", "--pipeline", "1000"),
        group=group,
        dialects=("jsonrpc",),
        only=("ucall-rust-poll", "ucall-rust-uring"),
    )
    for prefix, over, proto, group in [
        ("", "", "http", "sum"),
        ("tcp-", " over raw TCP", "tcp", "tcp"),
        ("ws-", " over WebSocket", "ws", "ws"),
    ]
]

GROUPS = {
    "sum": "sum(a, b) over HTTP",
    "echo": "echo",
    "rpc.hpp": "The rpc.hpp set",
    "tcp": "sum(a, b) over raw TCP",
    "ws": "sum(a, b) over WebSocket",
    "tls": "sum(a, b) over HTTPS (TLS 1.3, rustls defaults in the client)",
}

METRICS = {
    "rps": ("requests_per_s", "req/s"),
    "cps": ("calls_per_s", "calls/s"),
    "p50": ("latency_p50_us", "p50 µs"),
}


def expected_result(wl: Workload):
    """The result every server must compute, from benches/peers/procs.py."""
    if wl.scenario:
        return None
    fn = procs.PROCEDURES[wl.method]
    return fn(**wl.call_params())


@dataclass(frozen=True)
class Request:
    path: str
    body: bytes
    expect: str | None


def request_for(wl: Workload, ep: Endpoint) -> Request:
    """What to send, and the reply substring to expect, for a workload in a dialect."""
    params = wl.call_params()
    result = expected_result(wl)
    compact = {"separators": (",", ":")}
    # Long results (the echoed 1.6 MB) are checked by their tail, which must come back intact.
    text = json.dumps(result, **compact) if result is not None else None
    if isinstance(result, float):
        text = text[:8]  # the same arithmetic in every server; a prefix spares last-digit quibbles
    elif text is not None and len(text) > 64:
        text = text[-64:]
    if ep.dialect == "rest":
        return Request(f"/{wl.method}", json.dumps(params, **compact).encode(), ep.expect or text)
    body = json.dumps({"jsonrpc": "2.0", "method": wl.method, "params": params, "id": 1}, **compact).encode()
    if text is not None and not text.startswith(("[", "{")) and len(text) < 64:
        text = f'"result":{text}'
    return Request("/", body, ep.expect or text)


def skip_reason(srv: Server, proto: str, wl: Workload) -> str | None:
    """Why a workload does not run on a server: None if it runs; "" if it does not apply."""
    ep = srv.endpoints.get(proto)
    if ep is None or srv.kind not in wl.kinds or ep.dialect not in wl.dialects:
        return ""
    if wl.only and srv.name not in wl.only:
        return ""
    if ep.dialect == "grpc" and (wl.tool != "ucall-load" or "--new-connection" in wl.load_args):
        return ""
    unsupported = dict(srv.unsupported)
    if proto in unsupported:
        return unsupported[proto]
    for m in sorted(wl.methods):
        if m in unsupported:
            return unsupported[m]
    if not wl.methods <= srv.methods:
        return ""
    return None
