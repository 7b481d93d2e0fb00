# SPDX-License-Identifier: Apache-2.0
"""The binary section of `make bench`: large and small echoes side by side in one run.

    python -m ucallbench binary [--quick] [--seconds 3] [--rounds 3] [--rss-calls 10000]
                                [--in-flight 4] [--sizes "1.6 MB,16 KB"] [--only floor,ucall,...]
                                [--no-clients] [--no-callgrind] [--append FILE] [--json FILE]

Workloads: the echo of a float32 array of 1.6 MB (392 x 1024) and of 16 KB (4,096), the
server on CPU 0 (`taskset`) and ucall-load on CPU 1. Every row runs with one connection
and one call in flight (latency bound: the server waits for the client as much as the
client for it); the 1.6 MB rows the calls/s goals compare (the floor, UCall's numpy binary
echo, grpcio, FastAPI) run again *saturated*, with `--in-flight` connections each keeping
one call in flight, so that the server's core, not the round trip, limits calls/s (the
server's and the load generator's share of their cores are in the table to show which
one did). In the same run, rounds interleaved, the same bytes go to:

- the floor: `benches/reference/epoll_echo.c` over raw TCP, echoing a body of the binary
  message's length (one read, one write back: no parsing);
- UCall's Python server (`ucall serve`, one thread), over HTTP: `echo_bytes(data: bytes)`
  and `echo_array(x: numpy.ndarray)`, each as plain JSON (base64; the array as a base64
  `.npy`) and as a binary message (docs/wire.md), which asks for a binary reply
  (`Accept`); a server without binary replies answers in JSON, and the row says which;
- grpcio's asyncio server (`benches/peers/grpc_app.py`, its `Echo` of raw bytes), loaded by
  ucall-load-grpc (the stubs generated on demand, benches/peers/grpc_stubs.py);
- FastAPI on uvicorn (`benches/peers/fastapi_app.py`, `POST /echo` of a base64 string).

Figures per row: calls/s, p50 latency, the server process's CPU time (user + system, all
its threads) per call, and the share of one core the server and the load generator used;
medians over the rounds. The JSON/base64 goal (a numpy echo costs no more than a bytes
one) is judged on what the host's drift cannot move, the instructions each call costs the
Python server (callgrind, `benches/callgrind.py --numpy-json`, in the same run): the two
are level, numpy's within `LEVEL` of bytes' (the bound the issue sets for 'unchanged').
Their CPU time is shown beside it, from pairs of slices in which the two alternate on one
server, `PAIRS` a round (`measure_pairs`), and from the rows; seconds apart, it moves by a
few % either way from run to run. After the rounds, the Python server's
resident set over `--rss-calls` binary echoes of the 1.6 MB array, and (unless
`--no-clients` or `--quick`) the client side: `benches/client_bench.py`'s large workload
for `AsyncClient`, a raw socket moving the same bytes, and grpcio's client. The goals
(`GOALS`) are the binary payloads issue's.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import random
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from array import array
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ucallbench import build as builder
from ucallbench.config import BENCH_DIR, CLIENT_CPU, GRPC_LOAD_BIN, LOAD_BIN, ROOT, SERVER_CPU
from ucallbench.processes import BenchError, ServerProcess, children_cpu
from ucallbench.servers import SERVERS, Endpoint, Server

BINARY_TYPE = "application/vnd.ucall.binary"
ALIGN = 64
#: (label, shape): 1.6 MB and 16 KB of float32.
SIZES = {"1.6 MB": (392, 1024), "16 KB": (4096,)}
RSS_GOAL = 0.05
#: Calls in flight of the saturated rows: where the server's core is the limit, not the
#: load generator's (measured on the 2-core host: see docs/benchmarks.md).
IN_FLIGHT = 4
#: The rows measured saturated too: what the calls/s goals compare.
SATURATED_SIZE = "1.6 MB"
FLOOR, GRPC, FASTAPI = "floor: epoll_echo.c, raw TCP", "grpcio (asyncio), raw bytes", "FastAPI (uvicorn), base64 JSON"
NUMPY_BINARY, BYTES_BINARY = "UCall (Python), numpy, binary message", "UCall (Python), bytes, binary message"
NUMPY_JSON, BYTES_JSON = "UCall (Python), numpy, JSON/base64 .npy", "UCall (Python), bytes, JSON/base64"
SATURATED = (FLOOR, NUMPY_BINARY, GRPC, FASTAPI)
#: Pairs of slices per round in which the 1.6 MB JSON/base64 numpy and bytes rows
#: alternate on one server (`measure_pairs`).
PAIRS = 4
#: How far above bytes' a numpy call's instructions may be and still count as level.
LEVEL = 0.01


def float32s(shape: tuple[int, ...]) -> bytes:
    """A float32 array's bytes (little-endian), from a fixed seed."""
    count = 1
    for n in shape:
        count *= n
    rng = random.Random(7)
    values = array("f", (rng.uniform(-1, 1) for _ in range(count)))
    if sys.byteorder != "little":
        values.byteswap()
    return values.tobytes()


