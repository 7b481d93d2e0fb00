# SPDX-License-Identifier: Apache-2.0
"""Results, errors, lifecycle, threads and the GIL, blocking and async handlers."""

import asyncio
import base64
import dataclasses
import datetime
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import warnings
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from conftest import ENGINES, REPO_ROOT, Wire, once, once_error, serving, tcp_exchange

import ucall
from ucall import ErrorCode, RPCError, Server


def test_exported_members():
    assert ucall.__all__ == sorted(ucall.__all__)
    for name in ucall.__all__:
        assert hasattr(ucall, name), name
    assert ErrorCode.INVALID_PARAMS == -32602 and ErrorCode.INTERNAL_ERROR == -32603
    assert isinstance(ucall.__version__, str)


@dataclasses.dataclass
class Pair:
    left: Any
    right: Any


def test_results(make_server, wire):
    server = make_server()
    results = {
        "tuple": lambda: (1, "a", None),
        "bytes": lambda: b"\x00\xff",
        "big": lambda: [2**64, -(2**100)],
        "floats": lambda: [0.1, 1e300, -0.0, 1.0],
        "dataclass": lambda: Pair([1, 2], {"x": Pair(1, 2)}),
        "set": lambda: {3},
        "nested": lambda: {"a": [{"b": (True, False)}]},
        "int_keys": lambda: {1: "one"},
    }
    for name, func in results.items():
        server.route(func, name=name)
    w = wire(server)
    assert w.result("tuple") == [1, "a", None]
    assert base64.b64decode(w.result("bytes")) == b"\x00\xff"
    status, body = w.post(json.dumps({"jsonrpc": "2.0", "method": "big", "id": 1}))
    assert b"18446744073709551616" in body and b"-1267650600228229401496703205376" in body
    assert w.result("floats") == [0.1, 1e300, -0.0, 1.0]
    assert w.result("dataclass") == {"left": [1, 2], "right": {"x": {"left": 1, "right": 2}}}
    assert w.result("set") == [3]
    assert w.result("nested") == {"a": [{"b": [True, False]}]}
    assert w.result("int_keys") == {"1": "one"}


def test_numpy_and_image_results(make_server, wire):
    np = pytest.importorskip("numpy")
    image = pytest.importorskip("PIL.Image")
    server = make_server()
    server.route(lambda: np.int64(7), name="scalar")
    server.route(lambda: [np.float32(0.5), np.bool_(True)], name="scalars")
    server.route(lambda: image.new("L", (3, 3), 9), name="picture")
    w = wire(server)
    assert w.result("scalar") == 7
    assert w.result("scalars") == [0.5, True]
    import io

    picture = image.open(io.BytesIO(base64.b64decode(w.result("picture"))))
    assert picture.size == (3, 3) and picture.getpixel((1, 1)) == 9


def test_unserializable_results(make_server, wire):
    server = make_server()
    server.route(lambda: float("nan"), name="nan")
    server.route(lambda: object(), name="thing")
    server.route(lambda: {(1, 2): 3}, name="tuple_key")
    cycle: list = []
    cycle.append(cycle)
    server.route(lambda: cycle, name="cycle")
    w = wire(server)
    for name, fragment in [("nan", "NaN"), ("thing", "object"), ("tuple_key", "tuple"), ("cycle", "nested")]:
        error = w.error(name)
        assert error["code"] == ErrorCode.INTERNAL_ERROR
        assert "cannot be serialized" in error["message"] and fragment in error["message"], error


def test_errors(make_server, wire):
    server = make_server()

    @server
    def fail() -> None:
        raise RPCError(-32001, "boom", {"why": "asked to fail", "n": (1, 2)})

    @server
    def plain_fail() -> None:
        raise RPCError(-32050, "no data")

    @server
    def crash() -> None:
        raise ValueError("bad value")

    @server
    def just_a_message() -> None:
        raise RPCError("out of stock")

    @server
    def fail_with_odd_data() -> None:
        raise RPCError(-32002, "odd", object())

    w = wire(server)
    assert w.error("fail") == {"code": -32001, "message": "boom", "data": {"why": "asked to fail", "n": [1, 2]}}
    error = w.error("fail_with_odd_data")
    assert error["code"] == -32603, error
    assert error["message"].startswith("Internal error: the data of RPCError -32002 cannot be serialized: "), error
    assert w.error("plain_fail") == {"code": -32050, "message": "no data"}
    assert w.error("just_a_message") == {"code": -32000, "message": "out of stock"}
    with pytest.raises(TypeError, match="an RPCError code is an integer, not 1.5"):
        RPCError(1.5, "half")
    error = w.error("crash")
    assert error["code"] == -32603
    assert "ValueError: bad value" in error["message"]
    assert "data" not in error  # no traceback unless debug


