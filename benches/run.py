#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Runs the UCall benchmarks and writes benches/results/.

    python3 benches/run.py [--quick] [--servers a,b] [--workloads x,y] [--reps N]

Every server runs pinned to CPU 0 and the load generator to CPU 1. Each
(server, workload) figure is measured several times, interleaved round-robin
across servers, and the median is reported. See benches/README.md.

Python 3.11 standard library only; matplotlib, when installed, adds a chart.
"""

from __future__ import annotations

import argparse
import atexit
import base64
import datetime as dt
import hashlib
import ipaddress
import json
import os
import platform
import queue
import random
import re
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TARGET = ROOT / "target"
BENCH_DIR = TARGET / "bench"
RESULTS = ROOT / "benches" / "results"
LOAD_BIN = TARGET / "release" / "ucall-load"
GRPC_LOAD_BIN = TARGET / "release" / "ucall-load-grpc"
BODIES = BENCH_DIR / "bodies"
PEERS_DIR = ROOT / "benches" / "peers"
# Written by benches/setup_peers.sh with the generated gRPC code.
PEERS_STATUS = BENCH_DIR / "peers" / "status.json"
PEERS_PY = "benches/.venv-peers/bin/python"
UCALL054_PY = "benches/.venv-ucall054/bin/python"
UCALL054_NO_LISTS = "unsupported: no list or object params (-32602)"

sys.path.insert(0, str(PEERS_DIR))
import procs  # noqa: E402  (benches/peers/procs.py: the expected results)

SERVER_CPU = 0
CLIENT_CPU = 1
# Chosen so that `make bench` ends within 20 minutes and `make bench-quick` within 2 on a
# two-core machine, with every server of the table.
FULL_DURATION, FULL_WARMUP = 1.2, 0.4
QUICK_DURATION, QUICK_WARMUP = 0.5, 0.25
LOADAVG_LIMIT = 2.5
# Also disturbed: other processes used more than this share of one CPU during the run.
OTHER_CPU_LIMIT = 25.0
# A load generator this busy may be what limits the figure, not the server.
CLIENT_BOUND_CPU = 90.0
DEFAULT_BODY = '{"jsonrpc":"2.0","method":"sum","params":{"a":1,"b":2},"id":1}'
SUM_REPLY = '"result":3'

# ---------------------------------------------------------------- the tables


@dataclass(frozen=True)
class Endpoint:
    """How to start a server for one protocol."""

    argv: tuple[str, ...]  # relative paths are taken from the repository root
    # A reply lacking this counts as an error; None derives it from the workload's expected result.
    expect: str | None = None
    # How calls are put on the wire: "jsonrpc" (JSON-RPC 2.0 POSTed to /, or one per line over
    # raw TCP), "rest" (POST /METHOD with the params object as the body, the bare result back),
    # or "grpc" (benches/peers/bench.proto over HTTP/2, measured by ucall-load-grpc).
    dialect: str = "jsonrpc"
    path: str | None = None  # the HTTP target (the WebSocket's, for "ws"); None: the workload's


# A self-signed certificate for 127.0.0.1, made by make_certificate() for each run.
TLS_DIR = BENCH_DIR / "tls"
TLS_ARGS = ("--tls-cert", "target/bench/tls/cert.pem", "--tls-key", "target/bench/tls/key.pem")

# Every procedure of examples/rust/src/bin/bench_server.rs and benches/peers/procs.py.
ALL_METHODS = frozenset({"sum", "echo", "fibonacci", "hash_complex", "std_dev", "average_container", "gen_rand_ints"})


@dataclass(frozen=True)
class Server:
    name: str
    description: str
    endpoints: dict[str, Endpoint]  # protocol ("http" or "tcp") -> endpoint
    # cargo packages ("cargo:NAME"), C sources ("c:FILE"), or C sources on libucall ("capi:FILE")
    build: tuple[str, ...] = ()
    reference: bool = False  # ratio columns divide by this server's figures
    default: bool = True  # run when --servers is not given
    peer: bool = False  # a server users would pick instead of UCall; neither peer nor reference is UCall
    methods: frozenset[str] = frozenset({"sum"})  # procedures it has; workloads calling others skip it
    # Its entry in target/bench/peers/status.json (benches/setup_peers.sh); not "ok" means not run.
    needs: str | None = None
    # (procedure or protocol, reason): workloads calling it, or over it, show the reason
    # instead of a figure.
    unsupported: tuple[tuple[str, str], ...] = ()

    @property
    def kind(self) -> str:
        return "reference" if self.reference else "peer" if self.peer else "ucall"


# bench_server answers sum and echo as sum_server does, plus the rpc.hpp procedures.
SUM_SERVER_POLL = (
    "target/release/bench_server",
    *("--host", "127.0.0.1", "--port", "0", "--threads", "1", "--engine", "poll"),
)
SUM_SERVER_URING = (*SUM_SERVER_POLL[:-1], "uring")
SUM_C_POLL = (
    "target/bench/sum",
    *("--host", "127.0.0.1", "--port", "0", "--threads", "1", "--engine", "poll"),
)

# Every procedure of bench_server, on the Python API. Needs the package built into .venv
# (make python; make bench does it).
PYTHON_POLL = (
    ".venv/bin/python",
    "benches/ucall_python_app.py",
    *("--host", "127.0.0.1", "--port", "0", "--threads", "1", "--engine", "poll"),
)
PYTHON_URING = (*PYTHON_POLL[:-1], "uring")
SUM_C_URING = (*SUM_C_POLL[:-1], "uring")


def c_example_has_tls() -> bool:
    """Whether examples/c/sum.c takes the TLS options the other servers take."""
    try:
        text = (ROOT / "examples" / "c" / "sum.c").read_text()
    except OSError:
        return False
    return all(f'"{flag}"' in text for flag in TLS_ARGS[::2])


C_NO_TLS = "unsupported: examples/c/sum.c has no TLS options yet"
C_UNSUPPORTED = () if c_example_has_tls() else (("https", C_NO_TLS),)

SERVERS: list[Server] = [
    Server(
        name="c-reference",
        description="C, one thread, epoll; fixed reply per HTTP request (epoll_http.c), echo over raw TCP (epoll_echo.c)",
        endpoints={
            "http": Endpoint(("target/bench/epoll_http", "0")),
            # The echo server returns the request line itself, which has no result.
            "tcp": Endpoint(("target/bench/epoll_echo", "0"), expect='"method":"sum"'),
        },
        build=("c:benches/reference/epoll_http.c", "c:benches/reference/epoll_echo.c"),
        reference=True,
    ),
    Server(
        name="ucall-rust-poll",
        description="UCall Rust API, examples/rust bench_server, 1 thread, poll engine",
        # One port serves both: a connection whose first byte is `{` or `[` is raw TCP.
        endpoints={
            "http": Endpoint(SUM_SERVER_POLL),
            "tcp": Endpoint(SUM_SERVER_POLL),
            "ws": Endpoint(SUM_SERVER_POLL),
            "https": Endpoint((*SUM_SERVER_POLL, *TLS_ARGS)),
        },
        build=("cargo:ucall-examples",),
        methods=ALL_METHODS,
    ),
    Server(
        name="ucall-rust-uring",
        description="UCall Rust API, examples/rust bench_server, 1 thread, uring engine (io_uring)",
        endpoints={
            "http": Endpoint(SUM_SERVER_URING),
            "tcp": Endpoint(SUM_SERVER_URING),
            "ws": Endpoint(SUM_SERVER_URING),
            "https": Endpoint((*SUM_SERVER_URING, *TLS_ARGS)),
        },
        build=("cargo:ucall-examples",),
        methods=ALL_METHODS,
    ),
    Server(
        name="ucall-c-poll",
        description="UCall C API, examples/c/sum.c (sum, echo) on the release libucall.a, 1 thread, poll engine",
        endpoints={
            "http": Endpoint(SUM_C_POLL),
            "tcp": Endpoint(SUM_C_POLL),
            "ws": Endpoint(SUM_C_POLL),
            "https": Endpoint((*SUM_C_POLL, *TLS_ARGS)),
        },
        build=("capi:examples/c/sum.c",),
        methods=frozenset({"sum", "echo"}),
        unsupported=C_UNSUPPORTED,
    ),
    Server(
        name="ucall-python",
        description="UCall Python API, benches/ucall_python_app.py (typed procedures, echo of bytes), 1 thread, "
        "poll engine",
        endpoints={
            "http": Endpoint(PYTHON_POLL),
            "tcp": Endpoint(PYTHON_POLL),
            "ws": Endpoint(PYTHON_POLL),
            "https": Endpoint((*PYTHON_POLL, *TLS_ARGS)),
        },
        methods=ALL_METHODS,
    ),
    Server(
        name="ucall-c-uring",
        description="UCall C API, examples/c/sum.c (sum, echo) on the release libucall.a, 1 thread, uring engine",
        endpoints={
            "http": Endpoint(SUM_C_URING),
            "tcp": Endpoint(SUM_C_URING),
            "ws": Endpoint(SUM_C_URING),
            "https": Endpoint((*SUM_C_URING, *TLS_ARGS)),
        },
        build=("capi:examples/c/sum.c",),
        methods=frozenset({"sum", "echo"}),
        unsupported=C_UNSUPPORTED,
    ),
    Server(
        name="ucall-python-uring",
        description="UCall Python API, benches/ucall_python_app.py (typed procedures, echo of bytes), 1 thread, "
        "uring engine",
        endpoints={
            "http": Endpoint(PYTHON_URING),
            "tcp": Endpoint(PYTHON_URING),
            "ws": Endpoint(PYTHON_URING),
            "https": Endpoint((*PYTHON_URING, *TLS_ARGS)),
        },
        methods=ALL_METHODS,
    ),
    # ---- peers: installed by benches/setup_peers.sh into benches/.venv-peers and .venv-ucall054
    Server(
        name="fastapi-rest",
        description="FastAPI on uvicorn (uvloop, httptools), 1 process, async REST endpoints (POST /sum with {a, b})",
        endpoints={
            "http": Endpoint((PEERS_PY, "benches/peers/fastapi_app.py"), dialect="rest"),
            "https": Endpoint((PEERS_PY, "benches/peers/fastapi_app.py", *TLS_ARGS), dialect="rest"),
        },
        peer=True,
        methods=ALL_METHODS,
        needs="fastapi",
    ),
    Server(
        name="fastapi-ws",
        description="FastAPI on uvicorn (uvloop, websockets), 1 process, JSON-RPC in WebSocket text frames at /ws",
        endpoints={"ws": Endpoint((PEERS_PY, "benches/peers/fastapi_app.py"), path="/ws")},
        peer=True,
        methods=ALL_METHODS,
        needs="fastapi",
    ),
    Server(
        name="granian",
        description="granian RSGI, 1 worker, 1 runtime thread, JSON-RPC dispatcher of benches/peers/procs.py",
        endpoints={"http": Endpoint((PEERS_PY, "benches/peers/granian_app.py"))},
        peer=True,
        methods=ALL_METHODS,
        needs="granian",
    ),
    Server(
        name="socketify",
        description="socketify (uWebSockets), 1 process, JSON-RPC dispatcher of benches/peers/procs.py",
        endpoints={"http": Endpoint((PEERS_PY, "benches/peers/socketify_app.py"))},
        peer=True,
        methods=ALL_METHODS,
        needs="socketify",
    ),
    Server(
        name="grpcio-sync",
        description="grpcio, sync server with a thread pool of 4, benches/peers/bench.proto",
        endpoints={"http": Endpoint((PEERS_PY, "benches/peers/grpc_app.py", "sync", "target/bench/peers"), dialect="grpc")},
        peer=True,
        methods=ALL_METHODS,
        needs="grpcio",
    ),
    Server(
        name="grpcio-asyncio",
        description="grpcio, grpc.aio server, benches/peers/bench.proto",
        endpoints={
            "http": Endpoint((PEERS_PY, "benches/peers/grpc_app.py", "asyncio", "target/bench/peers"), dialect="grpc")
        },
        peer=True,
        methods=ALL_METHODS,
        needs="grpcio",
    ),
    Server(
        name="ucall054-posix",
        description="ucall 0.5.4 from PyPI (prior art), posix engine, 1 thread; it closes the connection after "
        "each reply without saying so, which loses the request sent meanwhile (counted as errors)",
        endpoints={"http": Endpoint((UCALL054_PY, "benches/peers/ucall054_app.py", "posix"))},
        peer=True,
        methods=ALL_METHODS,
        needs="ucall054",
        unsupported=tuple((m, UCALL054_NO_LISTS) for m in ("hash_complex", "std_dev", "average_container")),
    ),
    Server(
        name="ucall054-uring",
        description="ucall 0.5.4 from PyPI (prior art), io_uring engine, 1 thread",
        endpoints={"http": Endpoint((UCALL054_PY, "benches/peers/ucall054_app.py", "uring"))},
        peer=True,
        methods=ALL_METHODS,
        needs="ucall054",
        unsupported=tuple((m, UCALL054_NO_LISTS) for m in ("hash_complex", "std_dev", "average_container")),
    ),
]



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
    return Workload(name, title, "http", "p50", ("--connections", "1"), method=method, params=params, group="rpc.hpp", quick=quick)


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
        "tcp-sum-32conn", "sum over raw TCP, 32 connections", "tcp", "rps", ("--connections", "32"), group="tcp", quick=True
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


@dataclass
class Settings:
    duration: float
    warmup: float
    reps: int
    quick: bool
    pair_rounds: int = 0


# ---------------------------------------------------------------- helpers


class BenchError(Exception):
    pass


def say(msg: str) -> None:
    print(f"bench: {msg}", flush=True)


def loadavg() -> float:
    try:
        return float(Path("/proc/loadavg").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 0.0


def cpu_stat() -> tuple[float, float]:
    """Machine-wide busy and stolen CPU seconds from /proc/stat.

    Busy time counts user, nice, system, irq and softirq: a task's own system
    time includes the interrupt ticks taken while it ran, so subtracting the
    server's and the load generator's time leaves what other processes used.
    """
    tick = os.sysconf("SC_CLK_TCK")
    try:
        fields = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    except (OSError, ValueError, IndexError):
        return 0.0, 0.0
    user, nice, system, _idle, _iowait, irq, softirq = fields[:7]
    steal = fields[7] if len(fields) > 7 else 0
    return (user + nice + system + irq + softirq) / tick, steal / tick


def children_cpu() -> float:
    """CPU seconds used by this script's finished children."""
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


