# SPDX-License-Identifier: Apache-2.0
"""Client benchmarks: gRPCClient2.jl's two workloads against one server core.

    python benches/client_bench.py [--samples N] [--only NAME,...] [--append FILE]
                                                    (make bench-client; make bench appends its table)

* smol: 1,000 echo calls of 16 bytes in flight per sample;
* large ("batch inference"): 100 echo calls of a 32x224x224 uint8 array (1.6 MB) per sample.

The UCall server is the Rust ``bench_server`` (``echo`` passes its ``data`` through), the
gRPC server grpcio's asyncio one (``benches/peers/grpc_app.py``, its ``Echo``), each
pinned to CPU 0; every client runs in a process of its own pinned to CPU 1, and reports
its calls/s and its CPU time per call (all its threads). Payloads travel as each protocol
carries bytes: base64 in JSON for UCall (``.npy`` for the array), raw for gRPC; every
client decodes the result back to bytes (or an array), except the C client, which gets
the result as JSON text. Clients:

* ``python-async``: ``AsyncClient``, the sample's calls gathered;
* ``python-async-binary``: the same with ``binary=True``: each array goes and comes back as
  an attachment of a binary message (docs/wire.md), not base64;
* ``python-pipeline``: ``Client.pipeline``; ``python-sequential``: ``Client`` one call at a time;
* ``python-pipeline-binary``, ``python-sequential-binary``: the same with ``binary=True``
  (binary messages on ``Client``'s one native connection);
* ``python-headers-binary``, ``python-traced-binary``, ``python-progress-binary``:
  ``Client`` one call at a time with ``binary=True`` by ``call_with_headers``, inside a
  trace over HTTP, or by ``call_with_progress`` (run only when named in ``--only``);
* ``python-async-headers-binary``, ``python-async-traced-binary``: ``AsyncClient`` with
  ``binary=True``, the sample's calls gathered, by ``call_with_headers`` or inside a trace
  over HTTP; ``python-pipeline-traced-binary``: ``Client.pipeline`` with ``binary=True``
  inside a trace (run only when named in ``--only``);
* ``rust``: ``ucall-client``'s ``Client::pipeline`` (``crates/ucall-client/examples/bench.rs``);
* ``c``: the C API's ``ucall_client_call``, one call at a time (``benches/client_bench.c``);
* ``grpcio-asyncio``: grpcio's asyncio client, the sample's calls gathered;
* ``httpx``: ``httpx.AsyncClient`` (HTTP/1.1, a pool of connections), calls gathered;
* ``socket-floor``: no client: the sample's HTTP requests, encoded once before timing, are
  written by one thread on a plain socket while another reads each reply's body into a
  buffer of its own (the sample's replies alive together, as a client's caller holds
  them; the buffers made once and used again every sample). What the transport alone
  costs a client process on this host, below which no client that sends and reads these
  bytes and hands out each reply can go;
* ``socket-floor-binary``: the same for the binary messages ``python-async-binary`` moves;
* ``socket-floor-binary-fresh``: the same, each reply's buffer allocated anew: not a floor
  (it pays the page faults of fresh memory each sample), shown for what that costs.

The Python workers' replies are checked against what was sent outside the clock, the same way
for all: the warm-up sample's and one more sample's after the timed ones.

Prints a table and the goals (``--append FILE`` adds them to a Markdown brief), and
writes ``target/bench/client.json``. Every process it starts is stopped by its PID.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from contextlib import nullcontext
from pathlib import Path
from typing import Awaitable

ROOT = Path(__file__).resolve().parent.parent
SERVER_CPU, CLIENT_CPU = 0, 1
OUT = ROOT / "target" / "bench"
PEERS_PY = ROOT / "benches" / ".venv-peers" / "bin" / "python"
GENERATED = OUT / "peers"
WORKLOADS = {"smol": (1000, 16), "large": (100, 32 * 224 * 224)}
UCALL_CLIENTS = [
    "python-async",
    "python-async-binary",
    "python-pipeline",
    "python-pipeline-binary",
    "python-sequential",
    "python-sequential-binary",
    "rust",
    "c",
    "httpx",
    "socket-floor",
    "socket-floor-binary",
    "socket-floor-binary-fresh",
]
CLIENTS = [*UCALL_CLIENTS, "grpcio-asyncio"]
#: Run only when named in --only: ``Client`` one call at a time, with binary=True, by
#: ``call_with_headers`` (a header of the call's own), inside a trace (its context as
#: header fields) or by ``call_with_progress``, each a path of its own through the client.
PATH_CLIENTS = [
    "python-headers-binary",
    "python-traced-binary",
    "python-progress-binary",
    "python-async-headers-binary",
    "python-async-traced-binary",
    "python-pipeline-traced-binary",
]
SHAPE = (32, 224, 224)


def payload(workload: str):
    """The sample's argument: 16 bytes, or the uint8 array."""
    import numpy as np

    rng = np.random.default_rng(7)
    if workload == "smol":
        return rng.integers(0, 256, 16, dtype=np.uint8).tobytes()
    return rng.integers(0, 256, SHAPE, dtype=np.uint8)


