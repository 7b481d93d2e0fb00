# SPDX-License-Identifier: Apache-2.0
"""A client written from docs/wire.md alone: plain sockets, struct, hashlib and base64 (no
ucall, no binary_wire.py, no HTTP or WebSocket library), so that the page is shown to be
enough to speak binary messages. It sends the body vectors of tests/vectors/binary/ and the
binary reply vectors (binary/replies/) over HTTP, raw TCP and WebSocket to the test server
and checks each reply against the vector."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import socket
import struct
from pathlib import Path
from typing import Any

import pytest

VECTORS = Path(__file__).resolve().parents[1] / "vectors" / "binary"
WIRE_MD = Path(__file__).resolve().parents[2] / "docs" / "wire.md"
BODIES = sorted(p for p in VECTORS.glob("*.json") if "json" in json.loads(p.read_text()))
REPLIES = sorted((VECTORS / "replies").glob("*.json"))
TRANSPORTS = ["http", "tcp", "websocket"]

# docs/wire.md §3.1 and §3.3
CONTENT_TYPE = "application/vnd.ucall.binary"
SUBPROTOCOL = "ucall.binary.v1"


# ------------------------------------------------------------------ §1 and §3.2: bodies and prefixes


def padded(length: int) -> int:
    """P: the first multiple of 64 at or after `length`."""
    return -(-length // 64) * 64


def section_of(attachments: list[dict[str, Any]], length: int | None = None) -> bytes:
    """A section holding each attachment at its offset, zeros elsewhere."""
    end = max((a["offset"] + len(bytes.fromhex(a["hex"])) for a in attachments), default=0)
    section = bytearray(length if length is not None else end)
    for a in attachments:
        data = bytes.fromhex(a["hex"])
        section[a["offset"] : a["offset"] + len(data)] = data
    return bytes(section)


def body(text: bytes, section: bytes) -> bytes:
    """§1: the JSON text, zeros to P, the section (just the text when the section is empty)."""
    if not section:
        return text
    return text + bytes(padded(len(text)) - len(text)) + section


def prefix(json_length: int, body_length: int) -> bytes:
    """§3.2: magic 0xC1, version 1, flags 0, J (u32) and B (u64), little-endian."""
    return struct.pack("<BBHIQ", 0xC1, 1, 0, json_length, body_length)


def split(message_body: bytes, json_length: int) -> tuple[Any, bytes]:
    """A received body: the parsed JSON text and the section after its padding."""
    return json.loads(message_body[:json_length]), message_body[padded(json_length) :]


# ------------------------------------------------------------------ §3.1 HTTP/1.1


def read_http_reply(sock: socket.socket) -> tuple[int, dict[str, str], bytes]:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        assert chunk, f"connection closed inside an HTTP head: {data!r}"
        data += chunk
    head, rest = data.split(b"\r\n\r\n", 1)
    status_line, *fields = head.decode("latin-1").split("\r\n")
    headers = {name.strip().lower(): value.strip() for name, value in (f.split(":", 1) for f in fields)}
    length = int(headers.get("content-length", "0"))
    while len(rest) < length:
        chunk = sock.recv(65536)
        assert chunk, "connection closed inside an HTTP body"
        rest += chunk
    return int(status_line.split()[1]), headers, rest[:length]


def http_call(address: tuple[str, int], text: bytes, section: bytes) -> tuple[Any, bytes | None]:
    """POST / as a binary request accepting a binary reply; the reply's JSON and section."""
    payload = body(text, section)
    head = (
        f"POST / HTTP/1.1\r\nHost: {address[0]}:{address[1]}\r\n"
        f"Content-Type: {CONTENT_TYPE}\r\nUCall-JSON-Length: {len(text)}\r\n"
        f"Accept: {CONTENT_TYPE}\r\nContent-Length: {len(payload)}\r\n\r\n"
    )
    with socket.create_connection(address, timeout=10) as sock:
        sock.sendall(head.encode() + payload)
        status, headers, reply = read_http_reply(sock)
    if status == 204 or not reply:  # a notification (or a batch of them): nothing to answer
        return None, None
    if headers.get("content-type") == CONTENT_TYPE:
        return split(reply, int(headers["ucall-json-length"]))
    return json.loads(reply), None


# ------------------------------------------------------------------ §3.2 raw TCP


def read_exactly(sock: socket.socket, count: int) -> bytes:
    data = b""
    while len(data) < count:
        chunk = sock.recv(count - len(data))
        assert chunk, f"connection closed after {len(data)} of {count} bytes"
        data += chunk
    return data


