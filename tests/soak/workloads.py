# SPDX-License-Identifier: Apache-2.0
"""The soak workloads. Each runs in its own thread until the run stops, and checks every
reply against its request (id, result, error code); a mismatch or an unexpected close is
recorded as a failure and the workload carries on with a new connection.

The procedures are those of the shared test server (tests/vectors/README.md): `sum`,
`echo`, `notify_hello`.
"""

from __future__ import annotations

import base64
import itertools
import json
import random
import ssl
import threading
import time
from typing import Callable

from clients import Closed, Http, Stream, Tcp

# The gRPCClient2.jl workloads: a call of a few bytes, and a 32x224x224 uint8 array.
ARRAY_BYTES = 32 * 224 * 224


class Run:
    """Shared state of one soak run: the stop flag, counters and failures."""

    def __init__(self, address: tuple[str, int], tls_address: tuple[str, int], tls: ssl.SSLContext):
        self.address = address
        self.tls_address = tls_address
        self.tls = tls
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.counts: dict[str, int] = {}
        self.failures: list[str] = []
        self.ids = itertools.count(1)

    def count(self, name: str, n: int = 1) -> None:
        with self.lock:
            self.counts[name] = self.counts.get(name, 0) + n

    def check(self, name: str, problem: str | None) -> None:
        """Count `problem` (what a check found wrong, `None` when nothing) as a failure."""
        if problem:
            self.fail(name, problem)

    def fail(self, name: str, message: str) -> None:
        with self.lock:
            self.failures.append(f"{name}: {message}")
            self.counts[name + " failures"] = self.counts.get(name + " failures", 0) + 1

    def total(self) -> int:
        with self.lock:
            return sum(v for k, v in self.counts.items() if not k.endswith("failures"))


def call(method: str, params, id_: int | None) -> bytes:
    message = {"jsonrpc": "2.0", "method": method, "params": params}
    if id_ is not None:
        message["id"] = id_
    return json.dumps(message, separators=(",", ":")).encode()


def sum_call(run: Run, rng: random.Random) -> tuple[bytes, int, int]:
    """A small call: sum of two integers. Returns (text, id, expected result)."""
    a, b = rng.randrange(-1000, 1000), rng.randrange(-1000, 1000)
    id_ = next(run.ids)
    return call("sum", [a, b], id_), id_, a + b


def check_result(reply, id_: int, expected) -> str | None:
    if not isinstance(reply, dict) or reply.get("id") != id_ or reply.get("result") != expected:
        return f"expected id {id_} result {expected!r}, got {str(reply)[:200]}"
    return None


def batch(run: Run, rng: random.Random) -> tuple[bytes, dict[int, int]]:
    """A batch of calls and notifications; the expected result by id."""
    parts, expected = [], {}
    for _ in range(rng.randrange(2, 9)):
        if rng.random() < 0.25:
            parts.append(call("notify_hello", [rng.randrange(100)], None))
        else:
            text, id_, result = sum_call(run, rng)
            parts.append(text)
            expected[id_] = result
    return b"[" + b",".join(parts) + b"]", expected


def check_batch(reply, expected: dict[int, int]) -> str | None:
    if not expected:
        return None if reply is None else f"a batch of notifications got {str(reply)[:200]}"
    if not isinstance(reply, list) or len(reply) != len(expected):
        return f"expected {len(expected)} replies, got {str(reply)[:200]}"
    for item in reply:
        id_ = item.get("id") if isinstance(item, dict) else None
        if id_ not in expected:
            return f"a reply to no call of the batch: {str(item)[:200]}"
        problem = check_result(item, id_, expected[id_])
        if problem:
            return problem
    return None


def once(name: str, run: Run, body: Callable[[random.Random], None], rng: random.Random) -> bool:
    """Run `body` once; an exception (before the run stops) is recorded as a failure."""
    try:
        body(rng)
        return True
    except (OSError, Closed, ValueError) as error:
        if not run.stop.is_set():
            run.fail(name, f"{type(error).__name__}: {error}")
        return False


def forever(name: str, run: Run, body: Callable[[random.Random], None], seed: int) -> None:
    """Run `body` until the run stops; after a failure it starts again."""
    rng = random.Random(seed)
    while not run.stop.is_set():
        if not once(name, run, body, rng):
            time.sleep(0.05)