def test_debug_mode_sends_the_traceback(make_server, wire):
    server = make_server(debug=True)

    @server
    def crash() -> None:
        raise KeyError("k")

    error = wire(server).error("crash")
    assert "Traceback" in error["data"] and "KeyError" in error["data"]


def test_lifecycle(make_server, engine):
    server = make_server()
    server.route(lambda: 1, name="one")
    assert not server.running and server.engine is None
    with server:
        assert server.running and server.engine in ("poll", "uring")
        assert once(server.port, "one") == 1
        with pytest.raises(RuntimeError):
            server.route(lambda: 2, name="two")
        with pytest.raises(RuntimeError):
            server.start()
    assert not server.running
    server.stop()  # idempotent
    server.start()  # and it can start again
    assert once(server.port, "one") == 1
    server.stop()


def test_run_returns_after_max_seconds(make_server):
    server = make_server()
    started = time.monotonic()
    server.run(max_seconds=0.3)
    assert 0.25 < time.monotonic() - started < 3
    assert not server.running


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_run_stops_cleanly_on_signals(engine, sig):
    with serving([str(REPO_ROOT / "examples/python/sum_server.py"), "--port", "0"], engine) as (proc, port):
        assert once(port, "sum", [1, 2]) == 3
        proc.send_signal(sig)
        assert proc.wait(10) == 0, proc.stderr.read()


def test_other_threads_run_and_an_idle_server_sleeps(make_server, wire):
    server = make_server()
    server.route(lambda: "ok", name="ping")
    w = wire(server)
    assert w.result("ping") == "ok"
    counted = 0
    stop = threading.Event()

    def count() -> None:
        nonlocal counted
        while not stop.is_set():
            counted += 1

    thread = threading.Thread(target=count)
    thread.start()
    time.sleep(0.2)
    stop.set()
    thread.join()
    assert counted > 10_000  # the server held no GIL meanwhile
    cpu = time.process_time()
    time.sleep(0.5)
    assert time.process_time() - cpu < 0.05  # idle: no busy loop anywhere


def test_blocking_handlers_do_not_stall_others(make_server, wire):
    server = make_server()

    @server
    def slow(x: int) -> int:
        time.sleep(0.4)
        return x

    @server
    def quick() -> str:
        return "quick"

    server.start()
    with ThreadPoolExecutor(8) as pool:
        started = time.monotonic()
        futures = [pool.submit(lambda i=i: once(server.port, "slow", [i])) for i in range(8)]
        time.sleep(0.1)
        asked = time.monotonic()
        assert once(server.port, "quick") == "quick"
        quick_latency = time.monotonic() - asked
        assert [f.result() for f in futures] == list(range(8))
        elapsed = time.monotonic() - started
    assert quick_latency < 0.1, quick_latency
    # One sleep, with room for a machine busy with other work: two sleeps in a row (calls
    # run two at a time, or handed over late) take 0.8 s, and one after another 3.2 s.
    assert elapsed < 0.78, elapsed


def idle_between_rounds(
    port: int, pool: ThreadPoolExecutor, started: threading.Event, release: threading.Event
) -> None:
    """In every round, also after the server sat idle long enough (over 2 s) for a spare
    thread to end."""
    for round_ in range(3):
        if round_:
            time.sleep(2.2)  # idle: longer than a spare thread is kept
        started.clear()
        release.clear()
        sleeper = pool.submit(once, port, "blocking", [5.0])
        assert started.wait(5), f"round {round_}: the blocking call never started"
        added = once(port, "add", [1, 2])
        time.sleep(0.2)  # the thread that ran add goes idle first
        release.set()
        assert added == 3
        assert sleeper.result(timeout=10) is True, f"round {round_}: add waited for the blocking call"


def idle_while_blocked(port: int, pool: ThreadPoolExecutor, started: threading.Event, release: threading.Event) -> None:
    """A call blocked for longer than a spare thread is kept: the calls after an idle gap
    still find a thread free to run them."""
    sleeper = pool.submit(once, port, "blocking", [8.0])
    try:
        assert started.wait(5), "the blocking call never started"
        assert once(port, "add", [1, 2]) == 3
        time.sleep(2.2)  # idle, but for the blocked call: longer than a spare thread is kept
        assert once(port, "add", [2, 3]) == 5
    finally:
        release.set()
    assert sleeper.result(timeout=10) is True, "add waited for the blocking call"


