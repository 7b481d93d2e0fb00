# SPDX-License-Identifier: Apache-2.0
"""`ucall.Context`: a handler parameter annotated with it gets how the call arrived
(transport, TLS, peer, header fields, id, method) over HTTP, raw TCP and WebSocket, and is
no part of the procedure's params or schema; `ctx.caller_gone` turns true once the caller
hangs up."""

from __future__ import annotations

import asyncio
import http.client
import json
import socket
import struct
import threading
import time

import pytest
from conftest import tcp_exchange
from websockets.sync.client import connect

import ucall
from ucall import Context


@pytest.fixture
def server(make_server):
    server = make_server()

    @server
    def whoami(name: str, ctx: Context) -> dict:
        return {
            "name": name,
            "transport": ctx.transport,
            "tls": ctx.tls,
            "peer": list(ctx.peer) if ctx.peer else None,
            "token": ctx.headers.get("x-token"),
            "id": ctx.id,
            "method": ctx.method,
        }

    @server
    async def first(ctx: ucall.Context, a: int, b: int = 2) -> list:
        return [ctx.transport, a, b]

    @server
    def plain(a: int) -> int:
        return a

    return server.start()


def post(port: int, body: dict, headers: dict[str, str]) -> tuple[int, dict, tuple[str, int]]:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        connection.request("POST", "/", json.dumps(body), {"Content-Type": "application/json", **headers})
        local = connection.sock.getsockname()
        reply = connection.getresponse()
        return reply.status, json.loads(reply.read()), local
    finally:
        connection.close()


def call(method: str, params, id=1) -> dict:
    return {"jsonrpc": "2.0", "id": id, "method": method, "params": params}


def test_http_calls_see_their_headers_and_peer(server):
    status, reply, local = post(server.port, call("whoami", ["ann"], "q-1"), {"X-Token": "s3cret"})
    assert status == 200
    assert reply["result"] == {
        "name": "ann",
        "transport": "http",
        "tls": False,
        "peer": [local[0], local[1]],
        "token": "s3cret",
        "id": "q-1",
        "method": "whoami",
    }
    # A REST-style call has a context too; its id is None.
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    connection.request("GET", "/whoami?name=bob", headers={"X-Token": "t"})
    result = json.loads(connection.getresponse().read())
    connection.close()
    assert (result["name"], result["token"], result["id"], result["transport"]) == ("bob", "t", None, "http")


def test_raw_tcp_calls_have_no_headers(server):
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
        local = sock.getsockname()
        sock.sendall(json.dumps(call("whoami", {"name": "cy"}, 9)).encode() + b"\n")
        reply = json.loads(sock.makefile("rb").readline())
    assert reply["result"]["transport"] == "tcp"
    assert reply["result"]["peer"] == [local[0], local[1]]
    assert (reply["result"]["token"], reply["result"]["id"]) == (None, 9)


def test_websocket_calls_see_the_upgrade_requests_headers(server):
    with connect(f"ws://127.0.0.1:{server.port}/", additional_headers={"X-Token": "up"}) as ws:
        local = ws.socket.getsockname()
        for id in (1, 2):
            ws.send(json.dumps(call("whoami", ["dee"], id)))
            result = json.loads(ws.recv(timeout=10))["result"]
            assert result["transport"] == "websocket" and result["token"] == "up" and result["id"] == id
            assert result["peer"] == [local[0], local[1]]


def test_the_context_may_come_first_and_is_no_param(server):
    # Positional params skip the context, wherever it is declared; async handlers get it too.
    assert tcp_exchange(server.port, json.dumps(call("first", [5])).encode(), 1)[0]["result"] == ["tcp", 5, 2]
    assert tcp_exchange(server.port, json.dumps(call("first", {"a": 1, "b": 3})).encode(), 1)[0]["result"] == [
        "tcp",
        1,
        3,
    ]
    # A caller cannot pass it: it is not a parameter.
    error = tcp_exchange(server.port, json.dumps(call("first", {"a": 1, "ctx": 0})).encode(), 1)[0]["error"]
    assert error["code"] == -32602 and "ctx" in error["message"]
    error = tcp_exchange(server.port, json.dumps(call("whoami", ["a", "b"])).encode(), 1)[0]["error"]
    assert error["code"] == -32602
    # Nor does the description list it.
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    connection.request("GET", "/openrpc.json")
    methods = {m["name"]: m for m in json.loads(connection.getresponse().read())["methods"]}
    connection.close()
    assert [p["name"] for p in methods["whoami"]["params"]] == ["name"]
    assert [p["name"] for p in methods["first"]["params"]] == ["a", "b"]
    assert tcp_exchange(server.port, json.dumps(call("plain", [4])).encode(), 1)[0]["result"] == 4


