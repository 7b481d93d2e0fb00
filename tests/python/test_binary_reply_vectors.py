# SPDX-License-Identifier: Apache-2.0
"""The binary reply vectors (tests/vectors/binary/replies, docs/wire.md) on the test server:
results that are bytes (`unhex`) and arrays (`floats`) come as attachments of a binary
reply to a caller that accepts one (a binary message over raw TCP and WebSocket, HTTP with
Accept) and in their plain JSON form to any other. The Rust spec server and the C one both
answer them; a server without deferred replies (the C API has none) answers the vectors of
`unhex_later` with -32601, and those are skipped there, saying so."""

from __future__ import annotations

import asyncio
import http.client
import json
import socket
from pathlib import Path
from typing import Any

import pytest
from websockets.asyncio.client import connect

import binary_wire

REPLIES = sorted((Path(binary_wire.__file__).parent / "binary" / "replies").glob("*.json"))


def tcp_exchange(address: tuple[str, int], text: bytes) -> tuple[bytes, bytes | None]:
    """`text` as a binary message (no attachments), and one reply."""
    with socket.create_connection(address, timeout=10) as sock:
        sock.sendall(binary_wire.message(text))
        reader = sock.makefile("rb")
        first = reader.read(1)
        if first[0] != binary_wire.MAGIC:
            return first + reader.readline().rstrip(b"\n"), None
        json_length, body_length = binary_wire.parse_prefix(first + reader.read(binary_wire.PREFIX_LEN - 1))
        return binary_wire.split_body(reader.read(body_length), json_length)


def http_exchange(address: tuple[str, int], text: bytes, accept: bool) -> tuple[int, bytes, bytes | None]:
    connection = http.client.HTTPConnection(*address, timeout=10)
    try:
        headers = {"Content-Type": "application/json"}
        if accept:
            headers["Accept"] = binary_wire.CONTENT_TYPE
        connection.request("POST", "/", text, headers)
        reply = connection.getresponse()
        body = reply.read()
        if reply.getheader("Content-Type") == binary_wire.CONTENT_TYPE:
            json_length = int(reply.getheader(binary_wire.JSON_LENGTH_HEADER) or "")
            return (reply.status, *binary_wire.split_body(body, json_length))
        return reply.status, body, None
    finally:
        connection.close()


def websocket_exchange(address: tuple[str, int], text: bytes) -> tuple[bytes, bytes | None]:
    async def session() -> tuple[bytes, bytes | None]:
        host, port = address
        async with connect(f"ws://{host}:{port}/", subprotocols=[binary_wire.SUBPROTOCOL]) as ws:  # type: ignore[list-item]
            await ws.send(binary_wire.message(text))
            reply = await ws.recv()
            if isinstance(reply, bytes):
                return binary_wire.parse_message(reply)
            return reply.encode(), None

    return asyncio.run(asyncio.wait_for(session(), 10))


def contains(expected: Any, actual: Any) -> bool:
    """Objects member by member (more members allowed), arrays and scalars whole."""
    if isinstance(expected, dict):
        return isinstance(actual, dict) and all(k in actual and contains(v, actual[k]) for k, v in expected.items())
    if isinstance(expected, list):
        return isinstance(actual, list) and len(expected) == len(actual) and all(map(contains, expected, actual))
    return bool(expected == actual)


def named(value: Any, section: bytes | None) -> Any:
    """`value` with each placeholder replaced by what it names: a server may lay its
    section out in its own order (docs/wire.md §4)."""
    if isinstance(value, dict) and binary_wire.MARKER in value and section is not None:
        found = binary_wire.placeholder(value)
        return {"kind": found.kind, "dtype": found.dtype, "shape": found.shape, "hex": binary_wire.resolve(value, section).hex()}
    if isinstance(value, dict):
        return {k: named(v, section) for k, v in value.items()}
    if isinstance(value, list):
        return [named(v, section) for v in value]
    return value


def has_deferred_replies(address: tuple[str, int]) -> bool:
    text = b'{"jsonrpc":"2.0","method":"unhex_later","params":["00"],"id":1}'
    _, body, _ = http_exchange(address, text, False)
    error = json.loads(body).get("error")
    return not (error and error.get("code") == -32601)


@pytest.mark.parametrize("path", REPLIES, ids=[p.stem for p in REPLIES])
def test_binary_reply_vector(server, path):
    vector = json.loads(path.read_text())
    if vector.get("deferred") and not has_deferred_replies(server):
        pytest.skip("this server has no unhex_later: the C API cannot defer a reply")
    text = vector["json"].encode()
    if vector["reply"] is None:
        for accept in (True, False):
            status, body, section = http_exchange(server, text, accept)
            assert (status, body, section) == (204, b"", None)
        return
    parts = [(item["offset"], bytes.fromhex(item["hex"])) for item in vector["reply_attachments"]]
    expected_section = binary_wire.section(parts) if parts else None
    expected = named(vector["reply"], expected_section)
    for transport in ("tcp", "http", "websocket"):
        if transport == "http":
            _, json_text, section = http_exchange(server, text, True)
        elif transport == "tcp":
            json_text, section = tcp_exchange(server, text)
        else:
            json_text, section = websocket_exchange(server, text)
        reply = named(json.loads(json_text), section)
        assert contains(expected, reply), (transport, reply)
        assert (section is None) == (expected_section is None), (transport, section)
    _, plain, section = http_exchange(server, text, False)
    assert section is None and contains(vector["plain_reply"], json.loads(plain)), plain
