# SPDX-License-Identifier: Apache-2.0
"""Rate limits from Python: ``Server(rate_limit="3/min")`` for every procedure,
``@server(rate_limit="1/min")`` for one, ``ucall serve --rate-limit``. A call past its
client's limit is refused before the handler runs: HTTP 429 with ``Retry-After``; over raw
TCP and WebSocket the JSON-RPC error -32029 with ``data.retry_after_ms`` and
``"executed": false``. The refusals are counted in ``/metrics``; a peer past
``max_connections_per_peer`` is closed at accept."""

from __future__ import annotations

import http.client
import json
import socket
import textwrap

import pytest
from conftest import serving, tcp_exchange
from websockets.sync.client import connect

from ucall import RPCError
from ucall.client import Client

RATE_LIMITED = -32029


def post(port: int, method: str, id: int = 1, headers: dict[str, str] | None = None) -> tuple[int, dict, dict]:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        body = json.dumps({"jsonrpc": "2.0", "method": method, "id": id})
        connection.request("POST", "/", body, {"Content-Type": "application/json", **(headers or {})})
        reply = connection.getresponse()
        return reply.status, dict(reply.getheaders()), json.loads(reply.read())
    finally:
        connection.close()


def assert_refused(error: dict, limit: str) -> None:
    assert error["code"] == RATE_LIMITED, error
    assert error["data"]["executed"] is False, error
    assert error["data"]["limit"] == limit, error
    assert error["data"]["retry_after_ms"] > 0, error
    assert limit in error["message"], error


def counting(make_server, **options):
    server = make_server(**options)
    runs = []

    @server
    def count() -> int:
        runs.append(1)
        return len(runs)

    @server(rate_limit="1/min")
    def once() -> int:
        runs.append(1)
        return len(runs)

    return server, runs


def test_a_call_past_the_server_limit_gets_429_and_does_not_run(make_server):
    server, runs = counting(make_server, rate_limit="3/min")
    server.start()
    for n in (1, 2, 3):
        status, _, reply = post(server.port, "count", n)
        assert (status, reply.get("result")) == (200, n), reply
    status, headers, reply = post(server.port, "count", 4)
    assert status == 429, reply
    retry = int(headers["Retry-After"])
    assert 1 <= retry <= 20, headers  # 3 a minute: a token every 20 s
    assert reply["id"] == 4
    assert_refused(reply["error"], "3/min")
    assert len(runs) == 3
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    connection.request("GET", "/metrics")
    page = connection.getresponse().read().decode()
    connection.close()
    assert 'ucall_requests_refused_total{reason="rate_limited"} 1' in page, page


def test_a_procedure_limit_refuses_over_raw_tcp_and_websocket(make_server):
    server, runs = counting(make_server)
    server.start()
    calls = b"".join(
        json.dumps({"jsonrpc": "2.0", "method": m, "id": i}).encode() + b"\n"
        for i, m in ((1, "once"), (2, "once"), (3, "count"))
    )
    first, second, third = tcp_exchange(server.port, calls, 3)
    assert first["result"] == 1 and third["result"] == 2, (first, third)
    assert_refused(second["error"], "1/min")
    with connect(f"ws://127.0.0.1:{server.port}/") as ws:
        ws.send(json.dumps({"jsonrpc": "2.0", "method": "once", "id": 4}))
        assert_refused(json.loads(ws.recv(timeout=10))["error"], "1/min")
    assert len(runs) == 2
    # The Python client raises the refusal as an RPCError with its data.
    with Client(port=server.port) as client, pytest.raises(RPCError) as refused:
        client.once().json  # noqa: B018 (reading it raises)
    assert refused.value.code == RATE_LIMITED and refused.value.data["executed"] is False


def test_clients_keyed_by_bearer_token_each_get_their_budget(make_server):
    server, runs = counting(make_server, rate_limit="1/min", rate_limit_key="bearer")
    server.start()
    assert post(server.port, "count", 1, {"Authorization": "Bearer alice"})[0] == 200
    assert post(server.port, "count", 2, {"Authorization": "Bearer bob"})[0] == 200
    assert post(server.port, "count", 3, {"Authorization": "Bearer alice"})[0] == 429
    assert len(runs) == 2