def test_a_context_param_must_be_passable_by_keyword(make_server):
    server = make_server()
    with pytest.raises(TypeError, match="passable by keyword"):

        @server
        def bad(ctx: Context, /) -> None: ...

    with pytest.raises(TypeError, match="more than one"):

        @server
        def twice(a: Context, b: Context) -> None: ...


class Watched:
    """What `wait_gone` and `await_gone` saw, by tag: whether the caller had gone, and when."""

    def __init__(self) -> None:
        self.seen: dict[str, tuple[bool, float]] = {}
        self.changed = threading.Condition()

    def record(self, tag: str, gone: bool) -> bool:
        with self.changed:
            self.seen[tag] = (gone, time.monotonic())
            self.changed.notify_all()
        return gone

    def wait(self, tag: str, limit: float = 10) -> tuple[bool, float]:
        with self.changed:
            assert self.changed.wait_for(lambda: tag in self.seen, timeout=limit), f"{tag}: the handler never ended"
            return self.seen[tag]


@pytest.fixture
def watching(make_server):
    """A server whose `wait_gone` (plain) and `await_gone` (async) wait up to `seconds` for
    their caller to go, and say whether it went."""
    server = make_server()
    watched = Watched()

    @server
    def wait_gone(tag: str, seconds: float, ctx: Context) -> bool:
        until = time.monotonic() + seconds
        while not ctx.caller_gone and time.monotonic() < until:
            time.sleep(0.01)
        return watched.record(tag, ctx.caller_gone)

    @server
    async def await_gone(tag: str, seconds: float, ctx: Context) -> bool:
        until = time.monotonic() + seconds
        while not ctx.caller_gone and time.monotonic() < until:
            await asyncio.sleep(0.01)
        return watched.record(tag, ctx.caller_gone)

    return server.start(), watched


def hang_up(port: int, transport: str, method: str, tag: str) -> float:
    """Call `method(tag, 30)` over `transport`, then hang up without reading the reply;
    returns when it hung up. Raw TCP resets the connection (a half-close alone may still
    wait for the reply); HTTP closes; WebSocket sends Close."""
    body = json.dumps(call(method, [tag, 30])).encode()
    if transport == "websocket":
        with connect(f"ws://127.0.0.1:{port}/") as ws:
            ws.send(body.decode())
            time.sleep(0.1)  # the call is under way
            hung_up = time.monotonic()
            ws.close()
        return hung_up
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    if transport == "http":
        sock.sendall(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
    else:
        sock.sendall(body + b"\n")
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    time.sleep(0.1)
    sock.close()
    return time.monotonic()


@pytest.mark.parametrize("method", ["wait_gone", "await_gone"])
@pytest.mark.parametrize("transport", ["http", "tcp", "websocket"])
def test_a_handler_sees_its_caller_hang_up(watching, transport, method):
    server, watched = watching
    tag = f"{transport}-{method}"
    hung_up = hang_up(server.port, transport, method, tag)
    gone, at = watched.wait(tag)
    assert gone, f"{tag}: the handler waited its 30 s without seeing the caller go"
    assert at - hung_up < 5, f"{tag}: seen {at - hung_up:.1f} s after the caller went"


@pytest.mark.parametrize("method", ["wait_gone", "await_gone"])
def test_a_caller_that_stays_is_not_gone(watching, method):
    server, watched = watching
    body = json.dumps(call(method, ["tcp-stays", 0.3])).encode()
    assert tcp_exchange(server.port, body, 1)[0]["result"] is False
    status, reply, _ = post(server.port, call(method, ["http-stays", 0.3]), {})
    assert (status, reply["result"]) == (200, False)
    with connect(f"ws://127.0.0.1:{server.port}/") as ws:
        ws.send(json.dumps(call(method, ["ws-stays", 0.3])))
        assert json.loads(ws.recv(timeout=10))["result"] is False
