# SPDX-License-Identifier: Apache-2.0
"""Attachments reach Python handlers without a copy (docs/python.md, "Binary messages"):
numpy arrays, memoryviews and images read the bytes where they lie (read-only), `bytes`
is a copy by Python's semantics; and what a handler keeps after it returns stays alive
and unchanged while the connection reads on (no use of a reused receive buffer)."""

from __future__ import annotations

import gc
import io
import json
import socket
import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "vectors"))
import binary_wire  # noqa: E402

from ucall._ucall import AttachmentMemory  # noqa: E402

np = pytest.importorskip("numpy")


def call(method: str, params: Any, attachments: list[bytes], id: int = 1) -> bytes:
    """A raw TCP binary message of a call whose attachments lie at successive offsets."""
    return binary_wire.message(*binary_wire.request(method, params, attachments, id))


def exchange(port: int, messages: list[bytes]) -> list[dict[str, Any]]:
    """Send `messages` pipelined on one connection (in one write) and read their replies."""
    with socket.create_connection(("127.0.0.1", port), timeout=20) as sock:
        sock.sendall(b"".join(messages))
        lines = sock.makefile("rb")
        return [json.loads(lines.readline()) for _ in messages]


def owner(array: Any) -> Any:
    """What holds an array's or a memoryview's bytes: the AttachmentMemory behind it (an
    array's base, through its array interface; a memoryview's, through its ctypes block)."""
    while not isinstance(array, (memoryview, AttachmentMemory)):
        array = array.base
    return array if isinstance(array, AttachmentMemory) else getattr(array.obj, "memory", None)