def npy(data: bytes, shape: tuple[int, ...]) -> bytes:
    """`data` as a .npy file (format 1.0) of a little-endian float32 array of `shape`."""
    dims = "".join(f"{n}, " for n in shape) if len(shape) == 1 else ", ".join(map(str, shape))
    header = f"{{'descr': '<f4', 'fortran_order': False, 'shape': ({dims}), }}"
    # Magic (6) + version (2) + length (2) + header, padded with spaces to 64, ends in '\n'.
    header += " " * ((-(10 + len(header) + 1)) % ALIGN) + "\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode() + data


def jsonrpc(method: str, params: dict[str, Any]) -> bytes:
    return json.dumps({"jsonrpc": "2.0", "method": method, "params": params, "id": 1}, separators=(",", ":")).encode()


def binary_message(method: str, name: str, placeholder: dict[str, Any], data: bytes) -> tuple[bytes, int]:
    """A binary message (docs/wire.md §1) calling `method` with param `name` as the
    attachment `data`; its body and the JSON text's length."""
    text = jsonrpc(method, {name: {"$ucall": placeholder.pop("kind"), "offset": 0, "length": len(data), **placeholder}})
    padding = b"\0" * ((-len(text)) % ALIGN)
    return text + padding + data, len(text)


@dataclass(frozen=True)
class Request:
    """One row's request: what ucall-load (or ucall-load-grpc) sends, and to whom."""

    server: str  # a key of SERVERS
    label: str
    body: bytes
    headers: tuple[str, ...] = ()
    path: str = "/"
    proto: str = "http"
    expect: str | None = '"result"'
    in_flight: int = 1  # connections, each with one call in flight


def requests(size: str, in_flight: int = IN_FLIGHT) -> list[Request]:
    """The rows of `size`: each request with one call in flight, and the saturated ones
    (`SATURATED`, at `SATURATED_SIZE`) again with `in_flight`."""
    shape = SIZES[size]
    data = float32s(shape)
    b64 = base64.b64encode(data).decode()
    b64_npy = base64.b64encode(npy(data, shape)).decode()
    binary_bytes, j_bytes = binary_message("echo_bytes", "data", {"kind": "bytes"}, data)
    array_placeholder = {"kind": "ndarray", "dtype": "float32", "shape": list(shape)}
    binary_array, j_array = binary_message("echo_array", "x", array_placeholder, data)
    accept = f"Accept: {BINARY_TYPE}, application/json"

    def binary(j: int) -> tuple[str, ...]:
        return (f"Content-Type: {BINARY_TYPE}", f"UCall-JSON-Length: {j}", accept)

    # The floor echoes a line of the binary message's length (raw TCP frames by newline).
    floor = binary_array.replace(b"\n", b"\x0b")
    one = [
        Request("floor", FLOOR, floor, proto="tcp", expect=None),
        Request("ucall", BYTES_BINARY, binary_bytes, binary(j_bytes)),
        Request("ucall", NUMPY_BINARY, binary_array, binary(j_array)),
        Request("ucall", BYTES_JSON, jsonrpc("echo_bytes", {"data": b64})),
        Request("ucall", NUMPY_JSON, jsonrpc("echo_array", {"x": b64_npy})),
        Request("grpcio", GRPC, json.dumps({"data": b64}).encode(), proto="grpc"),
        # FastAPI answers the bare string: its tail must come back.
        Request("fastapi", FASTAPI, json.dumps({"data": b64}).encode(), path="/echo", expect=b64[-16:]),
    ]
    if size != SATURATED_SIZE or in_flight <= 1:
        return one
    return one + [replace(r, in_flight=in_flight) for r in one if r.label in SATURATED]