def test_a_peer_past_its_connection_cap_is_closed(make_server):
    server, _ = counting(make_server, max_connections_per_peer=1)
    server.start()
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as kept:
        kept.sendall(b'{"jsonrpc":"2.0","method":"count","id":1}\n')
        assert json.loads(kept.makefile("rb").readline())["result"] == 1
        with socket.create_connection(("127.0.0.1", server.port), timeout=10) as extra:
            extra.sendall(b'{"jsonrpc":"2.0","method":"count","id":2}\n')
            # Closed unread: an end of stream, or a reset when the call arrived before the close.
            try:
                received = extra.recv(100)
            except ConnectionResetError:
                received = b""
            assert received == b"", "the second connection is closed without a reply"


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        ({"rate_limit": "100/fortnight"}, "expected <calls>/<unit>"),
        ({"rate_limit": "0/s"}, "at least 1"),
        ({"rate_limit_key": "cookie"}, '"peer", "bearer", "header:<name>" or "middleware"'),
        ({"trusted_proxies": ["10.0.0.0/33"]}, "trusted proxy"),
        ({"max_connections_per_peer": 0}, "max_connections_per_peer must be at least 1"),
    ],
)
def test_settings_the_core_cannot_take_are_refused_at_once(make_server, options, expected):
    with pytest.raises(ValueError, match=None) as error:
        make_server(**options)
    assert expected in str(error.value)


def test_a_procedure_rate_that_does_not_parse_is_refused_at_the_decorator(make_server):
    server = make_server()
    with pytest.raises(ValueError, match="expected <calls>/<unit>"):

        @server(rate_limit="ten a second")
        def f() -> None: ...


def test_ucall_serve_takes_rate_limit_flags(tmp_path, engine):
    (tmp_path / "app.py").write_text(
        textwrap.dedent("""
        from ucall import Server
        server = Server()

        @server
        def hello() -> str:
            return "hello"
    """)
    )
    flags = ["--rate-limit", "2/min", "--rate-limit-key", "header:X-API-Key", "--max-connections-per-peer", "8"]
    serve = ["-m", "ucall", "serve", "app:server", "--host", "127.0.0.1", "--port", "0", *flags]
    with serving(serve, engine, cwd=tmp_path) as (_, port):
        statuses = [post(port, "hello", n, {"X-API-Key": "k1"})[0] for n in range(3)]
        assert statuses == [200, 200, 429]
        assert post(port, "hello", 4, {"X-API-Key": "k2"})[0] == 200


# ---------------------------------------------------------------- keyed by a middleware


def tenant_keyed(make_server, **options):
    """A server whose middleware keys each call by the ``X-Tenant`` header (HTTP) or the
    ``tenant`` param (any transport); a call with neither is left to its peer address."""
    server = make_server(rate_limit="2/min", rate_limit_key="middleware", **options)
    runs: list[str] = []

    @server.middleware
    def by_tenant(ctx, call_next):
        params = ctx.params if isinstance(ctx.params, dict) else {}
        tenant = ctx.headers.get("x-tenant") or params.get("tenant")
        if tenant:
            ctx.limit_by(tenant)
        return call_next()

    @server
    def work(tenant: str = "") -> int:
        runs.append(tenant)
        return len(runs)

    return server, runs


def post_json(port: int, payload: dict, headers: dict[str, str] | None = None) -> tuple[int, dict, dict]:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        connection.request("POST", "/", json.dumps(payload), {"Content-Type": "application/json", **(headers or {})})
        reply = connection.getresponse()
        return reply.status, dict(reply.getheaders()), json.loads(reply.read())
    finally:
        connection.close()


def metrics_page(port: int) -> str:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        connection.request("GET", "/metrics")
        return connection.getresponse().read().decode()
    finally:
        connection.close()


def test_a_middleware_key_gives_callers_from_one_address_separate_buckets(make_server):
    server, runs = tenant_keyed(make_server)
    server.start()
    call = {"jsonrpc": "2.0", "method": "work", "id": 1}
    for tenant in ("a", "b"):  # four calls from 127.0.0.1: a peer-keyed limit of 2 would refuse two
        for _ in range(2):
            status, _, reply = post_json(server.port, call, {"X-Tenant": tenant})
            assert status == 200 and "result" in reply, reply
    status, headers, reply = post_json(server.port, call, {"X-Tenant": "a"})
    assert status == 429, reply
    assert 1 <= int(headers["Retry-After"]) <= 30, headers  # 2 a minute: a token every 30 s
    assert_refused(reply["error"], "2/min")
    assert len(runs) == 4  # the refused call did not run
    page = metrics_page(server.port)
    # Counted once: the core did not also refuse (or count) the call by its address.
    assert 'ucall_requests_refused_total{reason="rate_limited"} 1' in page, page


