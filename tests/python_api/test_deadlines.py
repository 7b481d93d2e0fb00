# SPDX-License-Identifier: Apache-2.0
"""Deadlines: a procedure's `timeout=` and the caller's (the `UCall-Timeout` header, or the
request's `"timeout"` member over any transport). At the deadline the caller gets
"deadline exceeded" at once (HTTP 504), an `async def` handler is cancelled, a plain
one's late result is dropped, and the connection goes on serving in order. The Python
client sends its own `timeout=` as the deadline."""

from __future__ import annotations

import asyncio
import http.client
import json
import socket
import threading
import time

import pytest
from websockets.sync.client import connect

from ucall import Context, RPCError, TimeoutError
from ucall.client import AsyncClient, Client

EXCEEDED = "Deadline exceeded"


@pytest.fixture
def events():
    return {"cancelled": threading.Event(), "finished": threading.Event()}


@pytest.fixture
def server(make_server, events):
    server = make_server()

    @server(timeout=0.3)
    def slow(seconds: float) -> float:
        time.sleep(seconds)
        events["finished"].set()
        return seconds

    async def asleep(seconds: float) -> float:
        try:
            await asyncio.sleep(seconds)
        except asyncio.CancelledError:
            events["cancelled"].set()
            raise
        return seconds

    server.route(asleep, "aslow", timeout=0.3)
    server.route(asleep, "anap")

    @server
    def nap(seconds: float) -> float:
        time.sleep(seconds)
        return seconds

    @server
    def budget(ctx: Context) -> float | None:
        return ctx.timeout

    @server(timeout=0.5)
    def left(ctx: Context) -> float:
        return ctx.deadline - time.monotonic()

    @server
    def unbounded(ctx: Context) -> list:
        return [ctx.timeout, ctx.deadline]

    return server.start()


def rpc(method: str, params, id=1, **extra) -> bytes:
    return json.dumps({"jsonrpc": "2.0", "id": id, "method": method, "params": params, **extra}).encode()


def post(port: int, body: bytes, headers: dict[str, str] | None = None) -> tuple[int, dict, float]:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    started = time.monotonic()
    try:
        connection.request("POST", "/", body, {"Content-Type": "application/json", **(headers or {})})
        reply = connection.getresponse()
        return reply.status, json.loads(reply.read()), time.monotonic() - started
    finally:
        connection.close()


def test_a_procedure_timeout_answers_at_once_and_drops_the_late_result(server, events):
    status, reply, took = post(server.port, rpc("slow", [1.5]))
    assert status == 504 and reply["error"]["message"] == EXCEEDED, reply
    assert took < 1.2, f"answered after {took:.2f} s, not at the deadline"
    # The same connection goes on, in order; the late result never shows up in a reply.
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
        sock.sendall(rpc("slow", [1.0], 1) + b"\n" + rpc("slow", [0.01], 2) + b"\n")
        lines = sock.makefile("rb")
        first, second = json.loads(lines.readline()), json.loads(lines.readline())
    assert first["id"] == 1 and first["error"]["message"] == EXCEEDED
    assert second == {"jsonrpc": "2.0", "id": 2, "result": 0.01}
    assert events["finished"].wait(5), "the plain handler still ran to its end"


def test_an_async_handler_is_cancelled_at_its_deadline(server, events):
    status, reply, took = post(server.port, rpc("aslow", [5]))
    assert status == 504 and reply["error"]["message"] == EXCEEDED
    assert took < 2
    assert events["cancelled"].wait(5)


@pytest.mark.parametrize("transport", ["header", "member-http", "tcp", "websocket"])
def test_the_caller_sets_a_deadline(server, events, transport):
    started = time.monotonic()
    if transport == "header":
        status, reply, _ = post(server.port, rpc("anap", [5]), {"UCall-Timeout": "0.2"})
        assert status == 504
    elif transport == "member-http":
        status, reply, _ = post(server.port, rpc("anap", [5], timeout=0.2))
        assert status == 504
    elif transport == "tcp":
        with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
            sock.sendall(rpc("anap", [5], timeout=0.2) + b"\n")
            reply = json.loads(sock.makefile("rb").readline())
    else:
        with connect(f"ws://127.0.0.1:{server.port}/") as ws:
            ws.send(rpc("anap", [5], timeout=0.2).decode())
            reply = json.loads(ws.recv(timeout=10))
    assert reply["error"]["message"] == EXCEEDED and reply["error"]["code"] == -32000
    assert time.monotonic() - started < 2
    assert events["cancelled"].wait(5)