# ---------------------------------------------------------------- servers


#: A row's key: (size, label, calls in flight).
Key = tuple[str, str, int]


@dataclass
class Row:
    size: str
    label: str
    calls_per_s: list[float] = field(default_factory=list)
    p50_us: list[float] = field(default_factory=list)
    cpu_us: list[float] = field(default_factory=list)
    in_flight: int = 1
    server_core: list[float] = field(default_factory=list)  # % of one core, the server's
    load_core: list[float] = field(default_factory=list)  # % of one core, the load generator's
    errors: int = 0
    replies: str = ""  # the reply's Content-Type, for the UCall binary rows
    failure: str | None = None

    def median(self, what: str) -> float | None:
        values = getattr(self, what)
        return statistics.median(values) if values else None


#: The servers of the section: the floor and the peers from the main table, and UCall's
#: Python server with a numpy echo (benches/ucall_binary_app.py).
UCALL = Server(
    name="ucall-python-binary",
    description="UCall Python API, benches/ucall_binary_app.py, 1 thread, poll engine",
    endpoints={"http": Endpoint((".venv/bin/python", "benches/ucall_binary_app.py", "--engine", "poll"))},
)
PROCESSES = {"floor": ("c-reference", "tcp"), "grpcio": ("grpcio-asyncio", "http"), "fastapi": ("fastapi-rest", "http")}


KEYS = ("floor", "ucall", *PROCESSES)


def server_of(key: str) -> tuple[Server, str]:
    if key == "ucall":
        return UCALL, "http"
    name, proto = PROCESSES[key]
    return next(s for s in SERVERS if s.name == name), proto


def build(build: bool = True) -> dict[str, str]:
    """The floor, the load generators and the peers, when missing (with `build`); why each
    server that cannot run here cannot."""
    chosen = [server_of(key)[0] for key in ("floor", "grpcio", "fastapi", "ucall")]
    # Built already (make bench builds first): no cargo run, which waits for other builds' lock.
    if build and not (LOAD_BIN.exists() and (BENCH_DIR / "epoll_echo").exists()):
        builder.build([chosen[0]])
    if build and not GRPC_LOAD_BIN.exists():
        builder.build_grpc(chosen)
    if build:
        builder.setup_peers(chosen)
    if not (BENCH_DIR / "epoll_echo").exists() or not LOAD_BIN.exists():
        raise BenchError("target/bench/epoll_echo and ucall-load are needed: run without --no-build")
    status = builder.peer_status()
    why = {}
    for key in ("floor", "grpcio", "fastapi"):
        reason = builder.not_runnable(server_of(key)[0], status)
        if reason:
            why[key] = reason
    return why


def load(request: Request, port: int, body: Path, seconds: float, warmup: float) -> dict[str, Any]:
    """The load generator's report for `request` on 127.0.0.1:`port`, with the CPU seconds
    it used (`load_cpu_s`)."""
    pin = ["taskset", "-c", str(CLIENT_CPU)]
    timing = ["--duration", str(seconds), "--warmup", str(warmup), "--connections", str(request.in_flight), "--json"]
    if request.proto == "grpc":
        command = [*pin, str(GRPC_LOAD_BIN), "--addr", f"127.0.0.1:{port}", "--method", "echo", "--params", str(body)]
    else:
        command = [*pin, str(LOAD_BIN), "--addr", f"127.0.0.1:{port}", "--proto", request.proto, "--body", str(body)]
        if request.proto == "http":
            command += ["--path", request.path]
        for header in request.headers:
            command += ["--header", header]
        if request.expect:
            command += ["--expect", request.expect]
    before = children_cpu()
    run = subprocess.run([*command, *timing], capture_output=True, text=True, timeout=seconds + warmup + 120)
    if run.returncode != 0:
        raise RuntimeError(f"{Path(command[3]).name} failed: {run.stderr.strip()[-300:]}")
    report: dict[str, Any] = json.loads(run.stdout)
    report["load_cpu_s"] = children_cpu() - before
    return report


