# SPDX-License-Identifier: Apache-2.0
"""`@server.middleware` runs around every call (sync and async, in order, and for each
call of a batch procedure), sees the context, method and params, and may reject a call;
`ucall.auth` checks an API key or a bearer token. A rejected call over HTTP answers 401/403 with the JSON-RPC error in the
body, over raw TCP and WebSocket the JSON-RPC error alone."""

from __future__ import annotations

import asyncio
import http.client
import json
from concurrent.futures import ThreadPoolExecutor

import pytest
from conftest import tcp_exchange
from websockets.sync.client import connect

from ucall import Context, HTTPError, auth


def call(method: str, params, id=1) -> bytes:
    return json.dumps({"jsonrpc": "2.0", "id": id, "method": method, "params": params}).encode()


def post(port: int, body: bytes, headers: dict[str, str] | None = None) -> tuple[int, dict]:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        connection.request("POST", "/", body, {"Content-Type": "application/json", **(headers or {})})
        reply = connection.getresponse()
        return reply.status, json.loads(reply.read())
    finally:
        connection.close()


@pytest.fixture
def seen():
    return []


@pytest.fixture
def server(make_server, seen):
    server = make_server()

    @server.middleware
    async def outer(ctx: Context, call_next):
        seen.append(("outer", ctx.method, ctx.params, ctx.transport))
        if ctx.headers.get("x-deny") == "yes":
            raise HTTPError(403, "denied by outer", {"who": "outer"})
        result = await call_next()
        seen.append(("outer after", ctx.method))
        return {"wrapped": result} if ctx.method == "wrapped" else result

    @server.middleware
    def inner(ctx: Context, call_next):
        # Inside an async middleware a plain one runs on the loop too; around an async
        # handler its call_next() gives an awaitable, passed on as it is.
        seen.append(("inner", ctx.method))
        if ctx.method == "sum" and ctx.params == [0, 0]:
            return "short-circuited"
        return call_next()

    @server
    def sum(a: int, b: int) -> int:
        return a + b

    @server
    async def wrapped(x: int) -> int:
        await asyncio.sleep(0)
        return x * 2

    @server
    def who(ctx: Context) -> str:
        return ctx.method

    return server.start()


def test_middleware_runs_around_every_call_in_order(server, seen):
    assert post(server.port, call("sum", [1, 2])) == (200, {"jsonrpc": "2.0", "id": 1, "result": 3})
    assert seen == [("outer", "sum", [1, 2], "http"), ("inner", "sum"), ("outer after", "sum")]
    # An async middleware changes the result of an async handler; a plain one answers
    # in the handler's place.
    assert post(server.port, call("wrapped", {"x": 4}))[1]["result"] == {"wrapped": 8}
    assert post(server.port, call("sum", [0, 0]))[1]["result"] == "short-circuited"
    # A handler taking the context gets the same call's.
    assert post(server.port, call("who", []))[1]["result"] == "who"
    # REST-style calls go through it too.
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    connection.request("GET", "/sum?a=2&b=5")
    assert json.loads(connection.getresponse().read()) == 7
    connection.close()
    assert ("outer", "sum", {"a": 2, "b": 5}, "http") in seen


def test_a_rejection_answers_http_with_its_status_and_the_error(server, seen):
    status, reply = post(server.port, call("sum", [1, 2]), {"X-Deny": "yes"})
    assert status == 403
    assert reply["error"] == {"code": -32000, "message": "denied by outer", "data": {"who": "outer"}}
    assert ("inner", "sum") not in seen  # rejected before the rest of the chain ran
    # Raw TCP: the middleware sees no header there.
    assert tcp_exchange(server.port, call("sum", [1, 2]), 1)[0]["result"] == 3
    assert ("outer", "sum", [1, 2], "tcp") in seen
    # WebSocket: the upgrade request's headers; the JSON-RPC error alone.
    with connect(f"ws://127.0.0.1:{server.port}/", additional_headers={"X-Deny": "yes"}) as ws:
        ws.send(call("sum", [1, 2]).decode())
        assert json.loads(ws.recv(timeout=10))["error"]["message"] == "denied by outer"


