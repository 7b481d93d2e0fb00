# SPDX-License-Identifier: Apache-2.0
"""Python results as attachments (docs/wire.md): bytes, bytearray, memoryview, numpy arrays
and PIL images go out as a binary message to a caller that accepts one, over HTTP (Accept),
raw TCP and WebSocket, and as base64 to any other. The reply vectors of
tests/vectors/binary/replies run against a Python server with the procedures they name."""

from __future__ import annotations

import asyncio
import base64
import http.client
import io
import json
import socket
import sys
from pathlib import Path
from typing import Any

import pytest

VECTORS_DIR = Path(__file__).resolve().parents[1] / "vectors"
sys.path.insert(0, str(VECTORS_DIR))
import binary_wire  # noqa: E402

np = pytest.importorskip("numpy")

REPLY_VECTORS = sorted((VECTORS_DIR / "binary" / "replies").glob("*.json"))


def serve(make_server) -> Any:
    server = make_server()

    @server
    def unhex(text: str) -> bytes:
        try:
            return bytes.fromhex(text)
        except ValueError:
            from ucall import RPCError

            raise RPCError(-32602, "Invalid params: 'text' is not an even number of hex digits") from None

    @server
    def sum(a: int, b: int) -> int:  # noqa: A001 (the vectors' name)
        return a + b

    @server
    async def unhex_later(text: str) -> bytes:
        return bytes.fromhex(text)

    @server
    def floats(n: int) -> np.ndarray:
        return np.arange(n, dtype="<f4")

    @server
    def mixed() -> dict[str, Any]:
        grid = np.arange(12, dtype=np.int16).reshape(3, 4)
        return {"grid": grid[:, ::2], "raw": bytearray(b"\x01\x02"), "view": memoryview(b"abc"), "n": 3}

    @server
    def image() -> Any:
        pil = pytest.importorskip("PIL.Image")
        return pil.new("RGB", (4, 2), (0, 128, 255))

    server.start()
    return server