def test_one_middleware_key_shares_a_bucket_across_connections_and_transports(make_server):
    server, runs = tenant_keyed(make_server)
    server.start()
    status, _, reply = post_json(server.port, {"jsonrpc": "2.0", "method": "work", "id": 1}, {"X-Tenant": "t"})
    assert status == 200 and "result" in reply, reply
    calls = b"".join(
        json.dumps({"jsonrpc": "2.0", "method": "work", "params": {"tenant": "t"}, "id": n}).encode() + b"\n"
        for n in (2, 3)
    )
    second, third = tcp_exchange(server.port, calls, 2)
    assert second["result"] == 2, second
    assert_refused(third["error"], "2/min")
    assert third["error"]["data"]["retry_after_ms"] <= 30_000, third
    assert runs == ["", "t"]  # the HTTP call took its tenant from the header; the third never ran
    # Another tenant over raw TCP still has its own bucket.
    other_call = json.dumps({"jsonrpc": "2.0", "method": "work", "params": {"tenant": "u"}, "id": 4})
    (other,) = tcp_exchange(server.port, other_call.encode() + b"\n", 1)
    assert other["result"] == 3, other
    assert 'ucall_requests_refused_total{reason="rate_limited"} 1' in metrics_page(server.port)


def test_a_call_the_middleware_does_not_key_is_limited_by_its_address(make_server):
    server, runs = tenant_keyed(make_server)
    server.start()
    call = {"jsonrpc": "2.0", "method": "work", "id": 1}
    for _ in range(2):
        status, _, reply = post_json(server.port, call)
        assert status == 200 and "result" in reply, reply
    status, headers, reply = post_json(server.port, call)
    assert status == 429 and "Retry-After" in headers, reply
    assert_refused(reply["error"], "2/min")
    assert len(runs) == 2
    # A keyed call from the same address is not held back by the address's bucket.
    status, _, reply = post_json(server.port, call, {"X-Tenant": "a"})
    assert status == 200 and "result" in reply, reply


def test_middleware_keys_need_a_middleware_and_the_mode(make_server):
    server = make_server(rate_limit="2/min", rate_limit_key="middleware")

    @server
    def work() -> int:
        return 1

    with pytest.raises(ValueError, match="ctx.limit_by"):
        server.start()

    plain = make_server(rate_limit="2/min")
    seen: list[str] = []

    @plain.middleware
    def keys(ctx, call_next):
        try:
            ctx.limit_by("a")
        except RuntimeError as error:
            seen.append(str(error))
        return call_next()

    @plain
    def other() -> int:
        return 1

    plain.start()
    status, _, reply = post_json(plain.port, {"jsonrpc": "2.0", "method": "other", "id": 1})
    assert (status, reply.get("result")) == (200, 1), reply
    assert seen and 'rate_limit_key="middleware"' in seen[0], seen


def test_an_async_middleware_keys_a_procedure_limit(make_server):
    server = make_server(rate_limit_key="middleware")
    runs: list[str] = []

    @server.middleware
    async def by_tenant(ctx, call_next):
        ctx.limit_by(ctx.headers.get("x-tenant", "none"))
        return await call_next()

    @server(rate_limit="1/min")
    def once() -> int:
        runs.append("once")
        return len(runs)

    server.start()
    call = {"jsonrpc": "2.0", "method": "once", "id": 1}
    assert post_json(server.port, call, {"X-Tenant": "a"})[0] == 200
    assert post_json(server.port, call, {"X-Tenant": "b"})[0] == 200
    status, headers, reply = post_json(server.port, call, {"X-Tenant": "a"})
    assert status == 429 and "Retry-After" in headers, reply
    assert_refused(reply["error"], "1/min")
    assert runs == ["once", "once"]


def test_a_middleware_key_limits_the_calls_of_a_batch_procedure(make_server):
    server = make_server(rate_limit="1/min", rate_limit_key="middleware")
    items: list[int] = []

    @server.middleware
    def by_tenant(ctx, call_next):
        ctx.limit_by(ctx.headers.get("x-tenant", "none"))
        return call_next()

    @server.batch(max_size=4, max_wait_ms=2)
    def double(x: list[int]) -> list[int]:
        items.extend(x)
        return [2 * v for v in x]

    server.start()

    def call(x: int, tenant: str) -> tuple[int, dict, dict]:
        payload = {"jsonrpc": "2.0", "method": "double", "params": {"x": x}, "id": x}
        return post_json(server.port, payload, {"X-Tenant": tenant})

    assert call(1, "a")[2].get("result") == 2
    assert call(2, "b")[2].get("result") == 4
    status, headers, reply = call(3, "a")
    assert status == 429 and "Retry-After" in headers, reply
    assert_refused(reply["error"], "1/min")
    assert items == [1, 2]  # the refused call never reached the batch
