# SPDX-License-Identifier: Apache-2.0
"""Python results as attachments (docs/wire.md): bytes, bytearray, memoryview, numpy arrays
and PIL images go out as a binary message to a caller that accepts one, over HTTP (Accept),
raw TCP and WebSocket, and as base64 to any other. The reply vectors of
tests/vectors/binary/replies run against a Python server with the procedures they name."""

from __future__ import annotations

import base64
import io
import json
import sys
from pathlib import Path
from typing import Any

import pytest

VECTORS_DIR = Path(__file__).resolve().parents[1] / "vectors"
sys.path.insert(0, str(VECTORS_DIR))
import binary_replies  # noqa: E402
import binary_wire  # noqa: E402

np = pytest.importorskip("numpy")


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


@pytest.mark.parametrize("path", binary_replies.VECTORS, ids=[p.stem for p in binary_replies.VECTORS])
def test_reply_vectors(make_server, path):
    server = serve(make_server)
    binary_replies.check(("127.0.0.1", server.port), json.loads(path.read_text()))


@pytest.mark.parametrize("transport", sorted(binary_replies.EXCHANGES))
def test_rich_results_arrive_equal(make_server, transport):
    server = serve(make_server)
    text = json.dumps({"jsonrpc": "2.0", "method": "mixed", "id": 1}).encode()
    json_text, section = binary_replies.EXCHANGES[transport](("127.0.0.1", server.port), text)
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
    _, plain, none = binary_replies.http_exchange(("127.0.0.1", server.port), text, False)
    assert none is None
    plain_result = json.loads(plain)["result"]
    assert base64.b64decode(plain_result["raw"]) == b"\x01\x02"
    assert np.array_equal(np.load(io.BytesIO(base64.b64decode(plain_result["grid"]))), back)


def test_a_large_array_and_an_image(make_server):
    pil = pytest.importorskip("PIL.Image")
    server = serve(make_server)
    text = json.dumps({"jsonrpc": "2.0", "method": "floats", "params": [400_000], "id": 1}).encode()
    json_text, section = binary_replies.tcp_exchange(("127.0.0.1", server.port), text)
    placeholder = json.loads(json_text)["result"]
    array = np.frombuffer(binary_wire.resolve(placeholder, section), dtype="<f4")
    assert np.array_equal(array, np.arange(400_000, dtype="<f4"))
    text = json.dumps({"jsonrpc": "2.0", "method": "image", "id": 2}).encode()
    _, json_text, section = binary_replies.http_exchange(("127.0.0.1", server.port), text, True)
    png = binary_wire.resolve(json.loads(json_text)["result"], section)
    image = pil.open(io.BytesIO(png))
    assert image.size == (4, 2) and image.getpixel((0, 0)) == (0, 128, 255)