# ---------------------------------------------------------------------- workers


def run_samples(sample, samples: int, calls: int, verify) -> dict:
    """Time ``samples`` runs of ``sample``, which returns the sample's replies as a caller
    gets them (dropped at once, as a caller done with them). The replies are checked with
    ``verify`` outside the clock, the same way for every client: the warm-up sample's
    (connections open, caches warm) and one more after the timed ones, so a wrong reply
    fails the run without its check counting as the client's cost."""
    verify(sample())
    cpu, wall = time.process_time(), time.perf_counter()
    for _ in range(samples):
        sample()
    seconds, cpu_seconds = time.perf_counter() - wall, time.process_time() - cpu
    figures = {"calls": calls * samples, "seconds": seconds, "cpu_seconds": cpu_seconds}
    verify(sample())
    return figures


def check(result, sent) -> None:
    import numpy as np

    same = np.array_equal(result, sent) if isinstance(sent, np.ndarray) else result == sent
    if not same:
        raise SystemExit("the echo came back different")


def check_all(results, sent, calls: int) -> None:
    if len(results) != calls:
        raise SystemExit(f"{len(results)} replies to {calls} calls")
    for result in results:
        check(result, sent)


def traced_span():
    """A span to make current, as a caller inside a trace has one."""
    from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags

    return NonRecordingSpan(SpanContext(0x4BF92F3577B34DA6A3CE929D0E0E4736, 0xF067AA0BA902B7, True, TraceFlags(1)))


def worker_ucall(kind: str, port: int, workload: str, samples: int) -> dict:
    from ucall.client import AsyncClient, Client

    if "traced" in kind:
        from opentelemetry import trace

    calls, _ = WORKLOADS[workload]
    data = payload(workload)
    decode = (lambda r: r.bytes) if workload == "smol" else (lambda r: r.numpy)
    verify = lambda results: check_all(results, data, calls)  # noqa: E731
    if kind.startswith("python-async"):
        loop = asyncio.new_event_loop()
        client = AsyncClient(port=port, timeout=120, binary=True if kind.endswith("binary") else None)

        def one() -> Awaitable:
            if kind == "python-async-headers-binary":
                return client.call_with_headers("echo", {"data": data}, {"X-Request": "1"})
            return client.echo(data=data)

        async def gathered() -> list:
            with trace.use_span(traced_span()) if kind == "python-async-traced-binary" else nullcontext():
                replies = await asyncio.gather(*(one() for _ in range(calls)))
            return [decode(reply) for reply in replies]

        try:
            return run_samples(lambda: loop.run_until_complete(gathered()), samples, calls, verify)
        finally:
            loop.run_until_complete(client.close())
            loop.close()
    with Client(port=port, timeout=120, binary=True if kind.endswith("binary") else None) as client:
        if kind.startswith("python-pipeline"):

            def pipelined() -> list:
                with trace.use_span(traced_span()) if kind == "python-pipeline-traced-binary" else nullcontext():
                    return [decode(reply) for reply in client.pipeline([("echo", {"data": data})] * calls)]

            return run_samples(pipelined, samples, calls, verify)

        if kind == "python-headers-binary":

            def with_headers() -> list:
                return [decode(client.call_with_headers("echo", {"data": data}, {"X-Request": "1"})) for _ in range(calls)]

            return run_samples(with_headers, samples, calls, verify)
        if kind == "python-traced-binary":

            def traced() -> list:
                with trace.use_span(traced_span()):
                    return [decode(client.echo(data=data)) for _ in range(calls)]

            return run_samples(traced, samples, calls, verify)
        if kind == "python-progress-binary":

            def with_progress() -> list:
                return [decode(client.call_with_progress("echo", {"data": data}, lambda s, t: None)) for _ in range(calls)]

            return run_samples(with_progress, samples, calls, verify)

        def sequential() -> list:
            return [decode(client.echo(data=data)) for _ in range(calls)]

        return run_samples(sequential, samples, calls, verify)


