# SPDX-License-Identifier: Apache-2.0
"""Python handlers read binary messages' attachments (docs/wire.md): numpy arrays, bytes,
bytearrays and images, sent over HTTP, raw TCP and WebSocket, and checked equal."""

from __future__ import annotations

import asyncio
import base64
import http.client
import io
import json
import socket
import struct
import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "vectors"))
import binary_wire  # noqa: E402

np = pytest.importorskip("numpy")


def over_http(port: int, text: bytes, section: bytes) -> dict[str, Any]:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        headers = {"Content-Type": binary_wire.CONTENT_TYPE, binary_wire.JSON_LENGTH_HEADER: str(len(text))}
        connection.request("POST", "/", binary_wire.body(text, section), headers)
        reply = connection.getresponse()
        assert reply.status == 200
        return json.loads(reply.read())  # type: ignore[no-any-return]
    finally:
        connection.close()


def over_tcp(port: int, text: bytes, section: bytes) -> dict[str, Any]:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(binary_wire.message(text, section))
        return json.loads(sock.makefile("rb").readline())  # type: ignore[no-any-return]


def over_websocket(port: int, text: bytes, section: bytes) -> dict[str, Any]:
    from websockets.asyncio.client import connect

    async def session() -> dict[str, Any]:
        async with connect(f"ws://127.0.0.1:{port}/", subprotocols=[binary_wire.SUBPROTOCOL]) as ws:  # type: ignore[list-item]
            await ws.send(binary_wire.message(text, section))
            return json.loads(await ws.recv())  # type: ignore[no-any-return]

    return asyncio.run(asyncio.wait_for(session(), 10))


TRANSPORTS = {"http": over_http, "tcp": over_tcp, "websocket": over_websocket}


@pytest.mark.parametrize("transport", sorted(TRANSPORTS))
def test_a_numpy_array_arrives_equal(make_server, transport):
    server = make_server()

    @server
    def describe(x: np.ndarray, scale: float) -> dict[str, Any]:
        return {"dtype": x.dtype.name, "shape": list(x.shape), "npy": base64.b64encode(_npy(x * scale)).decode()}

    server.start()
    array = np.arange(24, dtype=np.float32).reshape(2, 3, 4) / 7
    text, section = binary_wire.request("describe", {"x": binary_wire.ndarray_placeholder(array), "scale": 2}, [array.tobytes()])
    reply = TRANSPORTS[transport](server.port, text, section)
    result = reply["result"]
    assert (result["dtype"], result["shape"]) == ("float32", [2, 3, 4])
    back = np.load(io.BytesIO(base64.b64decode(result["npy"])), allow_pickle=False)
    assert back.dtype == np.float32 and np.array_equal(back, array * 2)


def _npy(array: Any) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, array, allow_pickle=False)
    return buffer.getvalue()


def test_every_dtype_and_bytes_and_bytearray(make_server):
    server = make_server()

    @server
    def summary(x: np.ndarray) -> list[Any]:
        return [x.dtype.name, list(x.shape), x.tobytes().hex()]

    @server
    def sizes(a: bytes, b: bytearray, c: Any) -> list[Any]:
        return [type(a).__name__, a.hex(), type(b).__name__, b.hex(), type(c).__name__, c.hex()]

    server.start()
    for dtype in binary_wire.DTYPES:
        array = (np.arange(6) % 2).astype(dtype).reshape(3, 2)
        text, section = binary_wire.request("summary", [binary_wire.ndarray_placeholder(array)], [array.tobytes()])
        assert over_tcp(server.port, text, section)["result"] == [dtype, [3, 2], array.tobytes().hex()]
    placeholders = [{"$ucall": "bytes", "offset": offset, "length": 3} for offset in (0, 64, 128)]
    text, section = binary_wire.request("sizes", placeholders, [b"abc", b"\x00\x01\x02", b"xyz"])
    assert over_tcp(server.port, text, section)["result"] == [
        "bytes",
        "616263",
        "bytearray",
        "000102",
        "bytes",
        "78797a",
    ]


def test_an_image_from_an_attachment(make_server):
    pil = pytest.importorskip("PIL.Image")
    server = make_server()

    @server
    def size(image: pil.Image) -> list[int]:
        return list(image.size)

    server.start()
    png = io.BytesIO()
    pil.new("RGB", (5, 3), (255, 0, 0)).save(png, format="PNG")
    text, section = binary_wire.request("size", [{"$ucall": "bytes", "offset": 0, "length": len(png.getvalue())}], [png.getvalue()])
    assert over_http(server.port, text, section)["result"] == [5, 3]


def test_a_bad_placeholder_names_the_parameter(make_server):
    server = make_server()

    @server
    def total(x: np.ndarray) -> float:
        return float(x.sum())

    server.start()
    wrong = {"$ucall": "ndarray", "offset": 0, "length": 8, "dtype": "float32", "shape": [3]}
    text, section = binary_wire.request("total", [wrong], [struct.pack("<2f", 1, 2)])
    error = over_tcp(server.port, text, section)["error"]
    assert error["code"] == -32602 and "'x'" in error["message"] and "placeholder" in error["message"]
    # The same server answers a good one next.
    right = {"$ucall": "ndarray", "offset": 0, "length": 8, "dtype": "float32", "shape": [2]}
    text, section = binary_wire.request("total", [right], [struct.pack("<2f", 1, 2)])
    assert over_tcp(server.port, text, section)["result"] == 3.0


@pytest.mark.parametrize("transport", sorted(TRANSPORTS))
def test_a_batch_procedure_reads_attachments(make_server, transport):
    server = make_server()
    seen: list[tuple[int, ...]] = []

    @server.batch(max_size=8, max_wait_ms=5)
    def total(x: np.ndarray, raw: list[bytes]) -> list[float]:
        seen.append(x.shape)
        return [float(row.sum()) + len(blob) for row, blob in zip(x, raw)]

    server.start()
    array = np.arange(6, dtype=np.float32).reshape(2, 3)
    blob = b"\x00\x01\x02"
    text, section = binary_wire.request(
        "total",
        {"x": binary_wire.ndarray_placeholder(array), "raw": {"$ucall": "bytes", "offset": 64, "length": 3}},
        [array.tobytes(), blob],
    )
    for _ in range(3):  # on a batch thread, then where the call was received
        reply = TRANSPORTS[transport](server.port, text, section)
        assert reply.get("result") == 15.0 + 3, reply
    assert seen and all(shape == (1, 2, 3) for shape in seen)