def p50_us(report: dict[str, Any]) -> float | None:
    latency = report.get("latency_us") or report.get("latency") or {}
    value = latency.get("p50") if isinstance(latency, dict) else None
    return float(value) if value is not None else None


def reply_type(port: int, request: Request) -> str:
    """The Content-Type of the reply to one `request` (a binary message or JSON)."""
    import http.client

    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        headers = dict(header.split(": ", 1) for header in request.headers)
        headers.setdefault("Content-Type", "application/json")
        connection.request("POST", request.path, request.body, headers)
        response = connection.getresponse()
        response.read()
        return response.getheader("Content-Type", "?").split(";")[0]
    finally:
        connection.close()


def measure_round(
    rows: dict[Key, Row], pairs: list[float], folder: Path, seconds: float, warmup: float, why: dict[str, str]
) -> None:
    """One round: each server started once, every row of it measured at both sizes."""
    by_server: dict[str, list[tuple[str, Request, Path]]] = {}
    for size, chosen in REQUESTS.items():
        for index, request in enumerate(chosen):
            body = folder / f"body-{size.replace(' ', '')}-{index}"
            by_server.setdefault(request.server, []).append((size, request, body))
    servers = list(by_server)
    random.shuffle(servers)  # drift on a shared host spreads over every server
    for key in servers:
        if key in why:
            for size, request, _ in by_server[key]:
                rows[(size, request.label, request.in_flight)].failure = why[key]
            continue
        server, proto = server_of(key)
        try:
            process = ServerProcess(server, proto, BENCH_DIR / "logs" / "binary")
        except BenchError as error:
            for size, request, _ in by_server[key]:
                rows[(size, request.label, request.in_flight)].failure = f"did not start: {str(error)[-200:]}"
            continue
        try:
            port = int(process.addr.rsplit(":", 1)[1])
            # Rows of one server in a new order each round too: a row measured right after
            # another one inherits its state (the allocator's, the caches'), and the ratios
            # the goals judge compare rows of one server.
            random.shuffle(by_server[key])
            for size, request, body in by_server[key]:
                measure_row(rows[(size, request.label, request.in_flight)], process, port, request, body, seconds, warmup)
            if key == "ucall":
                chosen = {r.label: (r, body) for size, r, body in by_server[key] if size == "1.6 MB" and r.in_flight == 1}
                if NUMPY_JSON in chosen and BYTES_JSON in chosen:
                    measure_pairs(pairs, process, port, chosen[NUMPY_JSON], chosen[BYTES_JSON], seconds)
        finally:
            process.stop()


def measure_row(
    row: Row, process: ServerProcess, port: int, request: Request, body: Path, seconds: float, warmup: float
) -> None:
    try:
        before = process.cpu_seconds() or 0.0
        report = load(request, port, body, seconds, warmup)
        used = (process.cpu_seconds() or 0.0) - before
    except (RuntimeError, subprocess.TimeoutExpired, ValueError) as error:
        row.failure = str(error)
        return
    row.calls_per_s.append(report["calls_per_s"])
    if (p50 := p50_us(report)) is not None:
        row.p50_us.append(p50)
    row.errors += int(report.get("errors", 0))
    # The warm-up's CPU is in `used` too: its calls count at the measured rate.
    calls = report["calls_per_s"] * (seconds + warmup)
    if calls:
        row.cpu_us.append(used / calls * 1e6)
    row.server_core.append(used / (seconds + warmup) * 100)
    row.load_core.append(report["load_cpu_s"] / (seconds + warmup) * 100)
    if request.server == "ucall" and request.headers and not row.replies:
        row.replies = reply_type(port, request)