def worker_httpx(port: int, workload: str, samples: int) -> dict:
    import httpx
    import numpy as np

    from ucall import _codec

    calls, _ = WORKLOADS[workload]
    data = payload(workload)
    text = base64.b64encode(data).decode() if workload == "smol" else _codec.pack_ndarray(data)
    loop = asyncio.new_event_loop()
    client = httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=120)

    async def gathered() -> list:
        async def one(i: int):
            body = {"jsonrpc": "2.0", "method": "echo", "params": {"data": text}, "id": i}
            reply = (await client.post("/", json=body)).json()
            raw = base64.b64decode(reply["result"])
            return raw if workload == "smol" else _codec.unpack_ndarray(raw)

        return await asyncio.gather(*(one(i) for i in range(calls)))

    try:
        verify = lambda results: check_all(results, data, calls)  # noqa: E731
        return run_samples(lambda: loop.run_until_complete(gathered()), samples, calls, verify)
    finally:
        loop.run_until_complete(client.aclose())
        loop.close()
        del np


def http_request(workload: str, binary: bool) -> bytes:
    """The bytes of one echo request: JSON with base64, or a binary message whose
    attachment is the array (docs/wire.md §3.1), as ``AsyncClient`` sends them."""
    from ucall import _codec
    from ucall._attachments import Attachments

    data = payload(workload)
    if binary:
        attachments = Attachments()
        params = {"data": attachments.pack(data)}
        text = json.dumps({"jsonrpc": "2.0", "method": "echo", "params": params, "id": 1}).encode()
        body = b"".join(bytes(memoryview(part).cast("B")) for part in attachments.body(text))
        head = (
            b"POST / HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: application/vnd.ucall.binary, application/json\r\n"
            b"Content-Type: application/vnd.ucall.binary\r\nUCall-JSON-Length: %d\r\nContent-Length: %d\r\n\r\n"
        )
        return head % (len(text), len(body)) + body
    text = base64.b64encode(data).decode() if workload == "smol" else _codec.pack_ndarray(data)
    body = json.dumps({"jsonrpc": "2.0", "method": "echo", "params": {"data": text}, "id": 1}).encode()
    head = b"POST / HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n"
    return head % len(body) + body