# ---------------------------------------------------------------- child processes
#
# Every process run.py starts (servers, load generators, builds, the peers' set-up) leads a
# process group of its own and is recorded in _children until the whole group is gone.
# However run.py ends (done, an exception, a time limit, SIGINT, SIGTERM, SIGHUP, SIGQUIT),
# kill_children() kills each group that is left: main() calls it in a finally clause and
# atexit once more. Each child also runs under `setpriv --pdeathsig KILL`, so that the kernel
# kills it when run.py dies by SIGKILL, which no handler sees.


class Interrupted(KeyboardInterrupt):
    """A signal asked run.py to stop."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)
SETPRIV = shutil.which("setpriv")
_children: dict[int, subprocess.Popen] = {}  # process group id -> its leader
# While a child is being started or stopped a signal only sets `pending`, raised once done,
# so that no child escapes the records; once cleaning up, signals are ignored.
_signals = {"critical": 0, "pending": None, "cleaning": False}


def on_stop_signal(signum, frame) -> None:
    if _signals["cleaning"]:
        return
    if _signals["critical"]:
        _signals["pending"] = signum
        return
    raise Interrupted(signum)


class critical:
    """A section that a stop signal does not interrupt; it is raised at the end instead."""

    def __enter__(self) -> None:
        _signals["critical"] += 1

    def __exit__(self, *exc) -> None:
        _signals["critical"] -= 1
        signum = _signals["pending"]
        if not _signals["critical"] and signum is not None and not _signals["cleaning"]:
            _signals["pending"] = None
            raise Interrupted(signum)  # in place of an exception under way, if any


def spawn(cmd: list[str], **kw) -> subprocess.Popen:
    """Starts `cmd` from the repository root as the leader of a new process group."""
    argv = [SETPRIV, "--pdeathsig", "KILL", *cmd] if SETPRIV else list(cmd)
    with critical():
        proc = subprocess.Popen(argv, cwd=ROOT, start_new_session=True, **kw)
        _children[proc.pid] = proc
    return proc


def stop_group(proc: subprocess.Popen, grace: float = 0.0) -> None:
    """Ends the process group `proc` leads: SIGTERM and `grace` seconds, then SIGKILL."""
    with critical():
        if proc.poll() is None and grace > 0:
            try:
                os.killpg(proc.pid, signal.SIGTERM)
                proc.wait(timeout=grace)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                pass
        # Whatever is left in the group, the leader included, and what a finished leader
        # left behind.
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            proc.wait(timeout=10.0)
        except subprocess.TimeoutExpired:
            say(f"process {proc.pid} did not die on SIGKILL")
        _children.pop(proc.pid, None)


def kill_children() -> None:
    """Kills every process group run.py started that is still recorded."""
    _signals["cleaning"] = True
    for proc in list(_children.values()):
        stop_group(proc)


def run_group(cmd: list[str], timeout: float | None = None, capture: bool = False, **kw) -> subprocess.CompletedProcess:
    """Runs `cmd` to its end (or `timeout`, a BenchError) in its own process group."""
    if capture:
        kw.update(stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    kw.setdefault("stdin", subprocess.DEVNULL)
    proc = spawn(cmd, **kw)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        raise BenchError(f"no result within {timeout:g} s (stopped): {' '.join(cmd)[:300]}") from None
    finally:
        stop_group(proc)
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


def run_checked(cmd: list[str], **kw) -> None:
    say("$ " + " ".join(cmd))
    res = run_group(cmd, **kw)
    if res.returncode != 0:
        raise BenchError(f"command failed ({res.returncode}): {' '.join(cmd)}")


def build(servers: list[Server]) -> None:
    packages = ["ucall-bench"]
    sources = []
    capi_sources = []
    for s in servers:
        for step in s.build:
            kind, _, what = step.partition(":")
            if kind == "cargo" and what not in packages:
                packages.append(what)
            elif kind == "c" and what not in sources:
                sources.append(what)
            elif kind == "capi" and what not in capi_sources:
                capi_sources.append(what)
                if "ucall-capi" not in packages:
                    packages.append("ucall-capi")
    env = dict(os.environ, CARGO_TARGET_DIR=str(TARGET))
    cmd = ["cargo", "build", "--release"]
    for p in packages:
        cmd += ["-p", p]
    run_checked(cmd, env=env)
    BENCH_DIR.mkdir(parents=True, exist_ok=True)
    cc = os.environ.get("CC", "cc")
    for src in sources:
        out = BENCH_DIR / Path(src).stem
        run_checked([cc, "-O2", "-Wall", "-Wextra", "-Werror", src, "-o", str(out)])
    for src in capi_sources:
        out = BENCH_DIR / Path(src).stem
        lib = TARGET / "release" / "libucall.a"
        flags = ["-std=c99", "-O2", "-Wall", "-Wextra", "-Werror", "-I", str(ROOT / "include")]
        run_checked([cc, *flags, src, str(lib), "-lpthread", "-ldl", "-lm", "-lrt", "-o", str(out)])
    # Only what this step builds: a peer's interpreter comes with setup_peers, which runs
    # next (a peer that failed to install gets its reason in its row, see not_runnable).
    for s in servers:
        for ep in s.endpoints.values():
            exe = ROOT / ep.argv[0]
            if not s.needs and not exe.exists():
                raise BenchError(f"{s.name}: {exe} was not built")
    if not LOAD_BIN.exists():
        raise BenchError(f"{LOAD_BIN} was not built")


def build_grpc(servers: list[Server]) -> None:
    """The gRPC load generator, for servers with a gRPC endpoint; their rows say so if it fails."""
    if not any(ep.dialect == "grpc" for s in servers for ep in s.endpoints.values()):
        return
    env = dict(os.environ, CARGO_TARGET_DIR=str(TARGET))
    try:
        run_checked(
            ["cargo", "build", "--release", "-p", "ucall-bench", "--features", "grpc", "--bin", "ucall-load-grpc"],
            env=env,
        )
    except BenchError as e:
        say(f"the gRPC load generator did not build: {e}")


def proc_cpu_seconds(pgid: int) -> float | None:
    """CPU time (user + system) of every process in the process group."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0.0
    found = False
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            stat = Path(entry.path, "stat").read_text()
        except OSError:
            continue
        # Fields after the command name, which is in parentheses.
        fields = stat[stat.rfind(")") + 2 :].split()
        if int(fields[2]) != pgid:  # field 5, pgrp
            continue
        found = True
        total += (int(fields[11]) + int(fields[12])) / tick  # fields 14, 15: utime, stime
    return total if found else None


