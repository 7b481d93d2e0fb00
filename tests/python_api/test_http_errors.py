# SPDX-License-Identifier: Apache-2.0
"""`ucall.HTTPError(status, message, data)`: the status answers REST-style calls and single
JSON-RPC calls over HTTP (a batch keeps 200), the JSON-RPC error goes in the body, and raw
TCP gets the JSON-RPC error alone. Codes and statuses come from the core's one table."""

from __future__ import annotations

import http.client
import json

import pytest
from conftest import tcp_exchange

from ucall import ErrorCode, HTTPError, RPCError
from ucall.client import Client


@pytest.fixture
def users(make_server):
    server = make_server()

    @server
    def user(id: int) -> str:
        if id == 7:
            raise HTTPError(404, "no such user", {"id": id})
        if id == 8:
            raise HTTPError(400, "ids are positive")
        return "ann"

    @server
    async def reserve(name: str) -> str:
        raise HTTPError(409, f"{name} is taken", code=-32042)

    @server
    def later() -> None:
        raise HTTPError(503, "come back later")

    return server.start()


def request(port: int, method: str, path: str, body: bytes | None = None) -> tuple[int, str, dict]:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        connection.request(method, path, body, {"Content-Type": "application/json"})
        reply = connection.getresponse()
        return reply.status, reply.reason, json.loads(reply.read())
    finally:
        connection.close()


def rpc(method: str, params, id: int = 1) -> bytes:
    return json.dumps({"jsonrpc": "2.0", "id": id, "method": method, "params": params}).encode()


def test_rest_calls_answer_with_the_status(users):
    assert request(users.port, "GET", "/user?id=1") == (200, "OK", "ann")
    assert request(users.port, "GET", "/user?id=7") == (
        404, "Not Found", {"code": -32000, "message": "no such user", "data": {"id": 7}}
    )
    assert request(users.port, "GET", "/user?id=8") == (
        400, "Bad Request", {"code": ErrorCode.INVALID_PARAMS, "message": "ids are positive"}
    )
    assert request(users.port, "POST", "/reserve", b'{"name":"ann"}') == (
        409, "Conflict", {"code": -32042, "message": "ann is taken"}
    )
    assert request(users.port, "GET", "/later")[:2] == (503, "Service Unavailable")
    # Errors without a status keep the table's: 404 for an unknown method, 400 for bad params.
    assert request(users.port, "GET", "/nope")[:2] == (404, "Not Found")
    assert request(users.port, "GET", "/user?id=x")[:2] == (400, "Bad Request")


def test_a_single_jsonrpc_call_over_http_answers_with_the_status(users):
    status, _, reply = request(users.port, "POST", "/", rpc("user", [7], 5))
    assert status == 404
    assert reply == {"jsonrpc": "2.0", "id": 5, "error": {"code": -32000, "message": "no such user", "data": {"id": 7}}}
    status, reason, reply = request(users.port, "POST", "/", rpc("reserve", ["bob"]))
    assert (status, reason, reply["error"]["code"]) == (409, "Conflict", -32042)
    # A batch keeps 200: its calls' statuses may differ.
    batch = b"[" + rpc("user", [7], 1) + b"," + rpc("user", [1], 2) + b"]"
    status, _, replies = request(users.port, "POST", "/", batch)
    assert status == 200 and [r.get("result") for r in replies] == [None, "ann"]
    # An error without a status still answers 200 over JSON-RPC.
    assert request(users.port, "POST", "/", rpc("nope", []))[0] == 200


def test_the_clients_see_the_jsonrpc_error(users):
    for transport in ({}, {"use_http": False}):
        client = Client(port=users.port, **transport)
        with pytest.raises(RPCError) as raised:
            client.user(id=7).json  # noqa: B018
        assert (raised.value.code, raised.value.message, raised.value.data) == (-32000, "no such user", {"id": 7})


def test_raw_tcp_gets_only_the_jsonrpc_error(users):
    replies = tcp_exchange(users.port, rpc("user", [7]) + b"\n" + rpc("reserve", ["ann"], 2) + b"\n", 2)
    assert replies == [
        {"jsonrpc": "2.0", "id": 1, "error": {"code": -32000, "message": "no such user", "data": {"id": 7}}},
        {"jsonrpc": "2.0", "id": 2, "error": {"code": -32042, "message": "ann is taken"}},
    ]


def test_an_http_error_is_an_rpc_error_with_a_status():
    error = HTTPError(404, "gone", [1])
    assert isinstance(error, RPCError)
    assert (error.status, error.code, error.message, error.data) == (404, -32000, "gone", [1])
    assert HTTPError(500, "x").code == ErrorCode.INTERNAL_ERROR
    assert str(error) == "HTTP 404: gone (-32000): [1]"
    for status in (200, 399, 600, "404", True):
        with pytest.raises(ValueError, match="an HTTPError status is an error status from 400 to 599"):
            HTTPError(status, "x")