def http_calls(run: Run, tls: bool = False):
    name = "https calls" if tls else "http calls"

    def body(rng: random.Random) -> None:
        conn = Http(run.tls_address, run.tls) if tls else Http(run.address)
        try:
            for _ in range(200):
                if run.stop.is_set():
                    return
                depth = rng.randrange(1, 9)  # pipelined
                calls = [sum_call(run, rng) for _ in range(depth)]
                bodies = [c[0] for c in calls]
                expected_batch = None
                if rng.random() < 0.2:
                    text, expected_batch = batch(run, rng)
                    bodies.append(text)
                replies = conn.exchange(bodies)
                for (_, id_, result), (status, reply) in zip(calls, replies):
                    run.check(name, check_result(json.loads(reply), id_, result) if status == 200 else f"status {status}")
                if expected_batch is not None:
                    status, reply = replies[-1]
                    parsed = json.loads(reply) if reply else None
                    problem = check_batch(parsed, expected_batch)
                    if problem or status not in (200, 204):
                        run.fail(name, problem or f"status {status}")
                run.count(name, len(bodies))
        finally:
            conn.close()

    return name, body


def tcp_calls(run: Run):
    name = "tcp calls"

    def body(rng: random.Random) -> None:
        conn = Tcp(run.address)
        try:
            for _ in range(200):
                if run.stop.is_set():
                    return
                calls = [sum_call(run, rng) for _ in range(rng.randrange(1, 17))]
                texts = [c[0] for c in calls]
                texts.insert(rng.randrange(len(texts) + 1), call("notify_hello", [], None))  # no reply
                text, expected = batch(run, rng)
                texts.append(text)
                replies = conn.exchange(texts, len(calls) + (1 if expected else 0))
                for (_, id_, result), reply in zip(calls, replies):
                    run.check(name, check_result(reply, id_, result))
                if expected:
                    run.check(name, check_batch(replies[-1], expected))
                run.count(name, len(texts))
        finally:
            conn.close()

    return name, body


def ws_calls(run: Run):
    from websockets.sync.client import connect

    name = "websocket calls"

    def body(rng: random.Random) -> None:
        host, port = run.address
        with connect(f"ws://{host}:{port}/", open_timeout=30, close_timeout=5, max_size=None) as ws:
            for _ in range(200):
                if run.stop.is_set():
                    return
                if rng.random() < 0.2:
                    text, expected = batch(run, rng)
                    ws.send(text.decode())
                    if expected:
                        run.check(name, check_batch(json.loads(ws.recv(timeout=30)), expected))
                else:
                    text, id_, result = sum_call(run, rng)
                    ws.send(text.decode())
                    run.check(name, check_result(json.loads(ws.recv(timeout=30)), id_, result))
                run.count(name)

    return name, body


def big_arrays(run: Run):
    """Echo of a 32x224x224 uint8 array (1.6 MB, base64 in JSON) over HTTP and raw TCP."""
    name = "1.6 MB arrays"

    def body(rng: random.Random) -> None:
        array = rng.randbytes(ARRAY_BYTES)
        data = base64.b64encode(array).decode()
        id_ = next(run.ids)
        text = call("echo", {"data": data}, id_)
        if rng.random() < 0.5:
            conn: Stream = Http(run.address)
            status, reply = conn.exchange([text])[0]
            parsed = json.loads(reply) if status == 200 else {"status": status}
        else:
            conn = Tcp(run.address)
            parsed = conn.exchange([text], 1)[0]
        conn.close()
        if not isinstance(parsed, dict) or parsed.get("id") != id_ or parsed.get("result") != data:
            run.fail(name, f"the echo of {ARRAY_BYTES} bytes differs: {str(parsed)[:120]}")
        elif base64.b64decode(parsed["result"]) != array:
            run.fail(name, "the array came back changed")
        run.count(name)

    return name, body


