# SPDX-License-Identifier: Apache-2.0
"""The streamed-reply vectors (streams/, README.md "Stream vectors") run against a live
server: every way a caller can read a stream (docs/streaming.md), and the check every
suite makes of a vector.

Standard library only, but for the WebSocket exchanges (the `websockets` package,
imported when they run).
"""

from __future__ import annotations

import asyncio
import http.client
import json
import socket
from pathlib import Path
from typing import Any, Callable, Iterator

import binary_replies
import binary_wire

VECTORS = sorted((Path(__file__).parent / "streams").glob("*.json"))
STREAM_TYPE = "application/vnd.ucall.binary-stream"

Address = tuple[str, int]
#: One message of a stream: its JSON text and, for a binary message, its section.
Message = tuple[bytes, "bytes | None"]


def read_framed(read: Callable[[int], bytes], readline: Callable[[], bytes]) -> Iterator[Message]:
    """Messages framed as on raw TCP: a JSON text ending in a newline, or a binary message
    (docs/wire.md §3.2), until the reader ends."""
    while first := read(1):
        if first[0] == binary_wire.MAGIC:
            json_length, body_length = binary_wire.parse_prefix(first + read(binary_wire.PREFIX_LEN - 1))
            yield binary_wire.split_body(read(body_length), json_length)
        else:
            yield (first + readline()).rstrip(b"\r\n"), None


def until_reply(messages: Iterator[Message]) -> list[Message]:
    """The messages up to and including the first that is not a `ucall.stream` item."""
    out = []
    for text, section in messages:
        out.append((text, section))
        if json.loads(text).get("method") != "ucall.stream":
            return out
    raise AssertionError(f"the stream ended without a reply after {len(out)} messages")


def tcp_exchange(address: Address, text: bytes, binary: bool) -> list[Message]:
    """The call over raw TCP, as a binary message or a JSON line."""
    with socket.create_connection(address, timeout=10) as sock:
        sock.sendall(binary_wire.message(text) if binary else text + b"\n")
        reader = sock.makefile("rb")
        return until_reply(read_framed(reader.read, reader.readline))


def http_exchange(address: Address, text: bytes, accept: str | None) -> list[Message]:
    """The call posted as `application/json` with `Accept: accept`: the messages of its
    body, whichever way the body frames them (one reply, JSON lines, server-sent events,
    or the binary stream)."""
    connection = http.client.HTTPConnection(*address, timeout=10)
    try:
        headers = {"Content-Type": "application/json", **({"Accept": accept} if accept else {})}
        connection.request("POST", "/", text, headers)
        reply = connection.getresponse()
        assert reply.status == 200, reply.status
        kind = reply.getheader("Content-Type")
        if reply.getheader("Content-Length") is not None:  # an ordinary reply
            body = reply.read()
            if kind == binary_wire.CONTENT_TYPE:
                return [binary_wire.split_body(body, int(reply.getheader(binary_wire.JSON_LENGTH_HEADER) or ""))]
            assert kind == "application/json", kind
            return [(body, None)]
        assert reply.getheader("Transfer-Encoding") == "chunked"
        if kind == "application/jsonl":
            return until_reply(read_framed(reply.read, reply.readline))
        if kind == STREAM_TYPE:
            assert accept is not None and STREAM_TYPE in accept, accept
            return until_reply(read_framed(reply.read, reply.readline))
        assert kind == "text/event-stream", kind
        events = (line[len(b"data: ") :].rstrip(b"\n") for line in iter(reply.readline, b"") if line != b"\n")
        return until_reply((event, None) for event in events)
    finally:
        connection.close()


def websocket_exchange(address: Address, text: bytes, binary: bool) -> list[Message]:
    """The call over WebSocket: a binary message under `ucall.binary.v1`, or a text one."""
    from websockets.asyncio.client import connect

    async def session() -> list[Message]:
        host, port = address
        protocols = [binary_wire.SUBPROTOCOL] if binary else None
        async with connect(f"ws://{host}:{port}/", subprotocols=protocols) as ws:  # type: ignore[arg-type]
            await ws.send(binary_wire.message(text) if binary else text.decode())

            async def messages() -> list[Message]:
                out: list[Message] = []
                while True:
                    frame = await ws.recv()
                    out.append(binary_wire.parse_message(frame) if isinstance(frame, bytes) else (frame.encode(), None))
                    if json.loads(out[-1][0]).get("method") != "ucall.stream":
                        return out

            return await messages()

    return asyncio.run(asyncio.wait_for(session(), 10))


#: Each way to read a stream: (name, exchange, whether its items carry attachments).
BOTH = f"{STREAM_TYPE}, {binary_wire.CONTENT_TYPE}"
EXCHANGES: list[tuple[str, Callable[[Address, bytes], list[Message]], bool]] = [
    ("tcp", lambda address, text: tcp_exchange(address, text, False), False),
    ("tcp binary", lambda address, text: tcp_exchange(address, text, True), True),
    ("http jsonl", lambda address, text: http_exchange(address, text, None), False),
    ("http event-stream", lambda address, text: http_exchange(address, text, "text/event-stream"), False),
    ("http binary stream", lambda address, text: http_exchange(address, text, BOTH), True),
    ("websocket", lambda address, text: websocket_exchange(address, text, False), False),
    ("websocket binary", lambda address, text: websocket_exchange(address, text, True), True),
]


def check(address: Address, vector: dict[str, Any]) -> None:
    """The server at `address` streams `vector`'s items then its reply on every transport:
    with attachments to a caller that takes them, in their plain JSON form to any other."""
    text = vector["request"].encode()
    call_id = json.loads(text)["id"]
    attached = [
        binary_wire.section([(part["offset"], bytes.fromhex(part["hex"])) for part in parts]) if parts else None
        for parts in vector.get("item_attachments") or [[] for _ in vector["items"]]
    ]
    for name, exchange, binary in EXCHANGES:
        messages = exchange(address, text)
        *items, (reply_text, reply_section) = messages
        expected_items = vector["items"] if binary else vector.get("plain_items", vector["items"])
        assert len(items) == len(expected_items), (name, messages)
        for (item_text, section), expected, expected_section in zip(items, expected_items, attached):
            item = json.loads(item_text)
            assert set(item) == {"jsonrpc", "method", "params"} and item["jsonrpc"] == "2.0", (name, item)
            assert item["params"]["id"] == call_id and set(item["params"]) == {"id", "item"}, (name, item)
            if binary and expected_section is not None:
                assert section is not None, (name, item)
                want = binary_replies.named(expected, expected_section)
                assert binary_replies.named(item["params"]["item"], section) == want, (name, item)
            else:
                assert section is None and item["params"]["item"] == expected, (name, item)
        reply = json.loads(reply_text)
        assert reply_section is None and binary_replies.contains(vector["reply"], reply), (name, reply)
        if "error_message_contains" in vector:
            assert vector["error_message_contains"] in reply["error"]["message"], (name, reply)
