# SPDX-License-Identifier: Apache-2.0
"""The binary-message vectors of tests/vectors/binary (docs/wire.md) over HTTP, raw TCP and
WebSocket, each followed by an ordinary call on the same connection."""

from __future__ import annotations

import asyncio
import json

import pytest
from websockets.asyncio.client import connect

import binary_wire
from check_binary_vectors import check_binary_directory, load_binary_vectors
from jsonrpc_match import assert_reply_matches, assert_result
from wire import HttpConn, TcpConn, dumps, http_request, jsonrpc_post, request

VECTORS = load_binary_vectors()
OVER_TCP = [v for v in VECTORS if v["kind"] in ("body", "message")]
OVER_HTTP = [v for v in VECTORS if v["kind"] in ("body", "http")]
FOLLOW_UP = request("echo", ["follow-up"], id="follow-up")


def test_binary_vector_files_are_well_formed():
    assert check_binary_directory() == []


def http_form(vector: dict) -> tuple[dict[str, str], bytes, int]:
    if vector["kind"] == "http":
        return vector["http_headers"], vector["http_body"], vector["http_status"]
    headers = {"Content-Type": binary_wire.CONTENT_TYPE, binary_wire.JSON_LENGTH_HEADER: str(len(vector["json_bytes"]))}
    return headers, vector["body"], 200 if vector["reply"] is not None else 204


@pytest.mark.parametrize("vector", OVER_HTTP, ids=[v["name"] for v in OVER_HTTP])
def test_binary_vector_over_http(server, vector):
    headers, body, status = http_form(vector)
    with HttpConn(server) as conn:
        response = conn.roundtrip(http_request("POST", "/", body, headers))
        assert response.status == status, response
        if vector["reply"] is not None:
            assert response.media_type() == "application/json", response
            assert_reply_matches(vector, response.body)
        # The connection goes on, whatever the framing did.
        assert_result(conn.call(FOLLOW_UP), "follow-up", "follow-up")


@pytest.mark.parametrize("vector", OVER_TCP, ids=[v["name"] for v in OVER_TCP])
def test_binary_vector_over_tcp(server, vector):
    with TcpConn(server) as conn:
        conn.send(vector["tcp_message"] + dumps(FOLLOW_UP) + b"\n")
        if vector["reply"] is not None:
            assert_reply_matches(vector, conn.read_line())
        if vector.get("tcp_after") == "closed":
            conn.expect_closed()
        else:
            assert_result(conn.read_reply(), "follow-up", "follow-up")


@pytest.mark.parametrize("vector", OVER_TCP, ids=[v["name"] for v in OVER_TCP])
def test_binary_vector_over_websocket(server, vector):
    host, port = server
    expected = dict(vector, reply=vector.get("websocket_reply", vector["reply"]))

    async def session():
        async with connect(f"ws://{host}:{port}/", subprotocols=[binary_wire.SUBPROTOCOL]) as ws:
            assert ws.subprotocol == binary_wire.SUBPROTOCOL
            await ws.send(vector["tcp_message"])
            await ws.send(dumps(FOLLOW_UP).decode())
            if expected["reply"] is not None:
                assert_reply_matches(expected, await ws.recv())
            assert_result(json.loads(await ws.recv()), "follow-up", "follow-up")

    asyncio.run(asyncio.wait_for(session(), 20))


def test_plain_json_clients_see_no_change(server):
    # A JSON body whose object happens to look like a placeholder is plain JSON.
    with HttpConn(server) as conn:
        placeholder = {"$ucall": "bytes", "offset": 0, "length": 3}
        reply = conn.call(request("echo", [placeholder], id=1))
        assert_result(reply, placeholder, 1)
        response = conn.roundtrip(jsonrpc_post(dumps(request("hex", ["Zm9v"], id=2))))
        assert response.media_type() == "application/json"
        assert_result(response.json(), "666f6f", 2)