def tcp_call(address: tuple[str, int], text: bytes, section: bytes, expect_reply: bool) -> tuple[Any, bytes | None]:
    payload = body(text, section)
    with socket.create_connection(address, timeout=10) as sock:
        sock.sendall(prefix(len(text), len(payload)) + payload)
        if not expect_reply:
            # Nothing comes back for a notification: a JSON text after it is answered first.
            sock.sendall(b'{"jsonrpc":"2.0","method":"sum","params":[0,0],"id":"after"}')
            line = b""
            while not line.endswith(b"\n"):
                line += read_exactly(sock, 1)
            assert json.loads(line)["id"] == "after", line
            return None, None
        first = read_exactly(sock, 1)
        if first[0] != 0xC1:  # a JSON text, then a newline
            line = first
            while not line.endswith(b"\n"):
                line += read_exactly(sock, 1)
            return json.loads(line), None
        magic, version, flags, json_length, body_length = struct.unpack("<BBHIQ", first + read_exactly(sock, 15))
        assert (magic, version, flags) == (0xC1, 1, 0)
        return split(read_exactly(sock, body_length), json_length)


# ------------------------------------------------------------------ §3.3 WebSocket (RFC 6455 framing)


def ws_send(sock: socket.socket, opcode: int, payload: bytes) -> None:
    mask = os.urandom(4)
    size = len(payload)
    if size < 126:
        head = struct.pack("!BB", 0x80 | opcode, 0x80 | size)
    elif size < 1 << 16:
        head = struct.pack("!BBH", 0x80 | opcode, 0x80 | 126, size)
    else:
        head = struct.pack("!BBQ", 0x80 | opcode, 0x80 | 127, size)
    sock.sendall(head + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload)))


def ws_receive(sock: socket.socket) -> tuple[int, bytes]:
    """One whole message (the server sends unfragmented, unmasked frames)."""
    first, second = read_exactly(sock, 2)
    assert first & 0x80, "a final frame"
    size = second & 0x7F
    if size == 126:
        size = struct.unpack("!H", read_exactly(sock, 2))[0]
    elif size == 127:
        size = struct.unpack("!Q", read_exactly(sock, 8))[0]
    return first & 0x0F, read_exactly(sock, size)