def test_middleware_runs_before_the_params_are_checked(server, seen):
    status, reply = post(server.port, call("sum", {"a": "x"}), {"X-Deny": "yes"})
    assert status == 403, "an unauthorized caller learns nothing of the params"
    status, reply = post(server.port, call("sum", {"a": "x"}))
    assert reply["error"]["code"] == -32602 and "'a'" in reply["error"]["message"]
    assert ("inner", "sum") in seen


@pytest.fixture
def guarded(make_server):
    server = make_server()
    server.middleware(auth.api_key("key-one", "key-two", public=["ping"]))

    @server
    def secret() -> str:
        return "the secret"

    @server
    def ping() -> str:
        return "pong"

    return server.start()


def test_api_key(guarded):
    assert post(guarded.port, call("secret", []), {"X-API-Key": "key-two"})[1]["result"] == "the secret"
    status, reply = post(guarded.port, call("secret", []))
    assert status == 401 and "X-API-Key" in reply["error"]["message"]
    status, reply = post(guarded.port, call("secret", []), {"X-API-Key": "key-on"})
    assert status == 403 and reply["error"]["message"] == "the API key is not valid"
    assert post(guarded.port, call("ping", []))[1]["result"] == "pong"
    # A batch keeps 200; each call has its own answer.
    status, replies = post(guarded.port, b"[" + call("secret", [], 1) + b"," + call("ping", [], 2) + b"]")
    assert status == 200 and "error" in replies[0] and replies[1]["result"] == "pong"
    # Raw TCP carries no header: refused (the JSON-RPC error alone), public methods pass.
    assert tcp_exchange(guarded.port, call("secret", []), 1)[0]["error"]["code"] == -32000
    assert tcp_exchange(guarded.port, call("ping", []), 1)[0]["result"] == "pong"


def test_bearer(make_server):
    server = make_server()
    server.middleware(auth.bearer("t0ken"))

    @server
    def secret() -> str:
        return "the secret"

    server.start()
    assert post(server.port, call("secret", []), {"Authorization": "Bearer t0ken"})[1]["result"] == "the secret"
    assert post(server.port, call("secret", []), {"Authorization": "bearer t0ken"})[0] == 200
    assert post(server.port, call("secret", []), {"Authorization": "Basic dTpw"})[0] == 401
    assert post(server.port, call("secret", []))[0] == 401
    assert post(server.port, call("secret", []), {"Authorization": "Bearer t0ke"})[0] == 403
    with connect(f"ws://127.0.0.1:{server.port}/", additional_headers={"Authorization": "Bearer t0ken"}) as ws:
        ws.send(call("secret", []).decode())
        assert json.loads(ws.recv(timeout=10))["result"] == "the secret"


def test_auth_refusals_say_nothing_ran_and_what_each_transport_can_carry(guarded):
    status, reply = post(guarded.port, call("secret", []))
    assert status == 401 and reply["error"]["data"] == {"executed": False}, reply
    status, reply = post(guarded.port, call("secret", []), {"X-API-Key": "nope"})
    assert status == 403 and reply["error"]["data"] == {"executed": False}, reply
    # Raw TCP cannot carry the X-API-Key header the message used to ask for.
    error = tcp_exchange(guarded.port, call("secret", []), 1)[0]["error"]
    assert "raw TCP carries no headers" in error["message"] and error["data"] == {"executed": False}, error
    # Over WebSocket the refusal says nothing ran as HTTP's does (the JS client read
    # "executed: yes" there), and names the way a browser can send the key.
    with connect(f"ws://127.0.0.1:{guarded.port}/") as ws:
        ws.send(call("secret", []).decode())
        error = json.loads(ws.recv(timeout=10))["error"]
    assert error["data"] == {"executed": False} and "ucall.api-key." in error["message"], error