@pytest.mark.parametrize("size", [4096, 1 << 20], ids=["4 KiB", "1 MiB"])
def test_arrays_and_memoryviews_view_the_attachment_read_only(make_server, size):
    server = make_server()

    @server
    def look(x: np.ndarray, m: memoryview, b: bytes) -> dict[str, Any]:
        return {
            "array": [x.flags.writeable, isinstance(owner(x), AttachmentMemory), float(x[-1])],
            "view": [type(m).__name__, m.readonly, isinstance(owner(m), AttachmentMemory), m[-1]],
            "bytes": [type(b).__name__, b[-1]],
        }

    server.start()
    array = np.arange(size // 4, dtype=np.float32)
    blob = bytes(range(256)) * (size // 256)
    params = {
        "x": binary_wire.ndarray_placeholder(array),
        "m": {"$ucall": "bytes", "offset": size, "length": size},
        "b": {"$ucall": "bytes", "offset": 2 * size, "length": size},
    }
    # Many calls: large params run at once only once the procedure is proven quick.
    replies = exchange(server.port, [call("look", params, [array.tobytes(), blob, blob], id=i) for i in range(24)])
    for reply in replies:
        assert reply["result"] == {
            "array": [False, True, float(array[-1])],
            "view": ["memoryview", True, True, 255],
            "bytes": ["bytes", 255],
        }, reply


@pytest.mark.parametrize("size", [4096, 1 << 20], ids=["4 KiB", "1 MiB"])
def test_what_a_handler_keeps_stays_as_it_was_sent(make_server, size):
    """Each call's array, memoryview and row (a batch's) is kept after the handler returns;
    later calls on the same connection, pipelined into the same reads, must not change
    them, and they must stay alive after the connection is gone."""
    server = make_server()
    kept: list[tuple[int, Any, Any]] = []
    rows: list[tuple[int, Any]] = []

    @server
    def keep(i: int, x: np.ndarray, m: memoryview) -> float:
        kept.append((i, x, m))
        return float(x[0])

    @server.batch(max_size=4, max_wait_ms=2)
    def keep_rows(i: list[int], x: list[np.ndarray]) -> list[int]:
        rows.extend(zip(i, x))
        return i

    server.start()
    count = 40
    messages = []
    for i in range(count):
        array = np.full(size // 8, i, dtype=np.float64)
        params = {"i": i, "x": binary_wire.ndarray_placeholder(array), "m": {"$ucall": "bytes", "offset": size, "length": size}}
        messages.append(call("keep", params, [array.tobytes(), bytes([i]) * size], id=i))
        messages.append(call("keep_rows", {"i": i, "x": binary_wire.ndarray_placeholder(array)}, [array.tobytes()], id=1000 + i))
    replies = exchange(server.port, messages)
    assert [r.get("result") for r in replies] == [v for i in range(count) for v in (float(i), i)]
    assert len(kept) == count and len(rows) == count
    # Other traffic reuses the server's buffers meanwhile.
    noise = np.full(size // 8, -1.0)
    exchange(server.port, [call("keep_rows", {"i": -1, "x": binary_wire.ndarray_placeholder(noise)}, [noise.tobytes()], id=7)] * 8)
    gc.collect()
    assert [i for i, x, m in kept if not (x == i).all() or bytes(m) != bytes([i]) * len(m)] == []
    assert [i for i, x in rows if i >= 0 and not (x == i).all()] == []


def test_an_echoed_array_goes_back_from_where_it_arrived(make_server):
    """A result that is the param itself is written from the attachment's memory, which
    stays alive until the reply is sent; the caller gets the same bytes back."""
    server = make_server()

    @server
    def echo(x: np.ndarray) -> np.ndarray:
        return x

    server.start()
    arrays = [np.random.default_rng(i).standard_normal((256, 256)).astype(np.float32) for i in range(6)]
    text = [
        json.dumps({"jsonrpc": "2.0", "method": "echo", "params": [binary_wire.ndarray_placeholder(a)], "id": i}).encode()
        for i, a in enumerate(arrays)
    ]
    with socket.create_connection(("127.0.0.1", server.port), timeout=20) as sock:
        sock.sendall(b"".join(binary_wire.message(t, a.tobytes()) for t, a in zip(text, arrays)))
        reader = sock.makefile("rb")
        for i, array in enumerate(arrays):
            prefix = reader.read(binary_wire.PREFIX_LEN)
            json_length, body_length = binary_wire.parse_prefix(prefix)
            body = reader.read(body_length)
            reply = json.loads(body[:json_length])
            placeholder = reply["result"]
            section = body[binary_wire.align(json_length) :]
            back = np.frombuffer(
                section[placeholder["offset"] : placeholder["offset"] + placeholder["length"]], dtype=np.float32
            )
            assert reply["id"] == i and np.array_equal(back.reshape(array.shape), array)


def binary_reply(sock: socket.socket) -> tuple[dict[str, Any], bytes]:
    with sock.makefile("rb") as reader:
        json_length, body_length = binary_wire.parse_prefix(reader.read(binary_wire.PREFIX_LEN))
        body = reader.read(body_length)
    return json.loads(body[:json_length]), body[binary_wire.align(json_length) :]


WIRE_DTYPES = ["bool", "int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64"]
WIRE_DTYPES += ["float16", "float32", "float64", "complex64", "complex128"]


@pytest.mark.parametrize("dtype", WIRE_DTYPES)
def test_every_wire_dtype_is_viewed_and_sent_back_as_it_came(make_server, dtype):
    """A param array of each dtype of docs/wire.md §2 arrives with its dtype and shape,
    read-only; what the handler returns goes back as an attachment of the same dtype,
    shape and bytes: the array itself, a strided view of it (copied into C order) and a
    0-d array. A big-endian result is no wire dtype: its .npy file goes as bytes."""
    server = make_server()

    @server
    def echo(x: np.ndarray) -> dict[str, Any]:
        assert not x.flags.writeable
        return {"same": x, "strided": x[:, ::2], "scalar": np.array(x[1, 1]), "dtype": x.dtype.str}

    @server
    def swapped(x: np.ndarray) -> np.ndarray:
        return x.astype(x.dtype.newbyteorder(">"))

    server.start()
    array = (np.arange(12).reshape(3, 4) % 2 if dtype == "bool" else np.arange(12).reshape(3, 4) * 3).astype(dtype)
    with socket.create_connection(("127.0.0.1", server.port), timeout=20) as sock:
        text = json.dumps({"jsonrpc": "2.0", "method": "echo", "params": [binary_wire.ndarray_placeholder(array)], "id": 1}).encode()
        sock.sendall(binary_wire.message(text, array.tobytes()))
        reply, section = binary_reply(sock)
        result = reply["result"]
        assert result["dtype"] == np.dtype(dtype).newbyteorder("<").str
        for name, expected in (("same", array), ("strided", array[:, ::2]), ("scalar", array[1, 1].reshape(()))):
            placeholder = result[name]
            assert (placeholder["dtype"], placeholder["shape"]) == (dtype, list(expected.shape)), name
            data = binary_wire.resolve(placeholder, section)
            back = np.frombuffer(data, dtype=np.dtype(dtype).newbyteorder("<")).reshape(expected.shape)
            assert np.array_equal(back, expected), name
        text = json.dumps({"jsonrpc": "2.0", "method": "swapped", "params": [binary_wire.ndarray_placeholder(array)], "id": 2}).encode()
        sock.sendall(binary_wire.message(text, array.tobytes()))
        reply, section = binary_reply(sock)
    if np.dtype(dtype).itemsize == 1:  # one byte has no order: still a wire dtype
        assert reply["result"]["dtype"] == dtype
        return
    assert reply["result"]["$ucall"] == "bytes", reply
    back = np.load(io.BytesIO(binary_wire.resolve(reply["result"], section)))
    assert back.dtype == np.dtype(dtype).newbyteorder(">") and np.array_equal(back, array)


def test_a_bytes_attachment_to_an_array_param_is_a_uint8_view(make_server):
    server = make_server()

    @server
    def look(x: np.ndarray) -> list[Any]:
        return [x.dtype.str, list(x.shape), x.flags.writeable, isinstance(owner(x), AttachmentMemory), x.tobytes().hex()]

    server.start()
    (reply,) = exchange(server.port, [call("look", [{"$ucall": "bytes", "offset": 0, "length": 5}], [b"\x00\x01ABC"])])
    assert reply["result"] == ["|u1", [5], False, True, "0001414243"]


def test_an_image_is_read_where_the_attachment_lies(make_server):
    pil = pytest.importorskip("PIL.Image")
    server = make_server()

    @server
    def pixel(image: pil.Image) -> list[Any]:
        return [list(image.size), list(image.getpixel((1, 1)))]

    server.start()
    png = io.BytesIO()
    pil.new("RGB", (64, 48), (10, 20, 30)).save(png, format="PNG")
    data = png.getvalue()
    (reply,) = exchange(server.port, [call("pixel", [{"$ucall": "bytes", "offset": 0, "length": len(data)}], [data])])
    assert reply["result"] == [[64, 48], [10, 20, 30]]