class ServerProcess:
    """A server started in its own process group, pinned to SERVER_CPU."""

    LISTENING = re.compile(r"listening on (\S+):(\d+)")

    def __init__(self, server: Server, proto: str, log_dir: Path):
        self.name = f"{server.name}/{proto}"
        ep = server.endpoints[proto]
        argv = [str(ROOT / ep.argv[0]), *ep.argv[1:]]
        log_dir.mkdir(parents=True, exist_ok=True)
        self.log_path = log_dir / f"{server.name}-{proto}.log"
        self.log = open(self.log_path, "w")
        self.lines: queue.Queue[str | None] = queue.Queue()
        self.proc = spawn(
            ["taskset", "-c", str(SERVER_CPU), *argv],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=self.log,
            text=True,
        )
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()
        try:
            self.addr = self._wait_listening(timeout=20.0)
        except BaseException:
            self.stop()
            raise

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.log.write(line)
            self.log.flush()
            self.lines.put(line)
        self.lines.put(None)

    def _wait_listening(self, timeout: float) -> str:
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise BenchError(f"{self.name}: no 'listening on' line within {timeout:.0f} s")
            try:
                line = self.lines.get(timeout=left)
            except queue.Empty:
                continue
            if line is None:
                self.proc.wait()
                tail = self.log_path.read_text()[-2000:]
                raise BenchError(f"{self.name} exited ({self.proc.returncode}) before listening:\n{tail}")
            m = self.LISTENING.search(line)
            if m:
                host = m.group(1).strip("[]")
                if host == "localhost":
                    host = "127.0.0.1"
                if not ipaddress.ip_address(host).is_loopback:
                    raise BenchError(f"{self.name} listens on {host}, not a loopback address")
                return f"[{host}]:{m.group(2)}" if ":" in host else f"{host}:{m.group(2)}"

    def cpu_seconds(self) -> float | None:
        return proc_cpu_seconds(self.proc.pid)

    def stop(self) -> None:
        """SIGTERM to the server's process group, SIGKILL to what is left after 3 s."""
        stop_group(self.proc, grace=3.0)
        self.reader.join(timeout=2.0)
        self.log.close()


def body_file(wl: Workload, req: Request) -> Path:
    """Request bodies go through files: the 1.6 MB one is too long for a command line."""
    BODIES.mkdir(parents=True, exist_ok=True)
    digest = hashlib.sha256(req.body).hexdigest()[:16]
    path = BODIES / f"{wl.name}-{digest}.json"
    if not path.exists():
        path.write_bytes(req.body)
    return path


def load_result(out: dict) -> dict:
    result = {
        "requests": out["requests"],
        "requests_per_s": out["requests_per_s"],
        "calls_per_s": out.get("calls_per_s", out["requests_per_s"]),
        "bytes_per_s": out["bytes_per_s"],
        "errors": out["errors"],
        "errors_by_kind": out["errors_by_kind"],
        "latency_mean_us": out["latency_us"]["mean"],
        "latency_p50_us": out["latency_us"]["p50"],
        "latency_p99_us": out["latency_us"]["p99"],
        "latency_p999_us": out["latency_us"]["p999"],
        "latency_max_us": out["latency_us"]["max"],
        "client_cpu_percent": out["client_cpu_percent"],
        "connects": out.get("connects"),
    }
    if "chains" in out:
        result["chains"] = out["chains"]
    return result


def run_load_tool(cmd: list[str], s: Settings) -> dict:
    res = run_group(cmd, timeout=s.duration + s.warmup + 60, capture=True)
    if res.returncode != 0:
        raise BenchError(f"{Path(cmd[3]).name} failed ({res.returncode}): {res.stderr.strip()[-500:]}")
    return load_result(json.loads(res.stdout))


def run_ucall_load(addr: str, wl: Workload, ep: Endpoint, s: Settings) -> dict:
    proto, tls = ("http", True) if wl.proto == "https" else (wl.proto, False)
    cmd = ["taskset", "-c", str(CLIENT_CPU), str(LOAD_BIN), "--addr", addr, "--proto", proto]
    if tls:
        cmd.append("--tls")
    cmd += [*wl.load_args, "--duration", str(s.duration), "--warmup", str(s.warmup)]
    if wl.scenario:
        cmd += ["--scenario", wl.scenario, "--dialect", ep.dialect]
    else:
        req = request_for(wl, ep)
        cmd += ["--body", str(body_file(wl, req))]
        if wl.proto in ("http", "https", "ws"):
            cmd += ["--path", ep.path or req.path]
        if wl.batch > 1:
            cmd += ["--batch", str(wl.batch)]
        if req.expect:
            cmd += ["--expect", req.expect]
    cmd.append("--json")
    return run_load_tool(cmd, s)


def run_grpc_load(addr: str, wl: Workload, s: Settings) -> dict:
    cmd = ["taskset", "-c", str(CLIENT_CPU), str(GRPC_LOAD_BIN), "--addr", addr]
    cmd += [*wl.load_args, "--duration", str(s.duration), "--warmup", str(s.warmup)]
    if wl.scenario:
        cmd += ["--scenario", wl.scenario]
    else:
        params = json.dumps(wl.call_params(), separators=(",", ":")).encode()
        cmd += ["--method", wl.method, "--params", str(body_file(wl, Request("", params, None)))]
        result = expected_result(wl)
        if result is not None and wl.echo is None:
            cmd += ["--expect-json", json.dumps(result)]
    cmd.append("--json")
    return run_load_tool(cmd, s)


def peer_status() -> dict[str, str]:
    try:
        return json.loads(PEERS_STATUS.read_text())
    except (OSError, ValueError):
        return {}


