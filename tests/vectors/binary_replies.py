# SPDX-License-Identifier: Apache-2.0
"""The binary reply vectors (binary/replies, README.md "Binary vectors") run against a
live server: one exchange per transport, and the check every suite makes of a vector.

Standard library only, but for the WebSocket exchange (the `websockets` package, imported
when it runs).
"""

from __future__ import annotations

import asyncio
import http.client
import json
import socket
from pathlib import Path
from typing import Any, Callable

import binary_wire

VECTORS = sorted((Path(__file__).parent / "binary" / "replies").glob("*.json"))

Address = tuple[str, int]


def tcp_exchange(address: Address, text: bytes) -> tuple[bytes, bytes | None]:
    """`text` as a binary message (no attachments) over raw TCP, and one reply: its JSON
    text and, for a binary message, its section."""
    with socket.create_connection(address, timeout=10) as sock:
        sock.sendall(binary_wire.message(text))
        reader = sock.makefile("rb")
        first = reader.read(1)
        if first[0] != binary_wire.MAGIC:
            return first + reader.readline().rstrip(b"\n"), None
        json_length, body_length = binary_wire.parse_prefix(first + reader.read(binary_wire.PREFIX_LEN - 1))
        return binary_wire.split_body(reader.read(body_length), json_length)


def http_exchange(address: Address, text: bytes, accept: bool) -> tuple[int, bytes, bytes | None]:
    """`text` posted as `application/json` (accepting a binary reply when `accept`): the
    status, the JSON text and, for a binary reply, its section. A body that is not a
    binary message must be `application/json`."""
    connection = http.client.HTTPConnection(*address, timeout=10)
    try:
        headers = {"Content-Type": "application/json"}
        if accept:
            headers["Accept"] = binary_wire.CONTENT_TYPE
        connection.request("POST", "/", text, headers)
        reply = connection.getresponse()
        body = reply.read()
        content_type = reply.getheader("Content-Type")
        if content_type == binary_wire.CONTENT_TYPE:
            json_length = int(reply.getheader(binary_wire.JSON_LENGTH_HEADER) or "")
            return (reply.status, *binary_wire.split_body(body, json_length))
        assert not body or content_type == "application/json", content_type
        return reply.status, body, None
    finally:
        connection.close()


def websocket_exchange(address: Address, text: bytes) -> tuple[bytes, bytes | None]:
    """`text` as a binary message over WebSocket (`ucall.binary.v1`), and one reply."""
    from websockets.asyncio.client import connect

    async def session() -> tuple[bytes, bytes | None]:
        host, port = address
        async with connect(f"ws://{host}:{port}/", subprotocols=[binary_wire.SUBPROTOCOL]) as ws:  # type: ignore[list-item]
            await ws.send(binary_wire.message(text))
            reply = await ws.recv()
            if isinstance(reply, bytes):
                return binary_wire.parse_message(reply)
            return reply.encode(), None

    return asyncio.run(asyncio.wait_for(session(), 10))


# Each transport on which a caller accepts a binary reply.
EXCHANGES: dict[str, Callable[[Address, bytes], tuple[bytes, bytes | None]]] = {
    "tcp": tcp_exchange,
    "http": lambda address, text: http_exchange(address, text, True)[1:],
    "websocket": websocket_exchange,
}


def contains(expected: Any, actual: Any) -> bool:
    """Objects member by member (more members allowed), arrays and scalars whole."""
    if isinstance(expected, dict):
        return isinstance(actual, dict) and all(k in actual and contains(v, actual[k]) for k, v in expected.items())
    if isinstance(expected, list):
        return isinstance(actual, list) and len(expected) == len(actual) and all(map(contains, expected, actual))
    return bool(expected == actual)


def named(value: Any, section: bytes | None) -> Any:
    """`value` with each placeholder replaced by what it names (kind, dtype, shape and the
    bytes as hex): a server may lay its section out in its own order (docs/wire.md §4)."""
    if isinstance(value, dict) and binary_wire.MARKER in value and section is not None:
        found = binary_wire.placeholder(value)
        return {"kind": found.kind, "dtype": found.dtype, "shape": found.shape, "hex": binary_wire.resolve(value, section).hex()}
    if isinstance(value, dict):
        return {k: named(v, section) for k, v in value.items()}
    if isinstance(value, list):
        return [named(v, section) for v in value]
    return value


def check(address: Address, vector: dict[str, Any]) -> None:
    """The server at `address` answers `vector` as it says: a notification with 204 over
    HTTP whatever the caller accepts; else the reply and its attachments over every
    transport to a caller that accepts them, and the plain reply to one that does not."""
    text = vector["json"].encode()
    if vector["reply"] is None:
        for accept in (True, False):
            assert http_exchange(address, text, accept) == (204, b"", None)
        return
    parts = [(item["offset"], bytes.fromhex(item["hex"])) for item in vector["reply_attachments"]]
    expected_section = binary_wire.section(parts) if parts else None
    expected = named(vector["reply"], expected_section)
    for transport, exchange in EXCHANGES.items():
        json_text, section = exchange(address, text)
        reply = named(json.loads(json_text), section)
        assert contains(expected, reply), (transport, reply)
        assert (section is None) == (expected_section is None), (transport, section)
    _, plain, section = http_exchange(address, text, False)
    assert section is None and contains(vector["plain_reply"], json.loads(plain)), plain
