# SPDX-License-Identifier: Apache-2.0
"""Batch procedures (``@server.batch``): calls sent one item at a time over HTTP, raw TCP
and WebSocket run together, one Python call per batch, with errors per caller, a bounded
queue, callers that left or whose deadline passed dropped, and no wait for a lone caller;
on each engine."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from conftest import once_error

from ucall import RPCError, Server
from ucall.client import Client


def _client(port: int, transport: str) -> Client:
    if transport == "ws":
        return Client(f"ws://127.0.0.1:{port}/")
    return Client("127.0.0.1", port, use_http=transport == "http")


class SlowBatch:
    """A batch that holds the queue while calls line up behind it: the procedure calls
    `hold()`, which returns once `behind` has seen the calls it sends queued."""

    def __init__(self, server: Server, method: str) -> None:
        self.server, self.method = server, method
        self.running, self.released = threading.Event(), threading.Event()

    def hold(self) -> None:
        self.running.set()
        assert self.released.wait(10), "the calls behind were queued"

    def behind(self, start_slow, send, count: int):
        """`send()`'s result, its `count` calls queued while the batch `start_slow()` runs,
        so that they make the next batch together; and what `start_slow()` returned."""
        self.running.clear()
        self.released.clear()
        with ThreadPoolExecutor(2) as pool:
            slow = pool.submit(start_slow)
            assert self.running.wait(10), "the slow batch runs"
            sent = pool.submit(send)
            deadline = time.monotonic() + 10
            while self.server.batch_stats()[self.method]["queued"] < count:
                assert time.monotonic() < deadline, "the calls behind the slow batch queue"
                time.sleep(0.005)
            self.released.set()
            return sent.result(10), slow.result(10)


@pytest.mark.parametrize("transport", ["http", "tcp", "ws"])
def test_calls_from_many_callers_run_together(make_server, transport):
    server = make_server()
    sizes: list[int] = []

    @server.batch(max_size=8, max_wait_ms=50)
    def square(x: list[int]) -> list[int]:
        sizes.append(len(x))
        time.sleep(0.03)  # calls that come meanwhile wait for the next batch
        return [v * v for v in x]

    server.start()

    def one(i: int) -> int:
        client = _client(server.port, transport)
        try:
            return int(client.square(i).json)
        finally:
            client.close()

    with ThreadPoolExecutor(24) as pool:
        results = list(pool.map(one, range(24)))
    assert results == [i * i for i in range(24)]
    assert sum(sizes) == 24
    assert max(sizes) <= 8
    assert len(sizes) < 24, f"calls queued during a batch share the next: {sizes}"
    stats = server.batch_stats()["square"]
    assert stats["calls"] == 24 and stats["batches"] == len(sizes)
    assert sum(stats["sizes"].values()) == len(sizes)


def test_numpy_batches_on_axis_0_and_jsonrpc_batches_join_one(make_server, wire):
    server = make_server()
    seen: list[tuple[int, ...]] = []
    slow_batch = SlowBatch(server, "norm")

    @server.batch(max_size=16, max_wait_ms=5)
    def norm(v: np.ndarray, scale: list[float]) -> np.ndarray:
        """The scaled length of a vector."""
        seen.append(v.shape)
        if -1.0 in scale:
            slow_batch.hold()
        return np.linalg.norm(v, axis=1) * np.asarray(scale)

    w, slow = wire(server), wire(server)
    assert w.result("norm", {"v": [3.0, 4.0], "scale": 1.0}) == 5.0
    calls = [{"jsonrpc": "2.0", "method": "norm", "params": [[0.0, float(i)], 2.0], "id": i} for i in range(1, 5)]
    (status, body), held = slow_batch.behind(
        lambda: slow.result("norm", [[1.0, 0.0], -1.0]), lambda: w.post(json.dumps(calls)), len(calls)
    )
    assert held == -1.0
    assert status == 200
    assert [r["result"] for r in json.loads(body)] == [2.0, 4.0, 6.0, 8.0]
    assert seen == [(1, 2), (1, 2), (4, 2)], "the array's four calls queued together make one batch"
    # Callers see the per-item signature.
    description = w.result("rpc.discover")
    (method,) = [m for m in description["methods"] if m["name"] == "norm"]
    assert method["params"][1]["schema"] == {"type": "number"}
    assert method["summary"] == "The scaled length of a vector."


def test_errors_reach_the_callers_they_belong_to(make_server, wire):
    server = make_server()
    slow_batch = SlowBatch(server, "check")

    @server.batch(max_size=8, max_wait_ms=5)
    def check(x: list[int]) -> list[int]:
        if 99 in x:
            slow_batch.hold()
        if 0 in x:
            raise RPCError(-32010, "zero in the batch")
        if 1000 in x:
            return [1] * (len(x) + 1)
        return [RPCError(-32011, "negative", {"x": v}) if v < 0 else ValueError("seven") if v == 7 else v for v in x]

    w, slow = wire(server), wire(server)

    def batch(*xs):
        calls = [{"jsonrpc": "2.0", "method": "check", "params": [x], "id": i} for i, x in enumerate(xs)]
        status, body = w.post(json.dumps(calls))
        assert status == 200
        return json.loads(body)

    def queued_together(*xs):
        """The replies to `xs`, sent as one array while a slow batch runs, so that they
        make the next batch together."""
        replies, held = slow_batch.behind(lambda: slow.result("check", [99]), lambda: batch(*xs), len(xs))
        assert held == 99
        return replies

    first, negative, seven, bad, last = batch(3, -3, 7, "x", 4)
    assert first["result"] == 3 and last["result"] == 4
    assert negative["error"] == {"code": -32011, "message": "negative", "data": {"x": -3}}
    assert seven["error"]["code"] == -32603 and "seven" in seven["error"]["message"]
    assert bad["error"]["code"] == -32602, "params that do not bind answer that caller only"
    for reply in queued_together(0, 5):
        assert reply["error"]["code"] == -32010
    for reply in queued_together(1000, 5):
        assert reply["error"]["code"] == -32603
        assert "3 results for 2 calls" in reply["error"]["message"]


def test_a_full_queue_answers_at_once_saying_nothing_ran(make_server, wire):
    server = make_server()
    entered = threading.Event()
    release = threading.Event()

    @server.batch(max_size=4, max_wait_ms=1, max_queue=1)
    def slow(x: list[int]) -> list[int]:
        entered.set()
        release.wait(10)
        return x

    first, second, third = wire(server), wire(server), wire(server)
    with ThreadPoolExecutor(2) as pool:
        running = pool.submit(first.result, "slow", [1])
        assert entered.wait(5)
        queued = pool.submit(second.result, "slow", [2])
        deadline = time.monotonic() + 5
        while server.batch_stats()["slow"]["queued"] < 1 and time.monotonic() < deadline:
            time.sleep(0.01)
        asked = time.monotonic()
        status, body = third.post(json.dumps({"jsonrpc": "2.0", "method": "slow", "params": [3], "id": 3}))
        assert time.monotonic() - asked < 2, "refused at once"
        release.set()
        assert (running.result(10), queued.result(10)) == (1, 2)
    assert status == 503
    error = json.loads(body)["error"]
    assert error["code"] == -32000
    assert error["data"]["executed"] is False
    assert server.batch_stats()["slow"]["rejected"] == 1


def test_a_caller_that_left_is_dropped_before_its_batch_runs(make_server, wire):
    server = make_server()
    entered = threading.Event()
    release = threading.Event()
    sizes: list[int] = []

    @server.batch(max_size=8, max_wait_ms=1)
    def slow(x: list[int]) -> list[int]:
        sizes.append(len(x))
        entered.set()
        release.wait(10)
        return x

    first_wire, staying_wire = wire(server), wire(server)

    def queued(n: int) -> None:
        deadline = time.monotonic() + 5
        while server.batch_stats()["slow"]["queued"] < n and time.monotonic() < deadline:
            time.sleep(0.01)
        assert server.batch_stats()["slow"]["queued"] == n

    with ThreadPoolExecutor(2) as pool:
        first = pool.submit(first_wire.result, "slow", [1])
        assert entered.wait(5)
        request = json.dumps({"jsonrpc": "2.0", "method": "slow", "params": [2], "id": 2}).encode()
        leaving = socket.create_connection(("127.0.0.1", server.port), timeout=5)
        leaving.sendall(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s" % (len(request), request))
        queued(1)
        leaving.close()
        staying = pool.submit(staying_wire.result, "slow", [3])
        queued(2)
        time.sleep(0.1)  # the server sees the close
        release.set()
        assert (first.result(10), staying.result(10)) == (1, 3)
    assert sizes == [1, 1]
    assert server.batch_stats()["slow"]["abandoned"] == 1


def test_a_call_whose_deadline_passed_is_dropped_before_its_batch_runs(make_server, wire):
    server = make_server()
    entered = threading.Event()
    release = threading.Event()
    seen: list[list[int]] = []

    @server.batch(max_size=8, max_wait_ms=1)
    def slow(x: list[int]) -> list[int]:
        seen.append(list(x))
        entered.set()
        release.wait(10)
        return [v * v for v in x]

    first_wire, batch_wire, single_wire = wire(server), wire(server), wire(server)

    def queued(n: int) -> None:
        deadline = time.monotonic() + 5
        while server.batch_stats()["slow"]["queued"] < n and time.monotonic() < deadline:
            time.sleep(0.01)
        assert server.batch_stats()["slow"]["queued"] == n

    hurried = {"jsonrpc": "2.0", "method": "slow", "params": [2], "id": 2, "timeout": 0.05}
    patient = {"jsonrpc": "2.0", "method": "slow", "params": [3], "id": 3, "timeout": 10}
    with ThreadPoolExecutor(3) as pool:
        first = pool.submit(first_wire.result, "slow", [1])
        assert entered.wait(5)
        # Queued behind the running batch: a JSON-RPC batch with a caller that waits 50 ms and
        # one that waits 10 s, and a single call that waits 50 ms.
        in_batch = pool.submit(batch_wire.post, json.dumps([hurried, patient]))
        queued(2)
        single = pool.submit(single_wire.post, json.dumps({**hurried, "id": 4}))
        queued(3)
        time.sleep(0.15)
        release.set()
        assert first.result(10) == 1
        status, body = single.result(10)
        replies = json.loads(in_batch.result(10)[1])
    assert status == 504, body
    assert json.loads(body)["error"] == {"code": -32000, "message": "Deadline exceeded"}
    assert replies[0]["error"]["code"] == -32000 and replies[1]["result"] == 9, replies
    assert seen == [[1], [3]], "the calls past their deadline did not run"
    stats = server.batch_stats()["slow"]
    assert (stats["expired"], stats["calls"]) == (2, 2), stats


def test_async_batch_functions(make_server, wire):
    server = make_server()
    sizes: list[int] = []

    @server.batch(max_size=32, max_wait_ms=20)
    async def double(x: list[int]) -> list[int]:
        sizes.append(len(x))
        await asyncio.sleep(0.05)
        return [2 * v if v != 5 else KeyError("five") for v in x]

    @server.batch()
    async def broken(x: list[int]) -> list[int]:
        raise RPCError(-32012, "async failure")

    wires = [wire(server) for _ in range(16)]
    with ThreadPoolExecutor(16) as pool:
        replies = list(pool.map(lambda i: wires[i].call("double", [i]), range(16)))
    assert [r.get("result") for r in replies] == [2 * i if i != 5 else None for i in range(16)]
    assert replies[5]["error"]["code"] == -32603
    assert sum(sizes) == 16
    assert once_error(server.port, "broken", [1])["code"] == -32012


def test_a_lone_caller_waits_for_nobody(make_server, wire):
    server = make_server()

    @server.batch(max_size=32, max_wait_ms=2000)
    def square(x: list[int]) -> list[int]:
        return [v * v for v in x]

    w = wire(server)
    started = time.monotonic()
    assert [w.result("square", [i]) for i in range(20)] == [i * i for i in range(20)]
    assert time.monotonic() - started < 2, "a lone caller's call does not wait max_wait_ms"
    stats = server.batch_stats()["square"]
    assert stats["batches"] == 20 and stats["max_queue_wait_us"] < 1_000_000


def test_a_lone_call_runs_on_the_worker_and_a_slow_one_holds_no_other_connection(make_server, wire):
    """A lone caller's call runs where an ordinary call runs (no switch to the batch
    thread); when it turns slow, the worker's other connections are still served."""
    server = make_server(threads=1)
    threads: list[str] = []

    @server.batch(max_size=8, max_wait_ms=5)
    def nap(seconds: list[float]) -> list[float]:
        with open(f"/proc/self/task/{threading.get_native_id()}/comm") as comm:  # the OS thread's name
            threads.append(comm.read().strip())
        time.sleep(max(seconds))
        return seconds

    @server
    def ping() -> str:
        return "pong"

    w, other = wire(server), wire(server)
    # The first call may find a batch thread still starting (on a loaded host it starts
    # late, then looks at the queue): it may take that one.
    assert w.result("nap", [0.0]) == 0.0
    threads.clear()
    for _ in range(5):
        assert w.result("nap", [0.0]) == 0.0
    assert not any(name.startswith("ucall-batch") for name in threads), threads
    with ThreadPoolExecutor(1) as pool:
        slow = pool.submit(w.result, "nap", [0.5])
        time.sleep(0.1)  # the slow batch is running
        started = time.monotonic()
        assert other.result("ping") == "pong"
        assert time.monotonic() - started < 0.3, "another connection waited for the slow batch"
        assert slow.result(10) == 0.5