@pytest.mark.parametrize("scenario", [idle_between_rounds, idle_while_blocked], ids=lambda f: f.__name__)
def test_a_blocking_call_does_not_stall_others_through_idle_gaps(make_server, scenario):
    """The other calls go on while one blocks, on a server given one thread. `blocking`
    waits until the test lets it go, which it does only once `add` has answered: were
    `add` held up behind it, `blocking` would give up waiting and say so (False)."""
    server = make_server(threads=1)
    started = threading.Event()
    release = threading.Event()

    @server
    def add(a: int, b: int) -> int:
        return a + b

    @server
    def blocking(seconds: float) -> bool:
        started.set()
        return release.wait(seconds)

    server.start()
    with ThreadPoolExecutor(1) as pool:
        scenario(server.port, pool, started, release)


def thread_name() -> str:
    """This thread's name as the kernel knows it (a native thread's, not Python's)."""
    with open(f"/proc/self/task/{threading.get_native_id()}/comm") as comm:
        return comm.read().strip()


def compute_then_sleep(spin: float, nap: float) -> None:
    """Stay on a core for `spin` seconds, then sleep for `nap`."""
    end = time.perf_counter() + spin
    while time.perf_counter() < end:
        pass
    if nap:
        time.sleep(nap)


def test_a_computing_call_keeps_its_thread_and_a_sleeping_one_hands_over(wire):
    """On epoll the lane moves to a new thread when a call has slept or waited for 2 ms.
    A call that computes (or, on a busy machine, waits for a core) is not blocked: a new
    thread could not run Python while it holds the GIL. It keeps the lane for up to 50 ms;
    each move costs a thread, and on glibc possibly a malloc arena."""
    server = Server(port=0, engine="poll", threads=1)

    @server
    def tid(spin: float = 0.0, nap: float = 0.0) -> int:
        compute_then_sleep(spin, nap)
        return threading.get_native_id()

    try:
        w = wire(server)
        first = w.result("tid", {})
        assert w.result("tid", {"spin": 0.02}) == first  # 20 ms on a core: no hand-over
        assert w.result("tid", {}) == first
        assert w.result("tid", {"nap": 0.02}) == first  # the sleeping call finishes where it began
        assert w.result("tid", {}) != first, "a call that slept 20 ms moved the lane to a new thread"
    finally:
        server.stop()


def test_async_handlers(make_server):
    server = make_server()

    @server
    async def nap(x: int) -> int:
        await asyncio.sleep(0.1)
        return x

    @server
    async def broken() -> None:
        await asyncio.sleep(0)
        raise RPCError(-32002, "async failure")

    server.start()
    with ThreadPoolExecutor(100) as pool:
        sockets = [Wire(server.port) for _ in range(100)]
        for s in sockets:
            s.connection.connect()
        started = time.monotonic()
        results = list(pool.map(lambda pair: pair[1].result("nap", [pair[0]]), enumerate(sockets)))
        elapsed = time.monotonic() - started
        for s in sockets:
            s.close()
    assert results == list(range(100))
    # One sleep of 0.1 s, with room for a busy machine and 100 client threads on two cores;
    # one after another would take 10 s.
    assert elapsed < 0.9, elapsed
    assert once_error(server.port, "broken") == {"code": -32002, "message": "async failure"}


def test_an_async_call_does_not_wait_for_a_blocking_call_after_it(make_server):
    """Two calls read in one turn run in one group: an `async def` call, then a plain one
    that sleeps. The coroutine must reach the asyncio loop before the sleep begins, or it
    starts only once the sleep is over and the pair takes two sleeps."""
    server = make_server()

    @server
    async def fetch(x: int) -> int:
        await asyncio.sleep(0.4)
        return x

    @server
    def block(x: int) -> int:
        time.sleep(0.4)
        return x

    server.start()
    pair = [{"jsonrpc": "2.0", "method": m, "params": [i], "id": i} for i, m in enumerate(["fetch", "block"])]
    payload = "".join(json.dumps(call) + "\n" for call in pair).encode()
    started = time.monotonic()
    replies = tcp_exchange(server.port, payload, 2)
    elapsed = time.monotonic() - started
    assert [r["result"] for r in replies] == [0, 1]
    assert elapsed < 0.7, f"{elapsed:.2f} s: the async call waited for the blocking one"