def peak(run: Run, width: int = 4, rounds: int = 3) -> None:
    """Before the steady load: `rounds` times, `width` 1.6 MB echoes at once (over HTTP and raw
    TCP). The server keeps a few large buffers for its next large messages (a bounded pool,
    `buffer::Spares`) and the allocator keeps what it freed: their high-water mark is reached
    here, so that a later rare overlap of large messages (one workload sends them, a
    connection each) is not judged as growth. A leak still grows after it."""
    name, body = big_arrays(run)
    for round_ in range(rounds):
        threads = [
            threading.Thread(target=once, args=(name, run, body, random.Random(1000 * round_ + i)), daemon=True)
            for i in range(width)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(120)


def churn(run: Run):
    """A connection per call, over HTTP, raw TCP and TLS (a handshake each time)."""
    name = "churn"

    def body(rng: random.Random) -> None:
        text, id_, result = sum_call(run, rng)
        kind = rng.randrange(3)
        if kind == 0:
            conn: Stream = Http(run.address)
            status, reply = conn.exchange([text])[0]
            parsed = json.loads(reply) if status == 200 else {"status": status}
        elif kind == 1:
            conn = Tcp(run.address)
            parsed = conn.exchange([text], 1)[0]
        else:
            conn = Http(run.tls_address, run.tls)
            status, reply = conn.exchange([text])[0]
            parsed = json.loads(reply) if status == 200 else {"status": status}
        conn.close()
        run.check(name, check_result(parsed, id_, result))
        run.count(name)

    return name, body


def malformed(run: Run):
    """Bad requests and resets, each checked for its error; the server must go on."""
    name = "malformed and resets"

    def body(rng: random.Random) -> None:
        kind = rng.randrange(5)
        if kind == 0:  # a head that is not HTTP
            conn = Http(run.address)
            conn.send(b"POST / HTTP/1.1\r\nContent-Length: nope\r\n\r\n")
            status, _, _ = conn.read_response()
            if status != 400:
                run.fail(name, f"a bad Content-Length got {status}")
        elif kind == 1:  # JSON that does not parse, over raw TCP: -32700 then close
            conn = Tcp(run.address)
            conn.send(b'{"jsonrpc":"2.0","method":"sum","params":[1,2],"id":1}{"broken": ]}\n')
            replies = [json.loads(conn.read_until(b"\n")) for _ in range(2)]
            if replies[0].get("result") != 3 or replies[1].get("error", {}).get("code") != -32700:
                run.fail(name, f"raw TCP parse error got {replies}")
        elif kind == 2:  # an invalid request object over HTTP: -32600
            conn = Http(run.address)
            status, reply = conn.exchange([b'{"jsonrpc":"1.0","method":7,"id":5}'])[0]
            parsed = json.loads(reply)
            if parsed.get("error", {}).get("code") != -32600 or parsed.get("id") != 5:
                run.fail(name, f"an invalid request got {status} {parsed}")
        else:  # reset in the middle of a request (head, body, or TLS handshake)
            conn = Http(run.tls_address, run.tls) if kind == 4 else Http(run.address)
            text = post(call("sum", [1, 2], 9))
            conn.send(text[: rng.randrange(1, len(text))])
            conn.reset()
            run.count(name)
            return
        conn.close()
        run.count(name)

    return name, body


def post(body: bytes) -> bytes:
    return f"POST / HTTP/1.1\r\nHost: soak\r\nContent-Length: {len(body)}\r\n\r\n".encode() + body


class IdleConnections:
    """Connections opened at the start and left idle (plain, TLS, WebSocket upgrades)."""

    def __init__(self, run: Run, count: int):
        self.conns: list[Stream] = []
        for i in range(count):
            if i % 4 == 3:
                conn = Http(run.tls_address, run.tls)
            else:
                conn = Http(run.address)
            if i % 4 == 1:
                conn.send(
                    b"GET / HTTP/1.1\r\nHost: soak\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                    b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
                )
                conn.read_until(b"\r\n\r\n")
            self.conns.append(conn)

    def close(self) -> None:
        for conn in self.conns:
            conn.close()


def all_workloads(run: Run) -> list[tuple[str, Callable[[random.Random], None]]]:
    """Every workload, with the number of threads each gets."""
    return [
        http_calls(run),
        http_calls(run),
        http_calls(run, tls=True),
        tcp_calls(run),
        tcp_calls(run),
        ws_calls(run),
        big_arrays(run),
        churn(run),
        malformed(run),
    ]