def tcp_exchange(port: int, text: bytes) -> tuple[bytes, bytes | None]:
    """Send `text` as a binary message (no attachments) and read one reply."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(binary_wire.message(text))
        reader = sock.makefile("rb")
        first = reader.read(1)
        if first[0] != binary_wire.MAGIC:
            return first + reader.readline().rstrip(b"\n"), None
        prefix = first + reader.read(binary_wire.PREFIX_LEN - 1)
        json_length, body_length = binary_wire.parse_prefix(prefix)
        return binary_wire.split_body(reader.read(body_length), json_length)


def http_exchange(port: int, text: bytes, accept: bool) -> tuple[bytes, bytes | None]:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        headers = {"Content-Type": "application/json"}
        if accept:
            headers["Accept"] = binary_wire.CONTENT_TYPE
        connection.request("POST", "/", text, headers)
        reply = connection.getresponse()
        body = reply.read()
        if reply.getheader("Content-Type") == binary_wire.CONTENT_TYPE:
            return binary_wire.split_body(body, int(reply.getheader(binary_wire.JSON_LENGTH_HEADER)))
        assert reply.getheader("Content-Type") == "application/json", reply.getheader("Content-Type")
        return body, None
    finally:
        connection.close()


def websocket_exchange(port: int, text: bytes) -> tuple[bytes, bytes | None]:
    from websockets.asyncio.client import connect

    async def session() -> tuple[bytes, bytes | None]:
        async with connect(f"ws://127.0.0.1:{port}/", subprotocols=[binary_wire.SUBPROTOCOL]) as ws:  # type: ignore[list-item]
            await ws.send(binary_wire.message(text))
            reply = await ws.recv()
            if isinstance(reply, bytes):
                return binary_wire.parse_message(reply)
            return reply.encode(), None

    return asyncio.run(asyncio.wait_for(session(), 10))


EXCHANGES = {
    "tcp": tcp_exchange,
    "http": lambda port, text: http_exchange(port, text, True),
    "websocket": websocket_exchange,
}


def contains(expected: Any, actual: Any) -> bool:
    """Objects member by member (more members allowed), arrays and scalars whole."""
    if isinstance(expected, dict):
        return isinstance(actual, dict) and all(k in actual and contains(v, actual[k]) for k, v in expected.items())
    if isinstance(expected, list):
        return isinstance(actual, list) and len(expected) == len(actual) and all(map(contains, expected, actual))
    return bool(expected == actual)


def expected_section(vector: dict[str, Any]) -> bytes | None:
    parts = [(item["offset"], bytes.fromhex(item["hex"])) for item in vector["reply_attachments"]]
    return binary_wire.section(parts) if parts else None


def named(value: Any, section: bytes | None) -> Any:
    """`value` with each placeholder replaced by what it names (kind, dtype, shape and the
    bytes as hex): a server may place attachments in any order (docs/wire.md §4)."""
    if isinstance(value, dict) and binary_wire.MARKER in value and section is not None:
        found = binary_wire.placeholder(value)
        return {"kind": found.kind, "dtype": found.dtype, "shape": found.shape, "hex": binary_wire.resolve(value, section).hex()}
    if isinstance(value, dict):
        return {k: named(v, section) for k, v in value.items()}
    if isinstance(value, list):
        return [named(v, section) for v in value]
    return value


@pytest.mark.parametrize("path", REPLY_VECTORS, ids=[p.stem for p in REPLY_VECTORS])
def test_reply_vectors(make_server, path):
    vector = json.loads(path.read_text())
    server = serve(make_server)
    text = vector["json"].encode()
    if vector["reply"] is None:
        # A notification: 204 over HTTP, whatever the caller accepts.
        for accept in (True, False):
            connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
            headers = {"Accept": binary_wire.CONTENT_TYPE} if accept else {}
            connection.request("POST", "/", text, {"Content-Type": "application/json", **headers})
            reply = connection.getresponse()
            assert (reply.status, reply.read()) == (204, b"")
            connection.close()
        return
    for name, exchange in EXCHANGES.items():
        json_text, section = exchange(server.port, text)
        reply = named(json.loads(json_text), section)
        assert contains(named(vector["reply"], expected_section(vector)), reply), (name, reply)
        assert (section is None) == (expected_section(vector) is None), (name, section)
    plain, section = http_exchange(server.port, text, False)
    assert section is None and contains(vector["plain_reply"], json.loads(plain))


@pytest.mark.parametrize("transport", sorted(EXCHANGES))
def test_rich_results_arrive_equal(make_server, transport):
    server = serve(make_server)
    text = json.dumps({"jsonrpc": "2.0", "method": "mixed", "id": 1}).encode()
    json_text, section = EXCHANGES[transport](server.port, text)
    result = json.loads(json_text)["result"]
    assert section is not None and result["n"] == 3
    grid = result["grid"]
    assert (grid["$ucall"], grid["dtype"], grid["shape"]) == ("ndarray", "int16", [3, 2])
    data = binary_wire.resolve(grid, section)
    back = np.frombuffer(data, dtype="<i2").reshape(3, 2)
    assert np.array_equal(back, np.arange(12, dtype=np.int16).reshape(3, 4)[:, ::2])
    assert binary_wire.resolve(result["raw"], section) == b"\x01\x02"
    assert binary_wire.resolve(result["view"], section) == b"abc"
    # The same result to a plain JSON caller: base64, as before.
    plain, none = http_exchange(server.port, text, False)
    assert none is None
    plain_result = json.loads(plain)["result"]
    assert base64.b64decode(plain_result["raw"]) == b"\x01\x02"
    assert np.array_equal(np.load(io.BytesIO(base64.b64decode(plain_result["grid"]))), back)


def test_a_large_array_and_an_image(make_server):
    pil = pytest.importorskip("PIL.Image")
    server = serve(make_server)
    text = json.dumps({"jsonrpc": "2.0", "method": "floats", "params": [400_000], "id": 1}).encode()
    json_text, section = tcp_exchange(server.port, text)
    placeholder = json.loads(json_text)["result"]
    array = np.frombuffer(binary_wire.resolve(placeholder, section), dtype="<f4")
    assert np.array_equal(array, np.arange(400_000, dtype="<f4"))
    text = json.dumps({"jsonrpc": "2.0", "method": "image", "id": 2}).encode()
    json_text, section = http_exchange(server.port, text, True)
    png = binary_wire.resolve(json.loads(json_text)["result"], section)
    image = pil.open(io.BytesIO(png))
    assert image.size == (4, 2) and image.getpixel((0, 0)) == (0, 128, 255)