def test_replies_leave_in_request_order(make_server):
    server = make_server()

    @server
    async def later(x: int) -> int:
        await asyncio.sleep(0.05)
        return x

    @server
    def now(x: int) -> int:
        return x

    @server
    def blocked(x: int) -> int:
        time.sleep(0.05)
        return x

    server.start()
    methods = ["later", "now", "blocked", "now", "later", "now"]
    payload = "".join(
        json.dumps({"jsonrpc": "2.0", "method": m, "params": [i], "id": i}) + "\n" for i, m in enumerate(methods)
    )
    replies = tcp_exchange(server.port, payload.encode(), len(methods))
    assert [r["result"] for r in replies] == list(range(len(methods)))
    batch = [{"jsonrpc": "2.0", "method": m, "params": [i], "id": i} for i, m in enumerate(methods)]
    w = Wire(server.port)
    status, body = w.post(json.dumps(batch))
    w.close()
    assert [r["result"] for r in json.loads(body)] == list(range(len(methods)))


def test_a_long_pipeline_read_only_at_the_end_is_answered_in_full(make_server):
    """More pipelined calls than one connection may await at once (1,024): the rest wait
    until the first replies are out. The client sends everything before it reads and the
    server must still answer it all, though no new event comes to wake it."""
    server = make_server()

    @server
    def now(x: int) -> int:
        return x

    server.start()
    calls = 3000
    payload = "".join(json.dumps({"jsonrpc": "2.0", "method": "now", "params": [i], "id": i}) + "\n" for i in range(calls))
    replies = tcp_exchange(server.port, payload.encode(), calls, timeout=5)
    assert [r["result"] for r in replies] == list(range(calls))


def test_threads_and_limits_options(make_server, wire):
    server = make_server(threads=2, max_body_bytes=1024, max_batch=2)
    server.route(lambda data=None: "ok", name="ping")
    w = wire(server)
    assert w.result("ping") == "ok"
    status, _ = w.post(json.dumps({"jsonrpc": "2.0", "method": "ping", "params": ["x" * 2000], "id": 1}))
    assert status == 413
    w2 = Wire(server.port)
    batch = [{"jsonrpc": "2.0", "method": "ping", "id": i} for i in range(3)]
    status, body = w2.post(json.dumps(batch))
    w2.close()
    assert json.loads(body)["error"]["code"] == ErrorCode.INVALID_REQUEST
    with pytest.raises(ValueError):
        Server(threads=0)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"port": -1}, "port must be from 0 to 65535, got -1"),
        ({"port": 70000}, "port must be from 0 to 65535, got 70000"),
        ({"tls_port": 65536}, "tls_port must be from 0 to 65535"),
        ({"max_body_bytes": -1}, "max_body_bytes must be at least 1, got -1"),
        ({"max_head_bytes": 10}, "max_head_bytes must be at least 64"),
        ({"max_batch": 0}, "max_batch must be at least 1"),
        ({"max_connections": 2**70}, "max_connections must be from 1 to"),
        ({"max_pending_calls": 0}, "max_pending_calls must be at least 1, got 0"),
        ({"threads": 0}, "threads must be at least 1, got 0"),
        ({"max_threads": 0}, "max_threads must be at least 1, got 0"),  # as threads, not silently 1
    ],
)
def test_options_out_of_range_are_refused_naming_them(options, message):
    with pytest.raises(ValueError, match=f"^{message}"):
        Server(**{"port": 0, **options})


@pytest.mark.parametrize(
    ("options", "missing"),
    [
        ({"tls_client_ca": "ca.pem"}, "tls_client_ca= given without tls_cert= and tls_key="),
        ({"tls_port": 0}, "tls_port= given without tls_cert= and tls_key="),
        ({"tls_key": "key.pem"}, "tls_key= given without tls_cert="),
        ({"tls_cert": "cert.pem", "tls_client_ca": "ca.pem"}, "tls_cert= and tls_client_ca= given without tls_key="),
    ],
)
def test_tls_options_without_a_certificate_and_key_are_refused(options, missing):
    # Not a plaintext server: asked for TLS (or client certificates), it must not serve without.
    with pytest.raises(ValueError, match=f"TLS needs both a certificate chain and a private key: {missing}$"):
        Server(port=0, **options)


@pytest.mark.skipif("uring" not in ENGINES, reason="io_uring is not among the engines tested here")
def test_a_quick_procedure_keeps_the_fast_path_unless_a_call_waits(wire):
    """On uring (the engine whose workers are pinned to their thread), calls of a procedure
    proven quick run on the worker's own thread. A slow call that only computed (as a
    preempted one looks) makes it earn that again; one that slept loses it for good,
    since it may block the worker's I/O."""
    server = trusting_soon(Server(port=0, engine="uring", threads=1))
    try:
        check_trust(server, wire)
    finally:
        server.stop()