@pytest.mark.parametrize("kind", ["bearer", "api-key"])
def test_a_browser_sends_its_credential_as_a_websocket_subprotocol(make_server, kind):
    """Browsers set no headers on a WebSocket: the credential goes as the subprotocol
    `ucall.<kind>.<base64url>` beside `ucall`, which the server selects (a browser fails a
    handshake whose answer selects none of the subprotocols it offered)."""
    import base64

    server = make_server()
    server.middleware(auth.bearer("t0ken/+") if kind == "bearer" else auth.api_key("k3y?"))

    @server
    def secret() -> str:
        return "the secret"

    server.start()
    good = "t0ken/+" if kind == "bearer" else "k3y?"
    for credential, expected in [(good, "the secret"), ("wrong", 403)]:
        encoded = base64.urlsafe_b64encode(credential.encode()).decode().rstrip("=")
        protocols = ["ucall", f"ucall.{kind}.{encoded}"]
        with connect(f"ws://127.0.0.1:{server.port}/", subprotocols=protocols) as ws:
            assert ws.subprotocol == "ucall"
            ws.send(call("secret", []).decode())
            reply = json.loads(ws.recv(timeout=10))
        if expected == 403:
            assert reply["error"]["code"] == -32000 and "not valid" in reply["error"]["message"], reply
        else:
            assert reply["result"] == expected, reply


def test_auth_needs_a_key():
    with pytest.raises(ValueError, match="non-empty key"):
        auth.api_key()
    with pytest.raises(ValueError, match="non-empty key"):
        auth.bearer("")


def test_middleware_is_registered_before_start(make_server):
    server = make_server()
    with pytest.raises(TypeError):
        server.middleware(42)
    server.start()
    with pytest.raises(RuntimeError, match="before the server starts"):
        server.middleware(lambda ctx, call_next: call_next())


@pytest.mark.parametrize("asynchronous", [False, True])
def test_middleware_runs_for_each_batched_call(make_server, asynchronous):
    """Around a batch procedure the middleware runs for each call as its batch starts: a
    refused caller gets its error, the others go on in the batch; `call_next()` gives None."""
    server = make_server()
    seen: list[tuple] = []
    server.middleware(auth.api_key("k"))

    def check(ctx: Context) -> None:
        seen.append((ctx.method, ctx.params, ctx.transport))
        if ctx.params[0] < 0:
            raise HTTPError(422, "no negative numbers")

    if asynchronous:

        @server.middleware
        async def no_negatives(ctx: Context, call_next):
            await asyncio.sleep(0)
            check(ctx)
            assert await call_next() is None
            return "ignored: results come from the batch"

    else:

        @server.middleware
        def no_negatives(ctx: Context, call_next):
            check(ctx)
            assert call_next() is None
            return "ignored: results come from the batch"

    ran: list[int] = []

    @server.batch(max_size=16, max_wait_ms=200)
    def double(x: list[int]) -> list[int]:
        ran.extend(x)
        return [2 * v for v in x]

    server.start()
    calls = [(1, {"X-API-Key": "k"}), (-2, {"X-API-Key": "k"}), (3, {}), (4, {"X-API-Key": "k"})]
    with ThreadPoolExecutor(len(calls)) as pool:
        answers = list(pool.map(lambda c: post(server.port, call("double", [c[0]]), c[1]), calls))
    assert answers[0] == (200, {"jsonrpc": "2.0", "id": 1, "result": 2})
    assert answers[1][0] == 422 and answers[1][1]["error"]["message"] == "no negative numbers"
    assert answers[2][0] == 401 and "X-API-Key" in answers[2][1]["error"]["message"]
    assert answers[3] == (200, {"jsonrpc": "2.0", "id": 1, "result": 8})
    # The key check refused one caller before the second middleware saw it.
    assert sorted(seen) == [("double", [-2], "http"), ("double", [1], "http"), ("double", [4], "http")]
    # Only the admitted calls reached the batch function.
    assert sorted(ran) == [1, 4]