def make_certificate(servers: list[Server], workloads: list[Workload]) -> None:
    """A fresh self-signed certificate for the servers' TLS endpoints (openssl)."""
    if not any("https" in s.endpoints for s in servers) or not any(w.proto == "https" for w in workloads):
        return
    if not shutil.which("openssl"):
        say("openssl is missing: the TLS workloads will fail (apt-get install openssl)")
        return
    TLS_DIR.mkdir(parents=True, exist_ok=True)
    run_checked(
        [
            "openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
            "-keyout", str(TLS_DIR / "key.pem"), "-out", str(TLS_DIR / "cert.pem"), "-days", "2", "-nodes",
            "-subj", "/CN=localhost", "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def setup_peers(servers: list[Server]) -> None:
    """Installs the peers the chosen servers need (benches/setup_peers.sh; quick when done)."""
    if any(s.needs for s in servers):
        run_checked(["bash", "benches/setup_peers.sh"])


def not_runnable(srv: Server, status: dict[str, str]) -> str | None:
    """Why a server cannot run here, or None."""
    if srv.needs:
        state = status.get(srv.needs, "failed: not installed (benches/setup_peers.sh did not run)")
        if state != "ok":
            return state
    for ep in srv.endpoints.values():
        if ep.dialect == "grpc" and not GRPC_LOAD_BIN.exists():
            return "failed: ucall-load-grpc was not built"
    return None


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


WRK_UNITS = {"us": 1.0, "ms": 1e3, "s": 1e6}


def wrk_latency(text: str, pct: str) -> float | None:
    m = re.search(rf"^\s*{re.escape(pct)}%\s+([\d.]+)(us|ms|s)\s*$", text, re.M)
    return float(m.group(1)) * WRK_UNITS[m.group(2)] if m else None


def run_wrk(addr: str, wl: Workload, s: Settings) -> dict:
    script = BENCH_DIR / f"{wl.name}.lua"
    if "]==]" in request_for(wl, Endpoint(())).body.decode():
        raise BenchError("the request body cannot be quoted for wrk's Lua script")
    body = request_for(wl, Endpoint(())).body.decode()
    script.write_text(
        "-- Generated by benches/run.py: POST the JSON-RPC request body.\n"
        'wrk.method = "POST"\n'
        f"wrk.body = [==[{body}]==]\n"
        'wrk.headers["Content-Type"] = "application/json"\n'
    )
    url = f"http://{addr}{'/'}"
    base = ["taskset", "-c", str(CLIENT_CPU), "wrk", "-t1", f"-c{wl.connections}", "-s", str(script)]
    if s.warmup > 0:
        warm = max(1, round(s.warmup))
        run_group([*base, f"-d{warm}s", url], timeout=warm + 30, capture=True)
    secs = max(1, round(s.duration))
    cpu0, t0 = children_cpu(), time.monotonic()
    res = run_group([*base, f"-d{secs}s", "--latency", url], timeout=secs + 30, capture=True)
    cpu1, t1 = children_cpu(), time.monotonic()
    if res.returncode != 0:
        raise BenchError(f"wrk failed ({res.returncode}): {res.stderr.strip()}")
    text = res.stdout
    rps = re.search(r"Requests/sec:\s+([\d.]+)", text)
    total = re.search(r"(\d+) requests in", text)
    if not rps or not total:
        raise BenchError(f"cannot read wrk's output:\n{text}")
    errors = 0
    m = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", text)
    if m:
        errors += int(m.group(1))
    m = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", text)
    if m:
        errors += sum(int(g) for g in m.groups())
    return {
        "requests": int(total.group(1)),
        "requests_per_s": float(rps.group(1)),
        "errors": errors,
        "latency_p50_us": wrk_latency(text, "50"),
        "latency_p99_us": wrk_latency(text, "99"),
        "client_cpu_percent": 100 * (cpu1 - cpu0) / (t1 - t0),
        "wrk_output": text,
    }


# ---------------------------------------------------------------- reporting


def median_of(runs: list[dict], key: str) -> float | None:
    values = [r["result"][key] for r in runs if r["result"].get(key) is not None]
    return statistics.median(values) if values else None


def summarize(runs: list[dict]) -> dict:
    """Median figures for every (server, workload)."""
    groups: dict[tuple[str, str], list[dict]] = {}
    for r in runs:
        if "result" in r:
            groups.setdefault((r["server"], r["workload"]), []).append(r)
    summary: dict[str, dict[str, dict]] = {}
    keys = [
        "requests_per_s",
        "calls_per_s",
        "bytes_per_s",
        "latency_mean_us",
        "latency_p50_us",
        "latency_p99_us",
        "latency_p999_us",
        "client_cpu_percent",
        "server_cpu_percent",
        "other_cpu_percent",
        "steal_percent",
    ]
    for (server, workload), rs in groups.items():
        entry = {k: median_of(rs, k) for k in keys}
        entry["runs"] = len(rs)
        entry["errors"] = sum(r["result"].get("errors", 0) for r in rs)
        entry["disturbed_runs"] = sum(1 for r in rs if r["disturbed"])
        entry["requests_per_s_runs"] = [r["result"]["requests_per_s"] for r in rs]
        entry["latency_p50_us_runs"] = [r["result"].get("latency_p50_us") for r in rs]
        chains = [r["result"]["chains"]["completed"] for r in rs if "chains" in r["result"]]
        if chains:
            entry["chains_completed_runs"] = chains
        summary.setdefault(server, {})[workload] = entry
    return summary


def fmt_value(metric: str, v: float | None) -> str:
    if v is None:
        return "—"
    if metric in ("rps", "cps"):
        return f"{v:,.0f}"
    return f"{v:,.1f}"


def fmt_opt(v: float | None, spec: str) -> str:
    return "—" if v is None else format(v, spec)


def speedup(metric: str, ours: float | None, other: float | None) -> float | None:
    """How many times faster `ours` is: > 1 is faster, whatever the metric."""
    if not ours or not other:
        return None
    return ours / other if metric in ("rps", "cps") else other / ours


def cell(wl: Workload, srv: Server, summary: dict, failures: dict, notes: set) -> str:
    """One figure of the table, with its marks, or why there is none."""
    e = summary.get(srv.name, {}).get(wl.name)
    if e is None:
        why = failures.get((srv.name, wl.name))
        if why:
            notes.add("failed")
            return why if len(why) <= 60 else why[:57] + "…"
        return "n/a"
    key, _ = METRICS[wl.metric]
    text = fmt_value(wl.metric, e.get(key))
    if (srv.name, wl.name) in failures:
        text += " ‡"
        notes.add("partly failed")
    if e["errors"]:
        text += f" ({e['errors']} errors)"
        notes.add("errors")
    if e["disturbed_runs"]:
        text += " *"
        notes.add("disturbed")
    if wl.metric != "p50" and (e.get("client_cpu_percent") or 0) >= CLIENT_BOUND_CPU:
        text += " †"
        notes.add("client-bound")
    return text


def markdown(
    meta: dict,
    summary: dict,
    servers: list[Server],
    workloads: list[Workload],
    failures: dict,
    brief: bool = False,
    paired: dict[str, dict] | None = None,
) -> str:
    """The results as Markdown; `brief` leaves out the details (for README.md)."""
    lines = []
    if not brief:
        lines += ["# UCall benchmark results", ""]
    lines += [
        f"{meta['started']} · {'quick' if meta['quick'] else 'full'} run · "
        f"{meta['duration_s']:g} s per figure after {meta['warmup_s']:g} s warm-up · "
        f"median of {meta['reps']} run(s), interleaved across servers",
        "",
        f"Host: {meta['host']['cpu']}, {meta['host']['cpus']} CPUs, Linux {meta['host']['kernel']} · "
        f"server on CPU {SERVER_CPU}, load generator on CPU {CLIENT_CPU} · commit {meta['commit']}",
        "",
    ]
    notes: set[str] = set()
    for group, heading in GROUPS.items():
        wls = [w for w in workloads if w.group == group]
        rows = [s for s in servers if any(skip_reason(s, w.proto, w) != "" for w in wls)]
        if not wls or not rows:
            continue
        lines += [f"### {heading}", ""]
        header = ["server"] + [f"{w.name} ({METRICS[w.metric][1]})" for w in wls]
        lines.append("| " + " | ".join(header) + " |")
        lines.append("|---|" + "---:|" * len(wls))
        for s in rows:
            cells = [f"`{s.name}`"]
            for w in wls:
                reason = skip_reason(s, w.proto, w)
                cells.append("n/a" if reason == "" else reason if reason else cell(w, s, summary, failures, notes))
            lines.append("| " + " | ".join(cells) + " |")
        lines.append("")
    lines += goals_section(summary, servers, workloads, failures, notes, paired)
    lines += legend(notes)

    ours = [s for s in servers if s.kind == "ucall"]
    others = [s for s in servers if s.kind != "ucall"]
    if ours and others:
        lines += ["", "### Ratios", ""]
        lines.append(
            "How many times faster each UCall server is than each other server, per workload (its "
            "req/s divided by theirs; for latency, their p50 divided by its): above 1 UCall is faster."
        )
        lines.append("")
        for o in ours:
            wls = [w for w in workloads if skip_reason(o, w.proto, w) is None]
            pairs = [
                (x, [speedup(w.metric, val(summary, o, w), val(summary, x, w)) for w in wls]) for x in others
            ]
            pairs = [(x, r) for x, r in pairs if any(v is not None for v in r)]
            if not wls or not pairs:
                continue
            lines.append(f"| `{o.name}` / … | " + " | ".join(w.name for w in wls) + " |")
            lines.append("|---|" + "---:|" * len(wls))
            for x, ratios in pairs:
                lines.append(f"| `{x.name}` | " + " | ".join("—" if v is None else f"{v:.2f}" for v in ratios) + " |")
            lines.append("")
    if brief:
        return "\n".join(lines) + "\n"

    lines += ["", "## Details (medians)", ""]
    lines.append(
        "| workload | server | req/s | MB/s | p50 µs | p99 µs | p99.9 µs | errors | client CPU % | server CPU % "
        "| server CPU µs/req | other CPU % | steal % | runs (disturbed) |"
    )
    lines.append("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for wl in workloads:
        for s in servers:
            e = summary.get(s.name, {}).get(wl.name)
            if not e:
                continue
            mbps = e["bytes_per_s"] / 1e6 if e.get("bytes_per_s") is not None else None
            lines.append(
                f"| {wl.name} | {s.name} | {fmt_opt(e['requests_per_s'], ',.0f')} | {fmt_opt(mbps, ',.1f')} | "
                f"{fmt_opt(e['latency_p50_us'], '.1f')} | {fmt_opt(e['latency_p99_us'], '.1f')} | "
                f"{fmt_opt(e['latency_p999_us'], '.1f')} | {e['errors']} | "
                f"{fmt_opt(e['client_cpu_percent'], '.0f')} | {fmt_opt(e['server_cpu_percent'], '.0f')} | "
                f"{fmt_opt(server_us_per_request(e), '.2f')} | "
                f"{fmt_opt(e['other_cpu_percent'], '.0f')} | {fmt_opt(e['steal_percent'], '.0f')} | "
                f"{e['runs']} ({e['disturbed_runs']}) |"
            )
    if failures:
        lines += ["", "## Failures", ""]
        for (server, workload), why in sorted(failures.items()):
            lines.append(f"- `{server}`{' / ' + workload if workload else ''}: {why}")
    lines += ["", "## Servers", ""]
    for s in servers:
        lines.append(f"- `{s.name}`: {s.description}")
    lines += ["", "## Workloads", ""]
    for wl in workloads:
        lines.append(f"- `{wl.name}` ({wl.proto}): {wl.title}")
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------- the speed goals

# The project's speed goals, as (comparison, bound): a ratio must be >= or <= the bound.
# None: the goal names the ratio to watch but no bound for it.
TARGETS: dict[str, tuple[str, float] | None] = {
    "rust/reference p50": None,
    "rust/reference rps": None,
    "uring/reference rps": (">=", 1.0),  # io_uring reaches the C epoll reference with 32 connections
    "uring/poll p50": ("<=", 1.0),  # io_uring at least as fast as poll on every workload
    "uring/poll rps": (">=", 1.0),
    "c/rust p50": ("<=", 1.05),  # the C API within 5 % of the Rust API: at most 5 % slower
    "c/rust rps": (">=", 0.95),
    "python/reference rps": (">=", 0.5),
    "python/socketify rps": (">=", 4.0),
    "python/fastapi rps": (">=", 20.0),
    "python/reference p50": ("<=", 1.5),
    "python echo GB/s": (">=", 1.0),
    "tls/plain rps": (">=", 0.70),
    "ws/http rps": (">=", 1.0),
}
# The WebSocket row of a peer whose HTTP figures are in another row (one process serves both).
WS_HTTP_ROWS = {"fastapi-ws": "fastapi-rest"}


@dataclass(frozen=True)
class Ratio:
    goal: str  # the goal's words
    num: tuple[str, str]  # (server, workload)
    den: tuple[str, str] | None  # (server, workload); None: the payload throughput of num in GB/s
    target: str  # a key of TARGETS, or "" for a ratio shown for comparison only


def goal_ratios(servers: list[Server], workloads: list[Workload]) -> list[Ratio]:
    """The ratios the speed goals name, among the servers and workloads of a run."""
    names = {s.name: s for s in servers}
    wl_names = {w.name: w for w in workloads}

    def runs(server: str, workload: str) -> bool:
        srv, wl = names.get(server), wl_names.get(workload)
        return srv is not None and wl is not None and skip_reason(srv, wl.proto, wl) != ""

    def kind(workload: str) -> str:
        return "p50" if wl_names[workload].metric == "p50" else "rps"

    def keep(rows: list[Ratio]) -> list[Ratio]:
        return [r for r in rows if runs(*r.num) and (r.den is None or runs(*r.den))]

    rows = []
    for rust in ("ucall-rust-poll", "ucall-rust-uring"):
        for w in ("sum-1conn", "sum-32conn"):
            if w in wl_names:
                goal = f"Rust / C reference, {w}"
                target = "uring/reference rps" if rust.endswith("uring") and kind(w) == "rps" else f"rust/reference {kind(w)}"
                rows.append(Ratio(goal, (rust, w), ("c-reference", w), target))
    for poll, uring in (
        ("ucall-rust-poll", "ucall-rust-uring"),
        ("ucall-c-poll", "ucall-c-uring"),
        ("ucall-python", "ucall-python-uring"),
    ):
        for w in ("sum-1conn", "sum-32conn", "sum-32conn-pipe16", "sum-newconn", "echo-1.6MB"):
            if w in wl_names:
                rows.append(Ratio(f"uring / poll, {w}", (uring, w), (poll, w), f"uring/poll {kind(w)}"))
    for c, rust in (("ucall-c-poll", "ucall-rust-poll"), ("ucall-c-uring", "ucall-rust-uring")):
        for w in workloads:
            if c in names and skip_reason(names[c], w.proto, w) is None:
                goal = f"C API / Rust API, {w.name}"
                rows.append(Ratio(goal, (c, w.name), (rust, w.name), f"c/rust {kind(w.name)}"))
    for py in ("ucall-python", "ucall-python-uring"):
        for other, label, w, target in (
            ("c-reference", "C reference", "sum-32conn", "python/reference rps"),
            ("socketify", "socketify", "sum-32conn", "python/socketify rps"),
            ("fastapi-rest", "FastAPI", "sum-32conn", "python/fastapi rps"),
            ("c-reference", "C reference", "sum-1conn", "python/reference p50"),
        ):
            rows.append(Ratio(f"Python / {label}, {w}", (py, w), (other, w), target))
        goal = "Python bytes echo, echo-1.6MB: payload × req/s"
        rows.append(Ratio(goal, (py, "echo-1.6MB"), None, "python echo GB/s"))
    for srv in servers:
        target = "tls/plain rps" if srv.kind == "ucall" else ""
        rows.append(
            Ratio("TLS / plaintext, 32 connections", (srv.name, "tls-sum-32conn"), (srv.name, "sum-32conn"), target)
        )
    for srv in servers:
        target = "ws/http rps" if srv.kind == "ucall" else ""
        http = WS_HTTP_ROWS.get(srv.name, srv.name)
        rows.append(
            Ratio("WebSocket / HTTP, 32 connections", (srv.name, "ws-sum-32conn"), (http, "sum-32conn"), target)
        )
    return keep(rows)


def fmt_target(target: str) -> str:
    bound = TARGETS.get(target)
    if not target:
        return "(peer, for comparison)"
    if bound is None:
        return "no bound set"
    unit = " GB/s" if "GB/s" in target else ""
    return f"{'≥' if bound[0] == '>=' else '≤'} {bound[1]:g}{unit}"


def goals_section(
    summary: dict,
    servers: list[Server],
    workloads: list[Workload],
    failures: dict,
    notes: set,
    paired: dict[str, dict] | None = None,
) -> list[str]:
    """The ratios of the speed goals, each with its bound and whether this run meets it."""
    ratios = goal_ratios(servers, workloads)
    if not ratios:
        return []
    paired = paired or {}
    names = {s.name: s for s in servers}
    wl_names = {w.name: w for w in workloads}
    lines = [
        "### Speed goals",
        "",
        "*tables* divides the medians above: req/s by req/s (above 1, the first is faster) or p50 by p50 "
        "(below 1, the first is faster). *paired* measures the same ratio again with both servers up at once, "
        "alternating A B B A in each round, and gives the median of the rounds' ratios (and their range); "
        "where it exists, it decides *met*. A figure with errors or without a value gives no ratio. "
        "*server CPU* is what each server spent per request in the tables' runs (µs, user and kernel): "
        "where the load generator's core is full (†), it still tells the two apart.",
        "",
        "| goal | servers | figures | tables | paired (range) | goal bound | met | server CPU µs/req |",
        "|---|---|---|---:|---:|---:|---|---:|",
    ]
    def figure(srv: Server, wl: Workload) -> str:
        reason = skip_reason(srv, wl.proto, wl)
        return reason if reason else cell(wl, srv, summary, failures, notes)

    met_count = failed_count = 0
    for r in ratios:
        srv, wl = names[r.num[0]], wl_names[r.num[1]]
        cpu_shown = "—"
        if r.den is None:
            e = summary.get(srv.name, {}).get(wl.name)
            rps = e.get("requests_per_s") if e and not e["errors"] else None
            size = len(wl.echo or b"")
            figures = f"{size:,} B × " + (f"{rps:,.1f} req/s" if rps else figure(srv, wl))
            value = size * rps / 1e9 if rps else None
            shown = "—" if value is None else f"{value:.2f} GB/s"
            who = f"`{srv.name}`"
        else:
            dsrv, dwl = names[r.den[0]], wl_names[r.den[1]]
            a, b = val(summary, srv, wl), val(summary, dsrv, dwl)
            figures = f"{figure(srv, wl)} / {figure(dsrv, dwl)} {METRICS[wl.metric][1]}"
            value = a / b if a and b else None
            shown = "—" if value is None else f"{value:.2f}"
            who = f"`{srv.name}`" if srv is dsrv else f"`{srv.name}` / `{dsrv.name}`"
            ea, eb = summary.get(srv.name, {}).get(wl.name), summary.get(dsrv.name, {}).get(dwl.name)
            ca, cb = (server_us_per_request(e) if e else None for e in (ea, eb))
            if ca and cb:
                cpu_shown = f"{ca:.2f} / {cb:.2f}"
        pair = paired.get(ratio_id(r))
        pair_shown = "—"
        if pair is not None:
            if pair["ratio"] is None:
                pair_shown = "no figure"
                value = None  # errors or a failed start while paired: nothing decides
            else:
                pair_shown = f"{pair['ratio']:.2f} ({pair['low']:.2f}–{pair['high']:.2f})"
                if pair["disturbed"]:
                    pair_shown += " (disturbed)"
                value = pair["ratio"]
        bound = TARGETS.get(r.target)
        if value is None:
            met = "no figure"
        elif bound is None:
            met = "—"
        elif (value >= bound[1]) if bound[0] == ">=" else (value <= bound[1]):
            met = "yes"
            met_count += 1
        else:
            met = "**no**"
            failed_count += 1
        lines.append(
            f"| {r.goal} | {who} | {figures} | {shown} | {pair_shown} | {fmt_target(r.target)} | {met} | {cpu_shown} |"
        )
    lines += ["", f"Goals with a bound: {met_count} met, {failed_count} not met in this run.", ""]
    return lines


def ratio_id(r: Ratio) -> str:
    return f"{r.num[0]}/{r.num[1]} : {r.den[0]}/{r.den[1]}" if r.den else f"{r.num[0]}/{r.num[1]}"


# The paired phase: each bounded goal ratio measured again with both of its servers up at
# once (each pinned to the server CPU; an idle UCall or reference server uses none), the two
# figures alternated A B B A, then B A A B, so that drift of the shared machine over seconds
# and minutes falls on both sides alike. Rounds are short; the median of their ratios decides.
PAIR_DURATION, PAIR_WARMUP = 0.5, 0.2
PAIR_ROUNDS = 4
QUICK_PAIR_ROUNDS = 1


def paired_ratios(servers: list[Server], workloads: list[Workload], runnable: list[Server]) -> list[Ratio]:
    """The goal ratios with a bound between two figures of servers that can run here."""
    names = {x.name for x in runnable}
    return [
        r
        for r in goal_ratios(servers, workloads)
        if r.den and TARGETS.get(r.target) and r.num[0] in names and r.den[0] in names
    ]


def pair_settings(s: Settings) -> Settings:
    if s.quick:
        return Settings(duration=QUICK_DURATION, warmup=QUICK_WARMUP, reps=1, quick=True)
    return Settings(duration=PAIR_DURATION, warmup=PAIR_WARMUP, reps=1, quick=False)


def paired_seconds(servers: list[Server], workloads: list[Workload], runnable: list[Server], s: Settings) -> float:
    ps = pair_settings(s)
    figures = len(paired_ratios(servers, workloads, runnable)) * s.pair_rounds * 4
    return figures * (ps.warmup + ps.duration + FIGURE_OVERHEAD_S)


def paired_goals(
    servers: list[Server], workloads: list[Workload], runnable: list[Server], s: Settings, log_dir: Path
) -> dict[str, dict]:
    """The bounded goal ratios, measured side by side; keyed by ratio_id."""
    names = {x.name: x for x in runnable}
    wl_names = {w.name: w for w in workloads}
    todo = paired_ratios(servers, workloads, runnable)
    if not todo or s.pair_rounds < 1:
        return {}

    def endpoint(side: tuple[str, str]) -> tuple[str, str]:
        return side[0], wl_names[side[1]].proto

    groups: dict[tuple, list[Ratio]] = {}
    for r in todo:
        groups.setdefault((endpoint(r.num), endpoint(r.den)), []).append(r)
    ps = pair_settings(s)
    say(
        f"paired goal ratios: {len(todo)} ratio(s), {s.pair_rounds} round(s) each: "
        f"about {paired_seconds(servers, workloads, runnable, s) / 60:.1f} min"
    )
    out: dict[str, dict] = {}
    def command(side: tuple[str, str]) -> tuple[str, tuple[str, ...]]:
        """One process serves both sides when they have the same command (WebSocket and HTTP)."""
        return side[0], names[side[0]].endpoints[side[1]].argv

    for (a, b), ratios in groups.items():
        procs: dict[tuple, ServerProcess] = {}
        try:
            for side in (a, b):
                if command(side) not in procs:
                    procs[command(side)] = ServerProcess(names[side[0]], side[1], log_dir)
            pa, pb = procs[command(a)], procs[command(b)]
            say(f"paired: {a[0]} ({a[1]}) on {pa.addr} and {b[0]} ({b[1]}) on {pb.addr}")
            for r in ratios:
                rounds, disturbed, errors = [], 0, 0
                for i in range(s.pair_rounds):
                    got: dict[str, list[float]] = {"A": [], "B": []}
                    for side in "ABBA" if i % 2 == 0 else "BAAB":
                        srv_name, wl_name = r.num if side == "A" else r.den
                        wl = wl_names[wl_name]
                        run = run_one(pa if side == "A" else pb, names[srv_name], wl.proto, wl, i, ps)
                        disturbed += run["disturbed"]
                        errors += run["result"].get("errors", 0)
                        value = run["result"].get(METRICS[wl.metric][0])
                        if value:
                            got[side].append(value)
                    if len(got["A"]) == len(got["B"]) == 2:
                        rounds.append(statistics.mean(got["A"]) / statistics.mean(got["B"]))
                ok = rounds and not errors
                out[ratio_id(r)] = {
                    "ratio": statistics.median(rounds) if ok else None,
                    "low": min(rounds) if ok else None,
                    "high": max(rounds) if ok else None,
                    "rounds": rounds,
                    "disturbed": disturbed,
                    "errors": errors,
                }
                if ok:
                    say(f"  {r.goal}: {out[ratio_id(r)]['ratio']:.3f} ({min(rounds):.3f}–{max(rounds):.3f})")
        except BenchError as e:
            say(f"error: paired {a[0]} / {b[0]}: {e}")
            for r in ratios:
                out.setdefault(ratio_id(r), {"ratio": None, "rounds": [], "disturbed": 0, "errors": 0, "error": str(e)})
        finally:
            for proc in procs.values():
                proc.stop()
    return out


def server_us_per_request(e: dict) -> float | None:
    """The server's CPU time per request (user and kernel, µs). Where the load generator's
    core is the bottleneck (†), req/s is capped alike for every fast server, and this is the
    figure that still tells their costs apart."""
    if not e.get("server_cpu_percent") or not e.get("requests_per_s"):
        return None
    return e["server_cpu_percent"] / 100 * 1e6 / e["requests_per_s"]


def val(summary: dict, srv: Server, wl: Workload) -> float | None:
    e = summary.get(srv.name, {}).get(wl.name)
    if not e or e["errors"]:
        return None
    return e.get(METRICS[wl.metric][0])


def legend(notes: set[str]) -> list[str]:
    out = ["req/s and calls/s: higher is better; p50 µs: lower is better. n/a: the workload does not apply."]
    if "disturbed" in notes:
        out.append(
            f"`*` disturbed: at least one run started with a 1-minute load average above {LOADAVG_LIMIT}, or other "
            f"processes used more than {OTHER_CPU_LIMIT:g} % of a CPU while it ran."
        )
    if "client-bound" in notes:
        out.append(
            f"`†` the load generator used at least {CLIENT_BOUND_CPU:g} % of its CPU: the figure may be bounded by "
            "the client rather than the server, and ratios against it understate the difference."
        )
    if "errors" in notes:
        out.append("`(N errors)`: failed or unexpected replies summed over the runs; such a figure is not valid.")
    if "partly failed" in notes:
        out.append("`‡` some runs of this figure failed (see *Failures* in latest.md); the median is of the others.")
    if "failed" in notes:
        out.append("`failed: …`: the server could not be installed, did not start, or died; see the log.")
    return out


# The results the chart is drawn from, when another interpreter draws it.
CHART_INPUT = RESULTS / "latest.json"


def chart_from(results: Path, path: Path) -> None:
    """Draws the chart of a results file (run by the interpreter that has matplotlib)."""
    data = json.loads(results.read_text())
    names = [x["name"] for x in data["meta"]["servers"]]
    servers = [x for x in SERVERS if x.name in names]
    workloads = [w for w in WORKLOADS if w.name in {x["name"] for x in data["meta"]["workloads"]}]
    chart(path, data["summary"], servers, workloads)


def chart(path: Path, summary: dict, servers: list[Server], workloads: list[Workload]) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        # The peers' venv has matplotlib (benches/setup_peers.sh): draw there.
        if (ROOT / PEERS_PY).exists() and CHART_INPUT.exists():
            try:
                res = run_group(
                    [str(ROOT / PEERS_PY), __file__, "--chart-from", str(CHART_INPUT), "--chart-to", str(path)],
                    timeout=120,
                    capture=True,
                )
            except BenchError as e:
                say(f"the chart failed: {e}")
                return
            if res.returncode == 0:
                say(f"chart: {path.relative_to(ROOT)}")
            else:
                say(f"the chart failed: {res.stderr.strip()[-300:]}")
            return
        say("matplotlib is not installed: skipping the chart")
        return
    panels = [w for w in workloads if any(val(summary, s, w) for s in servers)]
    if not panels:
        return
    cols = 3
    rows = (len(panels) + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(5 * cols, 0.35 * len(servers) * rows + 1.2 * rows), squeeze=False)
    colors = {"reference": "#888888", "ucall": "#1f77b4", "peer": "#ff7f0e"}
    for ax, w in zip(axes.flat, panels):
        shown = [(s, val(summary, s, w)) for s in servers]
        shown = [(s, v) for s, v in shown if v]
        ys = range(len(shown))
        ax.barh(list(ys), [v for _, v in shown], color=[colors[s.kind] for s, _ in shown])
        ax.set_yticks(list(ys))
        ax.set_yticklabels([s.name for s, _ in shown], fontsize=8)
        ax.invert_yaxis()
        better = "higher" if w.metric != "p50" else "lower"
        ax.set_title(f"{w.name}: {METRICS[w.metric][1]} ({better} is better)", fontsize=9)
        ax.tick_params(axis="x", labelsize=8)
    for ax in list(axes.flat)[len(panels) :]:
        ax.axis("off")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    say(f"chart: {path.relative_to(ROOT)}")


def host_info() -> dict:
    cpu = platform.processor() or "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"cpu": cpu, "cpus": os.cpu_count(), "kernel": platform.release(), "python": platform.python_version()}


def git_commit() -> str:
    try:
        rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
        dirty = subprocess.run(["git", "status", "--porcelain"], cwd=ROOT, capture_output=True, text=True)
        return rev.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")
    except OSError:
        return "unknown"


# ---------------------------------------------------------------- main


def pick(names: str | None, table: list, what: str, default) -> list:
    if not names:
        return [x for x in table if default(x)]
    by_name = {x.name: x for x in table}
    chosen = []
    for n in names.split(","):
        n = n.strip()
        if n not in by_name:
            raise BenchError(f"unknown {what} {n!r}; known: {', '.join(by_name)}")
        chosen.append(by_name[n])
    return chosen


def main() -> int:
    global LOAD_BIN
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="the workloads marked quick, shorter, 1 repetition")
    ap.add_argument("--servers", help="comma-separated, from: " + ", ".join(s.name for s in SERVERS))
    ap.add_argument("--workloads", help="comma-separated, from: " + ", ".join(w.name for w in WORKLOADS))
    ap.add_argument("--reps", type=int, help="repetitions of each figure (default 3, or 1 with --quick)")
    ap.add_argument(
        "--duration", type=float, help=f"seconds measured per figure (default {FULL_DURATION}, or {QUICK_DURATION} with --quick)"
    )
    ap.add_argument(
        "--warmup", type=float, help=f"seconds of warm-up per figure (default {FULL_WARMUP}, or {QUICK_WARMUP} with --quick)"
    )
    ap.add_argument(
        "--pair-rounds",
        type=int,
        help=f"A B B A rounds of each bounded goal ratio with both servers up (default {PAIR_ROUNDS}, or "
        f"{QUICK_PAIR_ROUNDS} with --quick; 0 leaves the goals to the tables)",
    )
    ap.add_argument("--no-build", action="store_true", help="use the binaries already built")
    ap.add_argument(
        "--dry-run", action="store_true", help="print what would run and how long it would take; start nothing"
    )
    ap.add_argument("--load-bin", type=Path, help=f"the ucall-load to use (default {LOAD_BIN.relative_to(ROOT)})")
    ap.add_argument("--chart-from", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--chart-to", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.chart_from:
        chart_from(args.chart_from, args.chart_to)
        return 0

    if args.load_bin:
        LOAD_BIN = args.load_bin.resolve()
    for sig in STOP_SIGNALS:
        signal.signal(sig, on_stop_signal)
    atexit.register(kill_children)
    try:
        servers = pick(args.servers, SERVERS, "server", lambda s: s.default)
        workloads = pick(args.workloads, WORKLOADS, "workload", lambda w: w.quick or not args.quick)
        settings = Settings(
            duration=args.duration or (QUICK_DURATION if args.quick else FULL_DURATION),
            warmup=args.warmup if args.warmup is not None else (QUICK_WARMUP if args.quick else FULL_WARMUP),
            reps=args.reps or (1 if args.quick else 3),
            quick=args.quick,
            pair_rounds=args.pair_rounds if args.pair_rounds is not None else QUICK_PAIR_ROUNDS if args.quick else PAIR_ROUNDS,
        )
        if settings.reps < 1 or settings.duration <= 0 or settings.warmup < 0:
            raise BenchError("--reps must be at least 1, --duration positive, --warmup not negative")
        if not shutil.which("taskset"):
            raise BenchError("taskset is missing (Debian package util-linux)")
        if (os.cpu_count() or 1) < 2:
            raise BenchError("two CPUs are needed: the server and the load generator each get one")
        has_wrk = shutil.which("wrk") is not None
        if not has_wrk and any(w.tool == "wrk" for w in workloads):
            say("wrk is not installed: skipping the wrk cross-check (scripts/setup.sh bench installs it)")
            workloads = [w for w in workloads if w.tool != "wrk"]
        if args.dry_run:
            return dry_run(servers, workloads, settings)
        if not args.no_build:
            build(servers)
            build_grpc(servers)
            setup_peers(servers)
        make_certificate(servers, workloads)
        return bench(servers, workloads, settings)
    except BenchError as e:
        print(f"bench: error: {e}", file=sys.stderr)
        return 1
    except Interrupted as e:
        print(f"bench: interrupted ({signal.Signals(e.signum).name})", file=sys.stderr)
        return 128 + e.signum
    except KeyboardInterrupt:
        print("bench: interrupted", file=sys.stderr)
        return 130
    finally:
        kill_children()


def dry_run(servers: list[Server], workloads: list[Workload], s: Settings) -> int:
    """Prints the plan and the time it would take."""
    runnable, plan, failures = make_plan(servers, workloads, peer_status())
    for srv in runnable:
        for proto, wls in plan[srv.name]:
            say(f"{srv.name} ({proto}): {', '.join(w.name for w in wls)}")
    figures, starts, seconds = estimate_seconds(runnable, plan, s)
    load = figures * s.reps * (s.warmup + s.duration)
    say(
        f"{len(runnable)} server(s), {figures} figure(s) and {starts} server start(s) per round, {s.reps} round(s) "
        f"of {s.warmup:g} s warm-up + {s.duration:g} s: {load / 60:.1f} min of load, "
        f"about {seconds / 60:.1f} min with the starts and the load generator's"
    )
    if s.pair_rounds:
        pairs = paired_ratios(servers, workloads, runnable)
        say(
            f"then {len(pairs)} goal ratio(s) paired, {s.pair_rounds} round(s) of 4 figures each: "
            f"about {paired_seconds(servers, workloads, runnable, s) / 60:.1f} min"
        )
    if failures:
        say(f"not counted ({len({k[0] for k in failures})} server(s) cannot run here): see the lines above")
    return 0


Plan = dict[str, list[tuple[str, list[Workload]]]]


def make_plan(
    servers: list[Server], workloads: list[Workload], status: dict[str, str], quiet: bool = False
) -> tuple[list[Server], Plan, dict[tuple[str, str], str]]:
    """The servers that can run here; for each, the workloads of each protocol it speaks;
    and why the others have no figures."""
    # (server, workload or "") -> why it has no figure: not installed, did not start, died.
    failures: dict[tuple[str, str], str] = {}
    runnable = []
    for srv in servers:
        why = not_runnable(srv, status)
        if why:
            if not quiet:
                say(f"{srv.name}: {why}")
            for proto in srv.endpoints:
                for wl in workloads:
                    if wl.proto == proto and skip_reason(srv, proto, wl) is None:
                        failures[(srv.name, wl.name)] = why
        else:
            runnable.append(srv)
    plan = {
        srv.name: [
            (proto, wls)
            for proto in srv.endpoints
            if (wls := [w for w in workloads if w.proto == proto and skip_reason(srv, proto, w) is None])
        ]
        for srv in runnable
    }
    return runnable, plan, failures


# What a run costs besides the load itself, fitted to a full run of 2026-11-22 on this
# two-core machine (474 figures in 796 s at 1.6 s each, 26 server starts per round, some
# restarted after failures): starting and stopping the load generator, and a server start
# (a Python interpreter and its imports for the peers and ucall-python).
FIGURE_OVERHEAD_S = 0.04
START_S = {"native": 0.1, "python": 0.6}
# wrk measures whole seconds and warms up for one at least.
WRK_OVERHEAD_S = 0.2


def estimate_seconds(runnable: list[Server], plan: Plan, s: Settings) -> tuple[int, int, float]:
    """Figures per round, server starts per round, and the seconds the measuring takes."""
    figures = starts = 0
    seconds = 0.0
    for srv in runnable:
        for proto, wls in plan[srv.name]:
            starts += 1
            exe = srv.endpoints[proto].argv[0]
            seconds += START_S["python" if "python" in exe or srv.peer else "native"]
            for w in wls:
                figures += 1
                if w.tool == "wrk":
                    seconds += max(1, round(s.warmup)) * (s.warmup > 0) + max(1, round(s.duration)) + WRK_OVERHEAD_S
                else:
                    seconds += s.warmup + s.duration + FIGURE_OVERHEAD_S
    return figures, starts, seconds * s.reps


def bench(servers: list[Server], workloads: list[Workload], s: Settings) -> int:
    started = dt.datetime.now()
    stamp = started.strftime("%Y%m%d-%H%M%S")
    log_dir = BENCH_DIR / "logs" / stamp
    status = peer_status()
    runnable, plan, failures = make_plan(servers, workloads, status)
    figures, starts, seconds = estimate_seconds(runnable, plan, s)
    say(
        f"{len(runnable)} server(s), {figures} figure(s) and {starts} server start(s) per round, "
        f"{s.reps} round(s): about {seconds / 60:.1f} min"
    )
    runs: list[dict] = []
    for rep in range(s.reps):
        # Rotate the server order each round so none always goes first.
        order = runnable[rep % len(runnable) :] + runnable[: rep % len(runnable)] if runnable else []
        for srv in order:
            for proto, wls in plan[srv.name]:
                pending = list(wls)
                while pending:
                    proc = None
                    current = None
                    try:
                        proc = ServerProcess(srv, proto, log_dir)
                        say(f"round {rep + 1}/{s.reps}: {srv.name} ({proto}) on {proc.addr}, pid {proc.proc.pid}")
                        while pending:
                            current = pending[0]
                            runs.append(run_one(proc, srv, proto, current, rep, s))
                            pending.pop(0)
                    except BenchError as e:
                        say(f"error: {srv.name} ({proto}): {e}")
                        short = short_failure(str(e))
                        runs.append(
                            {
                                "server": srv.name,
                                "proto": proto,
                                "rep": rep,
                                "workload": current.name if current else None,
                                "error": str(e),
                            }
                        )
                        if current is None:
                            # It did not start: nothing of this protocol runs this round.
                            for wl in pending:
                                failures.setdefault((srv.name, wl.name), short)
                            pending = []
                        else:
                            # Go on with the next workload on a fresh server.
                            failures.setdefault((srv.name, current.name), short)
                            pending.pop(0)
                    finally:
                        if proc is not None:
                            proc.stop()

    paired = paired_goals(servers, workloads, runnable, s, log_dir)
    summary = summarize(runs)
    meta = {
        "started": started.isoformat(timespec="seconds"),
        "quick": s.quick,
        "duration_s": s.duration,
        "warmup_s": s.warmup,
        "reps": s.reps,
        "pair_rounds": s.pair_rounds,
        "server_cpu": SERVER_CPU,
        "client_cpu": CLIENT_CPU,
        "loadavg_limit": LOADAVG_LIMIT,
        "other_cpu_limit_percent": OTHER_CPU_LIMIT,
        "host": host_info(),
        "commit": git_commit(),
        "servers": [{"name": x.name, "description": x.description, "kind": x.kind} for x in servers],
        "workloads": [
            {"name": w.name, "title": w.title, "proto": w.proto, "metric": w.metric, "tool": w.tool} for w in workloads
        ],
        "peer_status": status,
        "failures": {f"{k[0]}/{k[1]}": v for k, v in failures.items()},
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    out_json = RESULTS / f"{stamp}.json"
    out_json.write_text(json.dumps({"meta": meta, "summary": summary, "paired": paired, "runs": runs}, indent=2) + "\n")
    shutil.copyfile(out_json, CHART_INPUT)
    table = markdown(meta, summary, servers, workloads, failures, paired=paired)
    (RESULTS / "latest.md").write_text(table)
    (RESULTS / "latest-brief.md").write_text(markdown(meta, summary, servers, workloads, failures, True, paired))
    png = RESULTS / f"{stamp}.png"
    chart(png, summary, servers, workloads)
    if png.exists():
        shutil.copyfile(png, RESULTS / "latest.png")
    print()
    print(table)
    say(f"wrote {out_json.relative_to(ROOT)} and {(RESULTS / 'latest.md').relative_to(ROOT)}")
    wall = (dt.datetime.now() - started).total_seconds()
    say(f"measured in {wall / 60:.1f} min")
    # A peer that fails is a row of the table; a UCall or reference server that fails is an error.
    kinds = {x.name: x.kind for x in servers}
    failed = [r for r in runs if "error" in r and kinds.get(r["server"]) != "peer"]
    return 1 if failed else 0


def short_failure(error: str) -> str:
    """A table cell's worth of a BenchError."""
    if "sent no reply" in error:
        return "failed: no reply (hangs)"
    m = re.search(r"exited \((-?\d+)\)", error)
    if m:
        code = int(m.group(1))
        if code < 0:
            return f"failed: crashed (signal {-code})"
        # The server's own last words, when it printed any.
        said = [line.strip() for line in error.split("before listening:", 1)[-1].splitlines() if line.strip()]
        why = said[-1].removeprefix("error: ") if "before listening:" in error and said else ""
        return f"failed: exited ({code})" + (f": {why[:100]}" if why else "")
    if "no 'listening on' line" in error:
        return "failed: did not start"
    return "failed: " + error.strip().splitlines()[0][:80]


def run_one(proc: ServerProcess, srv: Server, proto: str, wl: Workload, rep: int, s: Settings) -> dict:
    load = loadavg()
    t0, (busy0, steal0), server0, client0 = time.monotonic(), cpu_stat(), proc.cpu_seconds(), children_cpu()
    if wl.tool == "wrk":
        result = run_wrk(proc.addr, wl, s)
    else:
        ep = srv.endpoints[proto]
        if ep.dialect == "grpc":
            result = run_grpc_load(proc.addr, wl, s)
        else:
            result = run_ucall_load(proc.addr, wl, ep, s)
    t1, (busy1, steal1), server1, client1 = time.monotonic(), cpu_stat(), proc.cpu_seconds(), children_cpu()
    if proc.proc.poll() is not None:
        raise BenchError(f"{proc.name} exited ({proc.proc.returncode}) during {wl.name}")
    if not result["requests"]:
        raise BenchError(f"{proc.name} sent no reply in {wl.name} ({s.warmup + s.duration:g} s): it hangs")
    # These cover the whole load run, warm-up included.
    wall = t1 - t0
    server = server1 - server0 if server0 is not None and server1 is not None else None
    result["server_cpu_percent"] = 100 * server / wall if server is not None else None
    other = (busy1 - busy0) - (server or 0.0) - (client1 - client0)
    result["other_cpu_percent"] = max(0.0, 100 * other / wall)
    result["steal_percent"] = 100 * (steal1 - steal0) / wall
    disturbed = load > LOADAVG_LIMIT or result["other_cpu_percent"] > OTHER_CPU_LIMIT
    key, _ = METRICS[wl.metric]
    flag = (
        f"  DISTURBED (load average {load:.2f}, other processes {result['other_cpu_percent']:.0f} % CPU)"
        if disturbed
        else ""
    )
    errs = f", {result['errors']} errors" if result.get("errors") else ""
    say(
        f"  {wl.name:<24} {fmt_value(wl.metric, result.get(key)):>12} {wl.metric}"
        f"  (p50 {fmt_opt(result.get('latency_p50_us'), '.1f')} µs, {result['requests_per_s']:,.0f} req/s{errs}){flag}"
    )
    return {
        "server": srv.name,
        "workload": wl.name,
        "proto": proto,
        "tool": wl.tool,
        "rep": rep,
        "loadavg_before": load,
        "disturbed": disturbed,
        "result": result,
    }


if __name__ == "__main__":
    sys.exit(main())