@pytest.mark.skipif("uring" not in ENGINES, reason="io_uring is not among the engines tested here")
def test_a_trusted_call_with_large_params_runs_at_once_in_order_until_it_blocks(wire):
    """A call with 64 KiB of params or more, of a procedure proven quick, runs at once in
    the turn that parsed it (its params are not copied out to wait). It must not overtake
    a call parsed before it in that turn, and a call that sleeps withdraws the trust, so
    that the next ones go back to the threads that may block. On uring the thread's name
    tells which path a call took."""
    server = trusting_soon(Server(port=0, engine="uring", threads=1))
    notes: list[int] = []

    @server
    def note(data: bytes, nap: float = 0.0) -> str:
        notes.append(len(data))
        compute_then_sleep(0.0, nap)
        return thread_name()

    @server
    def count() -> list[Any]:
        return [len(notes), thread_name()]

    big = {"data": base64.b64encode(os.urandom(64 * 1024)).decode()}

    def request(method: str, params: Any, id: int) -> str:
        return json.dumps({"jsonrpc": "2.0", "method": method, "params": params, "id": id}) + "\n"

    try:
        server.start()
        w = wire(server)
        # Both procedures need trust: on uring a trusted call never waits for an untrusted one.
        assert any(w.result("note", big).startswith("ucall-worker") for _ in range(6000)), "never trusted"
        assert any(w.result("count")[1].startswith("ucall-worker") for _ in range(20000)), "never trusted"
        for _ in range(5):
            if w.result("note", big).startswith("ucall-worker"):
                break
        before = w.result("count")[0]
        payload = request("count", [], 1) + request("note", big, 2) + request("count", [], 3)
        replies = tcp_exchange(server.port, payload.encode(), 3)
        assert [r["id"] for r in replies] == [1, 2, 3]
        assert replies[0]["result"][0] == before, "the large call ran before the call parsed ahead of it"
        assert replies[2]["result"][0] == before + 1

        w.result("note", {**big, "nap": 0.005})
        names = {w.result("note", big) for _ in range(50)}
        assert all(name.startswith("ucall-python") for name in names), names
    finally:
        server.stop()


class Stamp(datetime.date):
    """A result whose conversion to JSON (the server's `encode` calls `isoformat`) is
    recorded in `converted` under its tag."""

    converted: list[str] = []

    def __new__(cls, tag: str) -> "Stamp":
        stamp = super().__new__(cls, 2026, 1, 1)
        stamp.tag = tag
        return stamp

    def isoformat(self) -> str:
        Stamp.converted.append(self.tag)
        return super().isoformat()


def stamping(server: Server, ran: list[tuple[str, str]], is_async: bool = False) -> None:
    """Route `stamp(tag, data="", spin=0.0)`: computes for `spin` seconds, notes its tag and
    thread in `ran`, and returns a `Stamp` of its tag (with the thread's name)."""
    Stamp.converted.clear()

    def note(tag: str, spin: float) -> dict[str, Any]:
        compute_then_sleep(spin, 0.0)
        ran.append((tag, thread_name()))
        return {"stamp": Stamp(tag), "thread": ran[-1][1]}

    if is_async:

        async def stamp(tag: str, data: str = "", spin: float = 0.0) -> dict[str, Any]:
            await asyncio.sleep(0)
            return note(tag, spin)

    else:

        def stamp(tag: str, data: str = "", spin: float = 0.0) -> dict[str, Any]:  # type: ignore[misc]
            return note(tag, spin)

    server.route(stamp)


def notify(w: Wire, method: str, params: Any) -> None:
    status, body = w.post(json.dumps({"jsonrpc": "2.0", "method": method, "params": params}))
    assert status in (200, 202, 204) and body == b"", (status, body)


@pytest.mark.parametrize("is_async", [False, True], ids=["deferred", "async"])
def test_a_notifications_result_is_not_converted(make_server, wire, is_async):
    """A notification's result is never sent (JSON-RPC 2.0 section 4.1), so it is not
    converted either: a large one would cost its whole serialization for nothing."""
    server = make_server()
    ran: list[tuple[str, str]] = []
    stamping(server, ran, is_async)
    w = wire(server)
    notify(w, "stamp", {"tag": "note"})
    until = time.monotonic() + 10
    while not ran and time.monotonic() < until:
        time.sleep(0.005)
    assert [tag for tag, _ in ran] == ["note"]
    assert w.result("stamp", {"tag": "call"})["stamp"] == "2026-01-01"
    assert Stamp.converted == ["call"]