def websocket_call(
    address: tuple[str, int], text: bytes, section: bytes, expect_reply: bool
) -> tuple[Any, bytes | None]:
    key = base64.b64encode(os.urandom(16)).decode()
    upgrade = (
        f"GET / HTTP/1.1\r\nHost: {address[0]}:{address[1]}\r\nUpgrade: websocket\r\n"
        f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n"
        f"Sec-WebSocket-Protocol: {SUBPROTOCOL}\r\n\r\n"
    )
    with socket.create_connection(address, timeout=10) as sock:
        sock.sendall(upgrade.encode())
        head = b""
        while not head.endswith(b"\r\n\r\n"):
            head += read_exactly(sock, 1)
        lines = head.decode("latin-1").split("\r\n")
        assert lines[0].split()[1] == "101", lines
        fields = {n.strip().lower(): v.strip() for n, v in (line.split(":", 1) for line in lines[1:] if line)}
        accept = base64.b64encode(hashlib.sha1((key + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11").encode()).digest())
        assert fields["sec-websocket-accept"] == accept.decode()
        assert fields["sec-websocket-protocol"] == SUBPROTOCOL, "the server selects the subprotocol"
        payload = body(text, section)
        ws_send(sock, 0x2, prefix(len(text), len(payload)) + payload)
        if not expect_reply:
            ws_send(sock, 0x1, b'{"jsonrpc":"2.0","method":"sum","params":[0,0],"id":"after"}')
        opcode, message = ws_receive(sock)
        if opcode == 0x1:
            reply: Any = json.loads(message)
            if not expect_reply:
                assert reply["id"] == "after", reply
                return None, None
            return reply, None
        assert opcode == 0x2, opcode
        magic, version, flags, json_length, body_length = struct.unpack("<BBHIQ", message[:16])
        assert (magic, version, flags, body_length) == (0xC1, 1, 0, len(message) - 16)
        return split(message[16:], json_length)


def call(
    transport: str, address: tuple[str, int], text: bytes, section: bytes, expect_reply: bool
) -> tuple[Any, bytes | None]:
    if transport == "http":
        return http_call(address, text, section)
    if transport == "tcp":
        return tcp_call(address, text, section, expect_reply)
    return websocket_call(address, text, section, expect_reply)


# ------------------------------------------------------------------ comparing replies


def resolve(value: Any, section: bytes) -> Any:
    """§2: each placeholder replaced by what it names (kind, dtype, shape, bytes as hex)."""
    if isinstance(value, list):
        return [resolve(v, section) for v in value]
    if isinstance(value, dict):
        if "$ucall" in value:
            offset, length = value["offset"], value["length"]
            assert offset % 64 == 0 and offset + length <= len(section), value
            named = {k: v for k, v in value.items() if k not in ("offset", "length")}
            return {**named, "hex": section[offset : offset + length].hex()}
        return {k: resolve(v, section) for k, v in value.items()}
    return value


def without_error_text(reply: Any) -> Any:
    """Errors compared by code only (tests/vectors/README.md, "Comparison rule")."""
    if isinstance(reply, list):
        return [without_error_text(r) for r in reply]
    if isinstance(reply, dict) and "error" in reply:
        return {**reply, "error": {"code": reply["error"]["code"]}}
    return reply


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("path", BODIES, ids=lambda p: p.stem)
def test_body_vector(server: tuple[str, int], transport: str, path: Path) -> None:
    vector = json.loads(path.read_text())
    section = section_of(vector["attachments"], vector.get("section_length"))
    reply, reply_section = call(transport, server, vector["json"].encode(), section, vector["reply"] is not None)
    if vector["reply"] is None:
        assert reply is None
        return
    if "error_message_contains" in vector:
        assert vector["error_message_contains"] in json.dumps(reply), reply
    assert reply_section is None, "a reply without attachments is plain JSON (wire.md §4)"
    assert without_error_text(reply) == without_error_text(vector["reply"])


def defers_replies(address: tuple[str, int]) -> bool:
    """Whether the server has `unhex_later` (the C API cannot defer a reply)."""
    reply, _ = http_call(address, b'{"jsonrpc":"2.0","method":"unhex_later","params":["00"],"id":1}', b"")
    return reply.get("error", {}).get("code") != -32601


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("path", REPLIES, ids=lambda p: p.stem)
def test_reply_vector(server: tuple[str, int], transport: str, path: Path) -> None:
    vector = json.loads(path.read_text())
    if vector.get("deferred") and not defers_replies(server):
        pytest.skip("this server has no unhex_later: the C API cannot defer a reply")
    section = section_of(vector["attachments"])
    reply, reply_section = call(transport, server, vector["json"].encode(), section, vector["reply"] is not None)
    if vector["reply"] is None:
        assert reply is None
        return
    expected_section = section_of(vector["reply_attachments"])
    # A binary reply exactly when the vector's reply has an attachment (wire.md §4).
    assert (reply_section is not None) == bool(vector["reply_attachments"]), (reply, reply_section)
    got = without_error_text(resolve(reply, reply_section or b""))
    want = without_error_text(resolve(vector["reply"], expected_section))
    assert got == want


def hex_dumps() -> list[bytes]:
    """The hex dumps of docs/wire.md §6 (xxd's layout: offset, 8 groups of 4 digits, text)."""
    dumps: list[bytes] = []
    lines = WIRE_MD.read_text().split("## 6. Examples", 1)[1].splitlines()
    for line in lines:
        if len(line) > 10 and line[8:10] == ": " and all(c in "0123456789abcdef" for c in line[:8]):
            if line.startswith("00000000"):
                dumps.append(b"")
            dumps[-1] += bytes.fromhex(line[10:49].replace(" ", ""))
    return dumps


def test_the_pages_examples_are_what_this_client_reads_and_writes(server: tuple[str, int]) -> None:
    request, reply_body = hex_dumps()
    # The request: this client writes the same bytes for its JSON text and attachment, and
    # the server answers as the page says.
    json_length = struct.unpack("<I", request[4:8])[0]
    text = request[16 : 16 + json_length]
    assert request == prefix(len(text), len(body(text, b"foo"))) + body(text, b"foo")
    assert tcp_call(server, text, b"foo", True) == ({"jsonrpc": "2.0", "result": "666f6f", "id": 1}, None)
    # The HTTP reply body (J = 106): a float32 array of 1.5 and -2.0.
    reply, section = split(reply_body, 106)
    assert resolve(reply, section)["result"] == {
        "$ucall": "ndarray",
        "dtype": "float32",
        "shape": [2],
        "hex": struct.pack("<2f", 1.5, -2.0).hex(),
    }
