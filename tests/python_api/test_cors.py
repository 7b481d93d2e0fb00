# SPDX-License-Identifier: Apache-2.0
"""CORS on the Python server: off by default, and when given origins, preflights answered
and replies to those origins marked (the rule itself is tested in the core)."""

from __future__ import annotations

import http.client
import json
from typing import Any, Callable

import pytest

from ucall import Server

PAGE = "http://127.0.0.1:5173"


def exchange(port: int, method: str, headers: dict[str, str], body: bytes | None = None) -> http.client.HTTPResponse:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    connection.request(method, "/", body, headers)
    reply = connection.getresponse()
    reply.read()
    connection.close()
    return reply


def preflight(port: int, origin: str) -> http.client.HTTPResponse:
    headers = {"Origin": origin, "Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": "content-type"}
    return exchange(port, "OPTIONS", headers)


def call_from(port: int, origin: str) -> tuple[http.client.HTTPResponse, Any]:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    body = json.dumps({"jsonrpc": "2.0", "method": "add", "params": [2, 3], "id": 1})
    connection.request("POST", "/", body, {"Origin": origin, "Content-Type": "application/json"})
    reply = connection.getresponse()
    result = json.loads(reply.read())["result"]
    connection.close()
    return reply, result


def with_add(server: Server) -> Server:
    @server
    def add(a: int, b: int) -> int:
        return a + b

    return server.start()


def test_off_by_default(make_server: Callable[..., Server]) -> None:
    server = with_add(make_server())
    # OPTIONS is answered on every route (RFC 9110 §9.3.7), but with no CORS grant a
    # browser refuses the page's call.
    answered = preflight(server.port, PAGE)
    assert answered.status == 204 and "POST" in (answered.getheader("Allow") or "")
    assert answered.getheader("Access-Control-Allow-Origin") is None
    assert answered.getheader("Access-Control-Allow-Methods") is None
    reply, result = call_from(server.port, PAGE)
    assert result == 5 and reply.getheader("Access-Control-Allow-Origin") is None


def test_allowed_origins_get_preflights_and_marked_replies(make_server: Callable[..., Server]) -> None:
    server = with_add(make_server(cors_origins=[PAGE], cors_headers=["Content-Type", "X-Trace"], cors_max_age=30))
    allowed = preflight(server.port, PAGE)
    assert allowed.status == 204
    assert allowed.getheader("Access-Control-Allow-Origin") == PAGE
    assert allowed.getheader("Access-Control-Allow-Methods") == "GET, POST"
    # The binary messages' header (docs/wire.md §3.1) is allowed beside those configured.
    assert allowed.getheader("Access-Control-Allow-Headers") == "Content-Type, X-Trace, UCall-JSON-Length"
    assert allowed.getheader("Access-Control-Max-Age") == "30"
    refused = preflight(server.port, "http://evil.example")
    assert refused.getheader("Access-Control-Allow-Origin") is None
    reply, result = call_from(server.port, PAGE)
    assert (result, reply.getheader("Access-Control-Allow-Origin"), reply.getheader("Vary")) == (5, PAGE, "Origin")
    assert reply.getheader("Access-Control-Expose-Headers") == "UCall-JSON-Length"
    reply, result = call_from(server.port, "http://evil.example")
    assert (result, reply.getheader("Access-Control-Allow-Origin")) == (5, None)


def test_any_origin(make_server: Callable[..., Server]) -> None:
    server = with_add(make_server(cors_origins=["*"]))
    reply, _ = call_from(server.port, "https://anywhere.example")
    assert reply.getheader("Access-Control-Allow-Origin") == "*"


def test_bad_settings_are_refused() -> None:
    with pytest.raises(TypeError, match="cors_origins takes a list"):
        Server(port=0, cors_origins=PAGE)
    with pytest.raises(ValueError, match="need cors_origins"):
        Server(port=0, cors_methods=["POST"])