def measure_pairs(
    pairs: list[float],
    process: ServerProcess,
    port: int,
    numpy_json: tuple[Request, Path],
    bytes_json: tuple[Request, Path],
    seconds: float,
) -> None:
    """The ratio the JSON/base64 goal judges, numpy / bytes server CPU per 1.6 MB call,
    once per pair of slices of `seconds` in which the two alternate on one server
    (which goes first alternating too). Their costs are level to within 0.1 % in
    instructions (benches/callgrind.py --numpy-json), and the CPU of two rows measured
    seconds apart differs by the host's drift (a few % between rounds here): a pair's
    two slices share it."""
    for index in range(PAIRS):
        order = [numpy_json, bytes_json] if index % 2 == 0 else [bytes_json, numpy_json]
        cpu = {}
        for request, body in order:
            row = Row("1.6 MB", request.label)
            measure_row(row, process, port, request, body, seconds, 0.25)
            if row.cpu_us and not row.errors:
                cpu[request.label] = row.cpu_us[0]
        if NUMPY_JSON in cpu and BYTES_JSON in cpu:
            pairs.append(cpu[NUMPY_JSON] / cpu[BYTES_JSON])


REQUESTS: dict[str, list[Request]] = {}


# ---------------------------------------------------------------- memory, clients


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def rss_over_calls(folder: Path, calls: int) -> dict[str, Any]:
    """The Python server's RSS while it answers `calls` binary echoes of the 1.6 MB array,
    read after every second of load: when a tenth of them are answered (warm), and the
    highest of the last two readings."""
    request = next(r for r in REQUESTS["1.6 MB"] if r.label == NUMPY_BINARY and r.in_flight == 1)
    body = folder / "rss-body"
    body.write_bytes(request.body)
    process = ServerProcess(UCALL, "http", BENCH_DIR / "logs" / "binary")
    readings: list[tuple[int, int]] = []
    answered = errors = 0
    try:
        port = int(process.addr.rsplit(":", 1)[1])
        deadline = time.monotonic() + 600
        while answered < calls and time.monotonic() < deadline:
            report = load(request, port, body, 1.0, 0)
            answered += round(report["calls_per_s"] * 1.0)
            errors += int(report.get("errors", 0))
            readings.append((answered, rss_kib(process.proc.pid)))
    finally:
        process.stop()
    warm = next((kib for n, kib in readings if n >= calls // 10), readings[0][1])
    last = max(kib for _, kib in readings[-2:])
    growth = last / warm - 1 if warm else None
    return {"calls": answered, "errors": errors, "warm_kib": warm, "last_kib": last, "growth": growth}


def client_figures(samples: int) -> dict[str, Any]:
    """benches/client_bench.py's large workload for AsyncClient (binary messages, and
    JSON/base64), the socket floor moving each one's bytes, and grpcio."""
    command = [sys.executable, str(ROOT / "benches/client_bench.py"), "--workloads", "large"]
    clients = "python-async-binary,socket-floor-binary,python-async,socket-floor,grpcio-asyncio"
    command += ["--only", clients, "--samples", str(samples)]
    run = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=1800)
    if run.returncode != 0:
        return {"error": run.stderr.strip()[-300:]}
    try:
        return json.loads((BENCH_DIR / "client.json").read_text()).get("large", {})  # type: ignore[no-any-return]
    except (OSError, ValueError) as error:
        return {"error": str(error)}


def count_instructions() -> tuple[float, float] | None:
    """Instructions per call of the Python server's 1.6 MB JSON/base64 echoes, numpy's and
    bytes', under callgrind (benches/callgrind.py); None without valgrind."""
    if not (shutil.which("valgrind") and shutil.which("callgrind_control")):
        print("binary: no valgrind, the JSON/base64 instructions are not counted", file=sys.stderr)
        return None
    import callgrind  # benches/callgrind.py (benches/ is on the path, as for ucallbench)

    print("binary: counting the JSON/base64 echoes' instructions (callgrind, about a minute)", file=sys.stderr)
    per_call = {}
    with tempfile.TemporaryDirectory(prefix="ucall-callgrind-") as tmp:
        for kind, (request, expect) in zip(("bytes", "numpy"), callgrind.numpy_json_workloads(1_600_000)):
            count = 20
            total = callgrind.counted_span(callgrind.SERVERS["python"], request, 5, count, expect, Path(tmp))
            per_call[kind] = total / count
    return per_call["numpy"], per_call["bytes"]


# ---------------------------------------------------------------- goals, report


@dataclass(frozen=True)
class Goal:
    text: str
    value: float | None
    bound: float
    at_least: bool
    judged: bool = True  # False: shown beside the judged figure, for comparison
    digits: int = 2  # shown after the point

    @property
    def met(self) -> bool | None:
        if self.value is None or not self.judged:
            return None
        return self.value >= self.bound if self.at_least else self.value <= self.bound


def ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def goals(
    rows: dict[Key, Row],
    pairs: list[float],
    rss: dict[str, Any] | None,
    clients: dict[str, Any] | None,
    instructions: tuple[float, float] | None = None,
) -> list[Goal]:
    """The issue's goals from the figures; `instructions`: a numpy and a bytes 1.6 MB
    JSON/base64 echo's, per call (`count_instructions`)."""
    def get(label: str, what: str, in_flight: int = 1) -> float | None:
        row = rows.get(("1.6 MB", label, in_flight))
        return row.median(what) if row is not None and not row.errors else None

    # (goal, row measured, row it is compared with, figure, bound, whether the bound is a floor)
    per_call = (
        ("server CPU per 1.6 MB call, numpy binary / floor", NUMPY_BINARY, FLOOR, "cpu_us", 1.5, False),
        ("server CPU per 1.6 MB call, bytes binary / floor", BYTES_BINARY, FLOOR, "cpu_us", 1.5, False),
    )
    out = [
        Goal(text, ratio(get(measured, what), get(reference, what)), bound, at_least)
        for text, measured, reference, what, bound, at_least in per_call
    ]
    # Judged on instructions (callgrind); the CPU time of the pairs (`measure_pairs`) and of
    # the rows, which the host's drift moves by more than the two differ, beside them.
    level = ratio(*instructions) if instructions else None
    out.append(
        Goal("instructions per 1.6 MB call, JSON/base64: numpy / bytes (callgrind)", level, 1 + LEVEL, False, digits=4)
    )
    paired = statistics.median(pairs) if pairs else None
    json_goal = "server CPU per 1.6 MB call, JSON/base64: numpy / bytes"
    out.append(Goal(f"{json_goal}, median of {len(pairs)} alternated pairs", paired, 1.0, False, judged=False, digits=3))
    rows_ratio = ratio(get(NUMPY_JSON, "cpu_us"), get(BYTES_JSON, "cpu_us"))
    out.append(Goal(f"{json_goal}, the rows' medians", rows_ratio, 1.0, False, judged=False, digits=3))
    # calls/s is what a server does with its core busy: judged on the saturated rows when
    # the run has them; one call in flight (latency bound) is shown beside them.
    saturated = max((k for size, _, k in rows if size == SATURATED_SIZE), default=1)
    for reference, name, bound in ((FLOOR, "floor", 0.8), (GRPC, "grpcio", 3.0), (FASTAPI, "FastAPI", 10.0)):
        for k in sorted({1, saturated}, reverse=True):
            how = "one call in flight (latency bound)" if k == 1 else f"saturated, {k} in flight"
            value = ratio(get(NUMPY_BINARY, "calls_per_s", k), get(reference, "calls_per_s", k))
            out.append(Goal(f"1.6 MB calls/s, {how}: numpy binary / {name}", value, bound, True, k == saturated))
    if clients is not None and "error" not in clients:

        def client_cpu(name: str) -> float | None:
            figures = clients.get(name) or {}
            return figures.get("cpu_us_per_call") if "error" not in figures else None

        mine = client_cpu("python-async-binary")
        for text, reference, bound in (
            ("client CPU per 1.6 MB call, AsyncClient binary / raw socket moving its bytes", "socket-floor-binary", 1.5),
            ("client CPU per 1.6 MB call, AsyncClient binary / grpcio", "grpcio-asyncio", 0.25),
        ):
            out.append(Goal(text, ratio(mine, client_cpu(reference)), bound, False))
    if rss is not None:
        out.append(
            Goal(f"RSS growth over {rss['calls']:,} numpy binary 1.6 MB calls", rss.get("growth"), RSS_GOAL, False)
        )
    return out


def report(
    rows: dict[Key, Row],
    pairs: list[float],
    rss: dict[str, Any] | None,
    clients: dict[str, Any] | None,
    settings: str,
    instructions: tuple[float, float] | None = None,
) -> str:
    lines = [
        "## Binary payloads",
        "",
        f"Echo of a float32 array; server on CPU {SERVER_CPU}, load on CPU {CLIENT_CPU}; medians of {settings} "
        "(`python -m ucallbench binary`). *in flight*: connections, each with one call in flight; 1 is "
        "latency bound (each side waits for the other), more is *saturated*. CPU is the server process's "
        "(user + system, all threads) per call; *server core* and *load core*: the share of one core the "
        "server and the load generator used (the one near 100 % is the limit). *reply*: what the UCall server "
        "answered a binary message with.",
        "",
        "| size | in flight | server, request | calls/s | p50 µs | server CPU µs/call | server core | load core "
        "| reply | errors |",
        "|---|---:|---|---:|---:|---:|---:|---:|---|---:|",
    ]
    for (size, label, in_flight), row in rows.items():
        if row.failure and not row.calls_per_s:
            lines.append(f"| {size} | {in_flight} | {label} | — | — | — | — | — | | {row.failure} |")
            continue
        figures = [row.median(what) for what in ("calls_per_s", "p50_us", "cpu_us", "server_core", "load_core")]
        shown = ["—" if value is None else f"{value:,.0f}" for value in figures]
        shown[3:] = ["—" if value is None else f"{value:.0f} %" for value in figures[3:]]
        lines.append(f"| {size} | {in_flight} | {label} | {' | '.join(shown)} | {row.replies} | {row.errors} |")
    if clients is not None:
        lines += [
            "",
            "Client side (benches/client_bench.py, large: a 1.6 MB uint8 array, 100 calls gathered per sample):",
            "",
        ]
        if "error" in clients:
            lines.append(f"- not measured: {clients['error']}")
        for name in ("python-async-binary", "socket-floor-binary", "python-async", "socket-floor", "grpcio-asyncio"):
            figures = clients.get(name)
            if isinstance(figures, dict) and "cpu_us_per_call" in figures:
                lines.append(f"- {name}: {figures['cpu_us_per_call']:,.0f} µs of client CPU per call")
    if rss is not None:
        lines += [
            "",
            f"Memory: the Python server's RSS {rss['warm_kib'] / 1024:,.1f} MiB warm, "
            f"{rss['last_kib'] / 1024:,.1f} MiB after {rss['calls']:,} numpy binary 1.6 MB echoes.",
        ]
    if instructions:
        lines += [
            "",
            "JSON/base64 1.6 MB echo, the Python server's instructions per call (callgrind, poll engine): "
            f"numpy {instructions[0]:,.0f}, bytes {instructions[1]:,.0f}.",
        ]
    if pairs:
        shown = ", ".join(f"{r:.3f}" for r in sorted(pairs))
        lines += ["", f"JSON/base64 numpy / bytes, server CPU per 1.6 MB call in pairs of alternated slices: {shown}."]
    lines += ["", "| goal | figure | bound | met |", "|---|---:|---:|---|"]
    for goal in goals(rows, pairs, rss, clients, instructions):
        value = "—" if goal.value is None else f"{goal.value:.{goal.digits}f}"
        met = {True: "yes", False: "**no**", None: "not measured"}[goal.met] if goal.judged else "(not judged)"
        bound = f"{'≥' if goal.at_least else '≤'} {goal.bound:g}"
        lines.append(f"| {goal.text} | {value} | {bound} | {met} |")
    lines.append(
        "| small calls (`sum`): instructions per request within 1 % | benches/callgrind.py | ≤ 1 % | see *Instructions per call* |"
    )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m ucallbench binary", description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="one round of 1 s rows, 1,000 calls for RSS, no clients")
    ap.add_argument("--seconds", type=float, default=3.0, help="measured seconds per row")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--rss-calls", type=int, default=10_000, help="0: no RSS measurement")
    ap.add_argument(
        "--in-flight", type=int, default=IN_FLIGHT, help="connections of the saturated rows (1: none of them)"
    )
    ap.add_argument("--sizes", default=",".join(SIZES), help=f"of {', '.join(SIZES)} (comma-separated)")
    ap.add_argument("--only", default="", help="of floor, ucall, grpcio, fastapi (comma-separated): these servers")
    ap.add_argument("--no-clients", action="store_true", help="leave out the client side (benches/client_bench.py)")
    ap.add_argument("--client-samples", type=int, default=5)
    ap.add_argument(
        "--no-callgrind", action="store_true", help="leave out the JSON/base64 instruction counts (valgrind)"
    )
    ap.add_argument(
        "--no-build", action="store_true", help="build and install nothing; rows that miss something say so"
    )
    ap.add_argument("--append", type=Path, help="append the section to this Markdown file")
    ap.add_argument("--json", type=Path, help="also write the figures here")
    args = ap.parse_args(argv)
    seconds, warmup, rounds = (1.0, 0.25, 1) if args.quick else (args.seconds, 0.5, args.rounds)
    rss_calls = 1_000 if args.quick else args.rss_calls
    sizes = [size.strip() for size in args.sizes.split(",") if size.strip()]
    servers = [key.strip() for key in args.only.split(",") if key.strip()] or ["floor", "ucall", "grpcio", "fastapi"]
    unknown = [size for size in sizes if size not in SIZES] + [key for key in servers if key not in KEYS]
    if unknown:
        ap.error(f"unknown sizes or servers: {', '.join(unknown)}")
    why = build(not args.no_build)
    for size in sizes:
        REQUESTS[size] = [r for r in requests(size, args.in_flight) if r.server in servers]
    rows = {(size, r.label, r.in_flight): Row(size, r.label, in_flight=r.in_flight) for size in sizes for r in REQUESTS[size]}
    pairs: list[float] = []
    loads = [os.getloadavg()[0]]
    rss = None
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        for size in sizes:
            for index, request in enumerate(REQUESTS[size]):
                (folder / f"body-{size.replace(' ', '')}-{index}").write_bytes(request.body)
        for round_ in range(rounds):
            print(f"binary: round {round_ + 1} of {rounds}", file=sys.stderr, flush=True)
            measure_round(rows, pairs, folder, seconds, warmup, why)
            loads.append(os.getloadavg()[0])
        if rss_calls and "1.6 MB" in sizes and "ucall" in servers:
            rss = rss_over_calls(folder, rss_calls)
            loads.append(os.getloadavg()[0])
    instructions = None if args.quick or args.no_callgrind or "ucall" not in servers else count_instructions()
    clients = None if args.quick or args.no_clients else client_figures(args.client_samples)
    settings = f"{rounds} round{'s' if rounds > 1 else ''} of {seconds:g} s per row after {warmup:g} s of warm-up"
    settings += f", host load average {min(loads):.1f} to {max(loads):.1f} on {os.cpu_count()} cores"
    text = report(rows, pairs, rss, clients, settings, instructions)
    print(text)
    if args.append:
        with args.append.open("a") as out:
            out.write("\n" + text)
    if args.json:
        figures = {f"{size} / {label} / {k} in flight": row.__dict__ for (size, label, k), row in rows.items()}
        args.json.write_text(json.dumps({"rows": figures, "json_pairs": pairs, "json_instructions": instructions, "rss": rss, "clients": clients}, indent=2) + "\n")
    failed = [row for row in rows.values() if row.errors or (row.failure and not row.calls_per_s)]
    return 1 if failed else 0