@pytest.mark.skipif("uring" not in ENGINES, reason="io_uring is not among the engines tested here")
def test_a_notification_run_at_once_has_its_result_not_converted(wire):
    """The same for a notification with large params run at once in the turn that parsed
    it (the inline path). On uring a call runs on the turner (`ucall-worker`) only at once
    or when its procedure is trusted; a call that computed for 3 ms takes the trust back
    but leaves it proven, so the next large call on the turner ran at once."""
    server = trusting_soon(Server(port=0, engine="uring", threads=1))
    ran: list[tuple[str, str]] = []
    stamping(server, ran)
    big = "x" * (64 * 1024)
    try:
        server.start()
        w = wire(server)
        for _ in range(20):
            assert any(
                w.result("stamp", {"tag": "warm", "data": big})["thread"].startswith("ucall-worker")
                for _ in range(6000)
            ), "never trusted"
            w.result("stamp", {"tag": "spin", "spin": 0.003})
            notify(w, "stamp", {"tag": "note", "data": big})
            tag, thread = ran[-1]
            if tag == "note" and thread.startswith("ucall-worker"):
                break
        else:
            raise AssertionError(f"the notification never ran at once: {ran[-3:]}")
        assert "note" not in Stamp.converted
        assert w.result("stamp", {"tag": "call", "data": big})["stamp"] == "2026-01-01"
        assert Stamp.converted[-1] == "call" and "note" not in Stamp.converted
    finally:
        server.stop()


def executor_threads() -> int:
    """This process's threads named as a pinned lane's executors."""
    count = 0
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/comm") as comm:
                count += comm.read().startswith("ucall-python")
        except OSError:
            continue  # the thread ended meanwhile
    return count


@pytest.mark.skipif("uring" not in ENGINES, reason="io_uring is not among the engines tested here")
def test_spare_executors_end_while_quick_calls_keep_coming(wire):
    """On uring each blocked call gets a spare executor. Once the calls are quick again,
    the spares end after 2 s without work even while calls keep coming: the work goes to
    the executor that went idle last. Woken in turn, every spare got work often enough to
    stay, and under a mixed load their number only grew (6 to 27 in a 10-minute soak)."""
    server = Server(port=0, engine="uring", threads=1)

    @server
    def nap(seconds: float) -> float:
        time.sleep(seconds)  # it slept: never trusted, so the executors run all its calls
        return seconds

    try:
        server.start()
        with ThreadPoolExecutor(8) as pool:
            assert list(pool.map(lambda _: once(server.port, "nap", [0.3]), range(8))) == [0.3] * 8
        spares = executor_threads()
        assert spares >= 4, f"8 calls blocked at once started only {spares} executors"
        w = wire(server)
        until = time.monotonic() + 4.5
        while time.monotonic() < until:
            assert w.result("nap", [0.0]) == 0.0
            time.sleep(0.002)
        left = executor_threads()
        assert left <= 3, f"{left} of {spares} executors still there after 4.5 s of quick calls"
    finally:
        server.stop()


def trusting_soon(server: Server) -> Server:
    """Trust after 50 quick calls in a row rather than 1000: a streak that long rarely
    survives a busy host (each call must take under a millisecond), and what these tests
    check does not depend on the length."""
    server._trust_after = 50
    return server


def check_trust(server: Server, wire) -> None:  # type: ignore[no-untyped-def]

    names: dict[int, str] = {}

    @server
    def where(spin: float = 0.0, nap: float = 0.0) -> str:
        compute_then_sleep(spin, nap)
        # Read once per thread: file I/O lets the GIL go, and a thread taking it meanwhile
        # would make a 2 ms computation a call that waited (never trusted again).
        tid = threading.get_native_id()
        if tid not in names:
            with open(f"/proc/self/task/{tid}/comm") as comm:
                names[tid] = comm.read().strip()
        return names[tid]

    w = wire(server)

    def calls_until_on_worker(limit: int) -> int:
        for count in range(1, limit + 1):
            if w.result("where", {}).startswith("ucall-worker"):
                return count
        return -1

    assert calls_until_on_worker(20000) > 0, "never trusted"
    # 2 ms of computing: below the GIL's 5 ms switch interval, so no wait is involved. It
    # runs on the worker while the procedure is trusted; a call preempted for a
    # millisecond on a busy host can take that back just before, so a few tries.
    for _ in range(10):
        if w.result("where", {"spin": 0.002}).startswith("ucall-worker"):
            break
        assert calls_until_on_worker(20000) > 0, "never trusted again after a preemption"
    else:
        raise AssertionError("a trusted procedure's computing call never ran on the worker")
    assert w.result("where", {}).startswith("ucall-python"), "the streak starts over"
    assert calls_until_on_worker(20000) > 0, "trust is earned again"
    w.result("where", {"nap": 0.002})
    names = {w.result("where", {}) for _ in range(3000)}
    assert all(name.startswith("ucall-python") for name in names), names