def test_the_shorter_deadline_wins_and_handlers_see_it(server):
    _, reply, took = post(server.port, rpc("slow", [1.0], timeout=30))
    assert reply["error"]["message"] == EXCEEDED and took < 1.0, "the procedure's 0.3 s wins"
    _, reply, _ = post(server.port, rpc("budget", [], timeout=2.5))
    assert reply["result"] == 2.5
    _, reply, _ = post(server.port, rpc("budget", []), {"UCall-Timeout": "1.5"})
    assert reply["result"] == 1.5
    _, reply, _ = post(server.port, rpc("budget", []))
    assert reply["result"] is None


def test_handlers_see_their_deadline_on_the_monotonic_clock(server):
    _, reply, _ = post(server.port, rpc("left", []))
    assert 0 < reply["result"] <= 0.5, reply
    _, reply, _ = post(server.port, rpc("left", [], timeout=0.1))
    assert 0 < reply["result"] <= 0.1, "the caller's shorter budget is the deadline"
    _, reply, _ = post(server.port, rpc("unbounded", []))
    assert reply["result"] == [None, None]
    _, reply, _ = post(server.port, rpc("unbounded", []), {"UCall-Timeout": "4"})
    assert reply["result"][0] == 4 and 0 < reply["result"][1] - time.monotonic() <= 4


def test_a_bad_deadline_is_refused(server):
    _, reply, _ = post(server.port, rpc("nap", [0], timeout=-1))
    assert reply["error"]["code"] == -32600 and "timeout" in reply["error"]["message"]
    _, reply, _ = post(server.port, rpc("nap", [0], timeout="soon"))
    assert reply["error"]["code"] == -32600
    status, reply, _ = post(server.port, rpc("nap", [0]), {"UCall-Timeout": "never"})
    assert status == 400 and "UCall-Timeout" in reply["message"]


def test_the_python_client_sends_its_timeout(server, events):
    with Client("127.0.0.1", server.port, timeout=0.4) as client:
        started = time.monotonic()
        # The server's "Deadline exceeded" and the client's own clock race: TimeoutError either way.
        with pytest.raises(TimeoutError):
            client.anap(5)
        assert time.monotonic() - started < 2
        assert events["cancelled"].wait(5), "the server stopped the call when the client stopped waiting"
        client.timeout = 5
        assert client.budget().json == 5, "the client goes on, with the new timeout sent"
    # The server's answer at the procedure's deadline, well before the client's: the same
    # TimeoutError, and the connection stays (the server answered).
    for use_http in (True, False):
        with Client("127.0.0.1", server.port, use_http=use_http, timeout=5) as client:
            with pytest.raises(TimeoutError, match="Deadline exceeded"):
                client.slow(1.0)
            assert client.budget().json == 5
    # Without a timeout of its own, a client gets the procedure's deadline as the error it is.
    with Client("127.0.0.1", server.port, timeout=None) as client:
        with pytest.raises(RPCError, match="Deadline exceeded"):
            client.slow(1.0).json
    with Client("127.0.0.1", server.port, timeout=7.5) as client:
        assert client.budget().json == 7.5
    with Client("127.0.0.1", server.port, use_http=False, timeout=3) as client:
        assert client.budget().json == 3


def test_the_async_client_sends_its_timeout(server):
    async def main() -> float:
        async with AsyncClient("127.0.0.1", server.port, timeout=0.3) as client:
            with pytest.raises(TimeoutError):
                await client.anap(5)
            client.timeout = 6
            return (await client.budget()).json

    assert asyncio.run(main()) == 6


def test_timeout_must_be_positive(make_server):
    server = make_server()
    with pytest.raises(ValueError, match="positive"):

        @server(timeout=0)
        def f() -> None: ...


def test_rest_calls_and_batch_elements_have_deadlines(server):
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    try:
        started = time.monotonic()
        connection.request("GET", "/nap?seconds=3", headers={"UCall-Timeout": "0.1"})
        reply = connection.getresponse()
        assert (reply.status, json.loads(reply.read())["message"]) == (504, EXCEEDED)
        assert time.monotonic() - started < 2
        batch = [json.loads(rpc("nap", [3], 1, timeout=0.1)), json.loads(rpc("nap", [0.01], 2))]
        connection.request("POST", "/", json.dumps(batch))
        reply = connection.getresponse()
        # A batch answers 200 whatever its calls' errors; each element has its own deadline.
        assert reply.status == 200
        first, second = json.loads(reply.read())
        assert first["error"]["message"] == EXCEEDED and second["result"] == 0.01
    finally:
        connection.close()