def worker_socket_floor(port: int, workload: str, samples: int, binary: bool = False, fresh: bool = False) -> dict:
    import threading

    import numpy as np

    calls, _ = WORKLOADS[workload]
    request = http_request(workload, binary)
    # Written a megabyte at a time, from one buffer: the bytes a client must send, and no
    # more memory than they fill.
    together = max(1, min(calls, (1 << 20) // len(request)))
    writes = [request * together] * (calls // together) + [request * (calls % together)]
    sock = socket.create_connection(("127.0.0.1", port))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    # Heads are read through a room as large as ucall-client's (READ_ROOM); each reply's
    # body straight from the socket into a buffer of its own, the sample's bodies alive
    # together, as a client that hands every reply to its caller must keep them. The floor
    # takes the i-th reply's buffer from a set made once and used again every sample (the
    # caller is done with a sample's replies before the next); `fresh` makes each one anew
    # (np.empty: malloc'd, not zeroed), paying the page faults of fresh memory.
    room = bytearray(64 << 10)
    view = memoryview(room)
    kept: list = []

    def buffer(i: int, length: int):
        if fresh:
            return np.empty(length, np.uint8)
        if i == len(kept):
            kept.append(np.empty(length, np.uint8))
        if len(kept[i]) < length:
            kept[i] = np.empty(length, np.uint8)
        return kept[i][:length]

    def write() -> None:
        for chunk in writes:
            sock.sendall(chunk)

    def receive(into: memoryview) -> int:
        n = sock.recv_into(into)
        if not n:
            raise SystemExit("the server closed the connection")
        return n

    def sample() -> list:
        writer = threading.Thread(target=write)
        writer.start()
        bodies: list = []
        have = start = 0
        while len(bodies) < calls:
            have += receive(view[have:])
            while (end := room.find(b"\r\n\r\n", start, have)) >= 0:
                if not room.startswith(b"HTTP/1.1 200 ", start):
                    raise SystemExit(f"the server answered {bytes(room[start:end])[:80]!r}")
                at = room.find(b"Content-Length:", start, end) + len(b"Content-Length:")
                length = int(room[at : room.find(b"\r\n", at)])
                body = buffer(len(bodies), length)
                into = memoryview(body)
                begin = end + 4
                filled = min(length, have - begin)
                into[:filled] = view[begin : begin + filled]
                while filled < length:
                    filled += receive(into[filled:])
                bodies.append(body)
                start = begin + length
                if start >= have:
                    have = start = 0
                    break
            if start == have:
                have = start = 0
            elif have > len(room) // 2:
                room[: have - start] = room[start:have]
                have, start = have - start, 0
        writer.join()
        return bodies

    # A reply carries the sent bytes: the array as an attachment, or its JSON text.
    data = payload(workload)
    sent = bytes(data) if binary else request[request.index(b'{"jsonrpc"') :].split(b'"data": "')[1].split(b'"')[0]

    def verify(bodies: list) -> None:
        if len(bodies) != calls:
            raise SystemExit(f"{len(bodies)} replies to {calls} calls")
        for body in bodies:
            if body.tobytes().find(sent) < 0:
                raise SystemExit("the echo came back different")

    try:
        return run_samples(sample, samples, calls, verify)
    finally:
        sock.close()


def worker_grpc(port: int, workload: str, samples: int) -> dict:
    sys.path.insert(0, str(GENERATED))
    import bench_pb2 as pb
    import bench_pb2_grpc as rpc
    import grpc
    import numpy as np

    calls, _ = WORKLOADS[workload]
    data = payload(workload)
    raw = data if workload == "smol" else data.tobytes()
    options = [("grpc.max_receive_message_length", 64 << 20), ("grpc.max_send_message_length", 64 << 20)]
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)

    async def setup():
        channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}", options=options)
        return channel, rpc.BenchStub(channel)

    channel, stub = loop.run_until_complete(setup())

    async def gathered() -> list:
        replies = await asyncio.gather(*(stub.Echo(pb.Blob(data=raw)) for _ in range(calls)))
        if workload == "smol":
            return [reply.data for reply in replies]
        return [np.frombuffer(reply.data, np.uint8).reshape(SHAPE) for reply in replies]

    try:
        verify = lambda results: check_all(results, data, calls)  # noqa: E731
        return run_samples(lambda: loop.run_until_complete(gathered()), samples, calls, verify)
    finally:
        loop.run_until_complete(channel.close())
        loop.close()


# ---------------------------------------------------------------------- driver


class Server:
    """A server in its own process group, pinned to SERVER_CPU, stopped by its PID."""

    def __init__(self, argv: list[str]) -> None:
        self.proc = subprocess.Popen(
            ["taskset", "-c", str(SERVER_CPU), *argv],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        deadline = time.monotonic() + 60
        self.port = 0
        assert self.proc.stdout is not None
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            if not line:
                break
            # The start-up line, on stderr (merged here): "ucall: listening on http://HOST:PORT (...)".
            if found := re.search(r"listening on (?:[a-z]+://)?\S+:(\d+)", line):
                self.port = int(found.group(1))
                break
        if not self.port:
            self.stop()
            raise SystemExit(f"{argv[0]} did not start")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def measure(python: Path | str, client: str, port: int, workload: str, samples: int) -> dict:
    if client == "rust":
        calls, size = WORKLOADS[workload]
        argv = [str(ROOT / "target/release/examples/bench"), "--port", str(port), "--calls", str(calls)]
        argv += ["--bytes", str(size), "--samples", str(samples)]
    elif client == "c":
        calls, size = WORKLOADS[workload]
        # The C client calls one at a time: a tenth of the sample's calls per sample.
        argv = [str(OUT / "client_bench_c"), str(port), str(max(calls // 10, 10)), str(size), str(samples)]
    else:
        argv = [str(python), __file__, "--worker", client, "--port", str(port), "--workload", workload]
        argv += ["--samples", str(samples)]
    env = dict(os.environ, PYTHONPATH=str(ROOT / "python"))
    try:
        done = subprocess.run(
            ["taskset", "-c", str(CLIENT_CPU), *argv], capture_output=True, text=True, timeout=600, env=env
        )
    except subprocess.TimeoutExpired:
        return {"error": "timed out after 600 s"}
    if done.returncode != 0:
        return {"error": (done.stderr.strip().splitlines() or ["failed"])[-1][:160]}
    figures = json.loads(done.stdout.strip().splitlines()[-1])
    figures["calls_per_second"] = figures["calls"] / figures["seconds"]
    figures["cpu_us_per_call"] = 1e6 * figures["cpu_seconds"] / figures["calls"]
    return figures


def build(clients: list[str]) -> None:
    """The server, and the Rust and C clients when they run."""
    cargo = ["cargo", "build", "--release", "--quiet"]
    subprocess.run([*cargo, "-p", "ucall-examples", "--bin", "bench_server"], check=True, cwd=ROOT)
    OUT.mkdir(parents=True, exist_ok=True)
    if "rust" in clients:
        subprocess.run([*cargo, "-p", "ucall-client", "--example", "bench"], check=True, cwd=ROOT)
    if "c" not in clients:
        return
    subprocess.run([*cargo, "-p", "ucall-capi"], check=True, cwd=ROOT)
    subprocess.run(
        ["cc", "-std=c99", "-O2", "-Wall", "-Wextra", "-Werror", f"-I{ROOT / 'include'}", str(ROOT / "benches/client_bench.c"),
         str(ROOT / "target/release/libucall.a"), "-lpthread", "-ldl", "-lm", "-lrt", "-o", str(OUT / "client_bench_c")],
        check=True,
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--samples", type=int, default=5, help="measured samples per client and workload")
    parser.add_argument("--only", default="", help="comma-separated clients to run (default: all)")
    parser.add_argument("--workloads", default="smol,large")
    parser.add_argument("--append", type=Path, help="add the table and goals to this Markdown file")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--workload", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        if args.worker == "grpcio-asyncio":
            figures = worker_grpc(args.port, args.workload, args.samples)
        elif args.worker == "httpx":
            figures = worker_httpx(args.port, args.workload, args.samples)
        elif args.worker.startswith("socket-floor"):
            binary, fresh = "-binary" in args.worker, args.worker.endswith("-fresh")
            figures = worker_socket_floor(args.port, args.workload, args.samples, binary, fresh)
        else:
            figures = worker_ucall(args.worker, args.port, args.workload, args.samples)
        print(json.dumps(figures))
        return 0

    clients = [c for c in args.only.split(",") if c] or CLIENTS
    workloads = [w for w in args.workloads.split(",") if w]
    build(clients)
    results: dict[str, dict[str, dict]] = {w: {} for w in workloads}
    ucall = Server([str(ROOT / "target/release/bench_server"), "--port", "0", "--engine", "poll"])
    try:
        for workload in workloads:
            for client in [c for c in clients if c in UCALL_CLIENTS + PATH_CLIENTS]:
                results[workload][client] = measure(sys.executable, client, ucall.port, workload, args.samples)
                print(workload, client, results[workload][client], flush=True)
    finally:
        ucall.stop()
    if "grpcio-asyncio" in clients:
        if not (PEERS_PY.exists() and (GENERATED / "bench_pb2.py").exists()):
            for workload in workloads:
                results[workload]["grpcio-asyncio"] = {"error": "no grpcio: run benches/setup_peers.sh"}
        else:
            grpc_server = Server([str(PEERS_PY), str(ROOT / "benches/peers/grpc_app.py"), "asyncio", str(GENERATED)])
            try:
                for workload in workloads:
                    results[workload]["grpcio-asyncio"] = measure(PEERS_PY, "grpcio-asyncio", grpc_server.port, workload, args.samples)
                    print(workload, "grpcio-asyncio", results[workload]["grpcio-asyncio"], flush=True)
            finally:
                grpc_server.stop()
    (OUT / "client.json").write_text(json.dumps(results, indent=1))
    print(table(results))
    if args.append:
        sizes = ", ".join(f"{w}: {WORKLOADS[w][0]:,} calls of {WORKLOADS[w][1]:,} bytes" for w in workloads)
        with args.append.open("a") as brief:
            brief.write(
                "\n### Clients (benches/client_bench.py)\n\n"
                f"gRPCClient2.jl's workloads ({sizes} per sample, {args.samples} samples), echoed by the Rust "
                f"`bench_server` on CPU {SERVER_CPU}, each client in a process of its own on CPU {CLIENT_CPU}; "
                "client CPU is all its threads'.\n\n" + table(results) + "\n"
            )
    return 0


def table(results: dict[str, dict[str, dict]]) -> str:
    lines = ["| workload | client | calls/s | client CPU µs/call |", "|---|---|---:|---:|"]
    for workload, by_client in results.items():
        for client, figures in by_client.items():
            if "error" in figures:
                lines.append(f"| {workload} | {client} | failed: {figures['error']} | |")
            else:
                lines.append(
                    f"| {workload} | {client} | {figures['calls_per_second']:,.0f} | {figures['cpu_us_per_call']:,.1f} |"
                )
    lines.append("")
    lines += goals(results)
    return "\n".join(lines)


def goals(results: dict[str, dict[str, dict]]) -> list[str]:
    def get(workload: str, client: str, key: str) -> float | None:
        return results.get(workload, {}).get(client, {}).get(key)

    out = []

    def goal(text: str, value: float | None, target: float | None, at_least: bool = True) -> None:
        if value is None or target is None:
            out.append(f"- {text}: not measured")
            return
        met = value >= target if at_least else value <= target
        out.append(f"- {text}: {value:,.1f} vs {target:,.1f}: {'met' if met else 'NOT met'}")

    goal("smol AsyncClient calls/s >= 100,000", get("smol", "python-async", "calls_per_second"), 100_000)
    goal("large AsyncClient calls/s >= 600", get("large", "python-async", "calls_per_second"), 600)
    for workload in ("smol", "large"):
        grpc = get(workload, "grpcio-asyncio", "cpu_us_per_call")
        goal(
            f"{workload} AsyncClient CPU µs/call <= a third of grpcio's",
            get(workload, "python-async", "cpu_us_per_call"),
            grpc / 3 if grpc else None,
            at_least=False,
        )
    binary_floor = get("large", "socket-floor-binary", "cpu_us_per_call")
    goal(
        "large AsyncClient binary CPU µs/call <= 1.5x socket-floor-binary's",
        get("large", "python-async-binary", "cpu_us_per_call"),
        1.5 * binary_floor if binary_floor else None,
        at_least=False,
    )
    floor = get("large", "socket-floor", "calls_per_second")
    if floor is not None:
        out.append(
            f"- large socket-floor (the transport alone, no JSON): {floor:,.1f} calls/s at "
            f"{get('large', 'socket-floor', 'cpu_us_per_call'):,.1f} µs of client CPU: the server's ceiling here"
        )
    sequential = get("smol", "python-sequential", "calls_per_second")
    goal(
        "smol Client.pipeline >= 5x sequential calls",
        get("smol", "python-pipeline", "calls_per_second"),
        5 * sequential if sequential else None,
    )
    return out


if __name__ == "__main__":
    sys.exit(main())