def test_an_empty_ucall_engine_counts_as_unset(monkeypatch):
    """`UCALL_ENGINE=` (set but empty) leaves the configured engine alone; a value overrides it."""
    monkeypatch.setenv("UCALL_ENGINE", "")
    with Server(port=0, engine="poll") as server:
        assert server.engine == "poll"
    monkeypatch.setenv("UCALL_ENGINE", "nonsense")
    with pytest.raises(OSError, match="UCALL_ENGINE"):
        Server(port=0, engine="poll").start()


# Installs a seccomp filter that fails io_uring_setup with EPERM (as a container runtime's
# default profile does) and allows every other call, then starts a server with engine auto.
_TELL_ENGINE_WITHOUT_IO_URING = """
import ctypes, errno, struct

def statement(code, k, jt=0, jf=0):
    return struct.pack("HBBI", code, jt, jf, k)

LD_W_ABS, JEQ_K, RET_K = 0x20, 0x15, 0x06
RET_ERRNO, RET_ALLOW, IO_URING_SETUP = 0x00050000, 0x7FFF0000, 425
program = ctypes.create_string_buffer(b"".join([
    statement(LD_W_ABS, 0),  # the system call's number
    statement(JEQ_K, IO_URING_SETUP, 0, 1),
    statement(RET_K, RET_ERRNO | errno.EPERM),
    statement(RET_K, RET_ALLOW),
]), 4 * 8)
fprog = ctypes.create_string_buffer(struct.pack("HxxxxxxP", 4, ctypes.addressof(program)))
libc = ctypes.CDLL(None, use_errno=True)
libc.prctl.argtypes = [ctypes.c_int] + [ctypes.c_ulong] * 4
PR_SET_NO_NEW_PRIVS, PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 38, 22, 2
if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) or libc.prctl(
    PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.addressof(fprog), 0, 0
):
    raise OSError(ctypes.get_errno(), "cannot install the seccomp filter")

from ucall import Server
with Server(port=0) as server:
    print(server.engine, "|", server.engine_fallback, flush=True)
server.run(max_seconds=0.2)  # its start-up line
"""


@pytest.mark.skipif(sys.platform != "linux", reason="seccomp and io_uring are Linux's")
def test_auto_falls_back_to_poll_and_says_why_where_io_uring_is_forbidden():
    env = {k: v for k, v in os.environ.items() if k != "UCALL_ENGINE"}
    done = subprocess.run(
        [sys.executable, "-c", _TELL_ENGINE_WITHOUT_IO_URING],
        env=env, capture_output=True, text=True, timeout=60,
    )
    assert done.returncode == 0, done.stderr
    engine, _, why = done.stdout.strip().partition(" | ")
    assert engine == "poll"
    assert "EPERM" in why, why  # the message names seccomp, or the sysctl where that is set too
    said = r"^ucall: listening on http://\S+ \(engine poll, 1 thread; io_uring unavailable: [^;]*EPERM[^;]*; "
    assert re.search(said, done.stderr, re.M), f"the start-up line says so too: {done.stderr}"
    with Server(port=0, engine="poll") as server:
        assert server.engine_fallback is None, "asked for, poll is no fallback"


_NAPPING_SERVER = """
import sys, time
from ucall import Server
server = Server(port=0, shutdown_timeout=float(sys.argv[1]))

@server
def nap(seconds: float) -> float:
    time.sleep(seconds)
    return seconds

server.run()
"""