def test_signatures_that_cannot_batch_are_refused_at_the_decorator():
    server = Server(port=0)
    with pytest.raises(TypeError, match="must be a list"):

        @server.batch
        def scalar(x: int) -> list[int]:
            return [x]

    with pytest.raises(TypeError, match="cannot have a default"):

        @server.batch()
        def defaulted(x: list[int] = []) -> list[int]:  # noqa: B006
            return x

    with pytest.raises(ValueError, match="max_size"):
        server.batch(max_size=0)

    @server.batch
    def plain(x: list[int]) -> list[int]:
        return x

    assert server.procedures["plain"] is plain
    assert plain([1, 2]) == [1, 2], "the function stays callable on a batch"


@pytest.mark.parametrize("is_async", [False, True])
def test_one_callers_wrong_shape_costs_that_caller_only(make_server, wire, is_async):
    """Six calls in one batch, one with an array of another shape: np.stack refused them
    all ("all input arrays must have the same shape": -32603 for six callers); now the odd
    one gets -32602 and the five run."""
    server = make_server()
    sizes: list[int] = []

    def norm(v: np.ndarray) -> np.ndarray:
        sizes.append(len(v))
        return np.linalg.norm(v, axis=1)

    async def anorm(v: np.ndarray) -> np.ndarray:
        return norm(v)

    server.batch(max_size=16, max_wait_ms=5)(anorm if is_async else norm)
    name = "anorm" if is_async else "norm"
    vectors = [[3.0, 4.0]] * 3 + [[1.0, 2.0, 2.0]] + [[6.0, 8.0]] * 2
    calls = [{"jsonrpc": "2.0", "method": name, "params": [v], "id": i} for i, v in enumerate(vectors)]
    status, body = wire(server).post(json.dumps(calls))
    assert status == 200
    replies = sorted(json.loads(body), key=lambda r: r["id"])
    assert [r.get("result") for r in replies] == [5.0, 5.0, 5.0, None, 10.0, 10.0], replies
    error = replies[3]["error"]
    assert error["code"] == -32602, error
    assert "(3,)" in error["message"] and "(2,)" in error["message"] and "'v'" in error["message"], error
    assert sizes == [5], "the five that fit ran as one batch"