@pytest.mark.parametrize("case", ["past shutdown_timeout", "second Ctrl-C"])
def test_a_handler_that_runs_on_does_not_hold_the_process_at_stop(engine, case):
    """A handler still sleeping when the server stops is left behind once shutdown_timeout
    (and a second) has passed, with a warning; a second Ctrl-C ends the wait at once. Both
    used to wait for the handler's 60 s, whatever the signals."""
    grace = "0.5" if case == "past shutdown_timeout" else "60"
    with serving(["-c", _NAPPING_SERVER, grace], engine) as (proc, port):
        request = json.dumps({"jsonrpc": "2.0", "method": "nap", "params": [60], "id": 1}) + "\n"
        with socket.create_connection(("127.0.0.1", port)) as sock:
            sock.sendall(request.encode())
            time.sleep(0.5)  # the handler is asleep
            started = time.monotonic()
            proc.send_signal(signal.SIGINT)
            if case == "second Ctrl-C":
                time.sleep(0.5)
                assert proc.poll() is None, "the first Ctrl-C waits for the call in flight"
                proc.send_signal(signal.SIGINT)
            proc.wait(15)
            took = time.monotonic() - started
        errors = proc.stderr.read()
        if case == "past shutdown_timeout":
            assert proc.returncode == 0, errors
            assert "left to finish" in errors, errors
            assert 0.4 < took < 8, took
        else:
            assert "KeyboardInterrupt" in errors, errors
            assert took < 8, took


def test_a_second_function_under_a_registered_name_warns_and_replaces_it():
    """Two different functions under one method name is likely a mistake: a warning names
    both, on the user's line. The same function defined again (a notebook cell run twice)
    replaces the first quietly."""
    server = Server(port=0)

    @server
    def ping() -> int:
        return 1

    with warnings.catch_warnings():
        warnings.simplefilter("error")

        @server  # the same function again: no warning
        def ping() -> int:  # noqa: F811
            return 2

    def pong() -> int:
        return 3

    with pytest.warns(UserWarning, match=r"'ping' registered again: .*\.pong replaces .*\.ping$") as caught:
        server.route(pong, name="ping")
    assert caught[0].filename == __file__
    assert server.procedures["ping"] is pong


def test_registering_decorators_refuse_keywords_they_do_not_take():
    """``@server(...)`` and ``@server.method(...)`` take a procedure's description and
    limits (``summary`` ... ``rate_limit``) and refuse any other keyword as they are
    called, before a function is given; ``ignore_extra_params`` is ``method``'s only."""
    server = Server(port=0)
    with pytest.raises(TypeError, match=r"__call__\(\) got an unexpected keyword argument 'summry'"):
        server(summry="typo")
    with pytest.raises(TypeError, match=r"__call__\(\) got an unexpected keyword argument 'ignore_extra_params'"):
        server(ignore_extra_params=True)
    with pytest.raises(TypeError, match=r"method\(\) got an unexpected keyword argument 'max_size'"):
        server.method("ns.ping", max_size=4)

    @server(name="ns.pong", summary="Answers.", timeout=2.0)
    def pong() -> int:
        return 1

    @server.method("ns.ping", ignore_extra_params=True, description="Pings.", rate_limit="10/s")
    def ping() -> int:
        return 2

    assert server.procedures == {"ns.pong": pong, "ns.ping": ping}


def test_past_max_pending_calls_a_call_is_refused_safe_to_retry(make_server):
    """A call that finds ``max_pending_calls`` calls waiting is answered at once, without
    running: -32000 with ``executed: false``, and over HTTP 503 with ``Retry-After``."""
    server = make_server(max_pending_calls=1)
    release = threading.Event()
    ran = []

    @server
    def hold(tag: str) -> str:
        ran.append(tag)
        release.wait(10)
        return tag

    server.start()
    with ThreadPoolExecutor(1) as pool:
        first = pool.submit(once, server.port, "hold", ["first"])
        deadline = time.monotonic() + 5
        while not ran and time.monotonic() < deadline:
            time.sleep(0.01)
        assert ran == ["first"]
        wire = Wire(server.port)
        request = json.dumps({"jsonrpc": "2.0", "method": "hold", "params": ["second"], "id": 2})
        wire.connection.request("POST", "/", request, {"Content-Type": "application/json"})
        answer = wire.connection.getresponse()
        body = answer.read()
        error = json.loads(body)["error"]
        assert answer.status == 503 and answer.getheader("Retry-After") == "1", (answer.status, answer.headers)
        assert error["code"] == -32000 and error["data"] == {"executed": False, "max_pending_calls": 1}, body
        [reply] = tcp_exchange(server.port, b'{"jsonrpc":"2.0","method":"hold","params":["third"],"id":3}\n', 1)
        assert reply["error"]["data"]["executed"] is False, reply
        assert ran == ["first"], "the refused calls did not run"
        release.set()
        assert first.result(10) == "first"
    assert once(server.port, "hold", ["again"]) == "again"
    wire.close()
