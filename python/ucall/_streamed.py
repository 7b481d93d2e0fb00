# SPDX-License-Identifier: Apache-2.0
"""A streamed reply's bytes, without I/O (docs/streaming.md): fed what the socket gave,
it hands out the call's items, then its final reply.

Over raw TCP each message is a line; over WebSocket, a text message; over HTTP/1.1, a line
of a chunked ``application/jsonl`` body (or an ordinary JSON body when the call ended
before its first item, as a refused call does). An item is the notification
``{"jsonrpc":"2.0","method":"ucall.stream","params":{"id":ID,"item":ITEM}}``; the final
reply is the JSON-RPC response to the call. To a call sent as a binary message (raw TCP,
WebSocket) or over HTTP accepting ``application/vnd.ucall.binary-stream``, an item or the
final reply whose values are attachments is a binary message (docs/wire.md §3): over HTTP
the body then holds messages framed as on raw TCP.
"""

from __future__ import annotations

import json
from typing import Any

from ucall import _attachments
from ucall._tracing import current_meta, trace_header_lines
from ucall._wire import Reply, ReplyReader, WebSocketReader, dumps, http_request
from ucall.exceptions import ProtocolError

ITEM_METHOD = "ucall.stream"
CANCEL_METHOD = "ucall.cancel"
CANCELLED = -32800  # the final reply's error code once a stream is cancelled

_MAGIC = bytes([_attachments.MAGIC])

ITEM = "item"
REPLY = "reply"


#: What a streamed call accepts over HTTP: its items as JSON lines, or one JSON reply (a
#: call that ends before its first item).
ACCEPT = "application/jsonl, application/json"

#: ... and where values may come as attachments, items in binary messages (a binary
#: stream) and a binary reply (one that ends before its first item).
BINARY_ACCEPT = f"{_attachments.STREAM_CONTENT_TYPE}, {_attachments.CONTENT_TYPE}, {ACCEPT}"


def request_bytes(kind: str, body: bytes, host: str, port: int, path: str, headers: str = "", accept: str = ACCEPT) -> bytes:
    """The request's bytes over HTTP or raw TCP (WebSocket messages need the reader);
    ``headers``: extra lines (``_wire.header_lines``); ``accept``: what an HTTP request
    accepts."""
    if kind == "http":
        return http_request(body, host, port, path, trace_header_lines(headers), accept)
    return body + b"\n"


class StreamFramer:
    """Frames one streamed reply to the call ``request_id``; ``kind`` is ``"http"``,
    ``"tcp"`` or ``"ws"`` (then ``ws`` is the connection's ``WebSocketReader``)."""

    def __init__(self, kind: str, request_id: Any, ws: WebSocketReader | None = None) -> None:
        self.kind = kind
        self.request_id = request_id
        self.ws = ws
        self.buffer = bytearray()
        self.ended = False
        self.done = False
        self._head: tuple[int, dict[str, str]] | None = None
        self._plain: ReplyReader | None = None  # an HTTP reply that is not streamed
        self._chunk_left = -1  # see `_chunks`
        self._text = bytearray()  # the body's lines, decoded from their chunks
        self._binary_stream = kind == "tcp"  # messages may be binary ones, told by their first byte

    def feed(self, data: bytes) -> None:
        if self.ws is not None:
            self.ws.feed(data)
            self.ended = self.ws.ended
            return
        if not data:
            self.ended = True
        self.buffer += data

    def wanted(self) -> int:
        """Bytes the message being received still needs, where known (a binary message
        whose prefix has come, the rest of an HTTP chunk or of a WebSocket frame): a read
        may ask for that many."""
        if self.ws is not None:
            return self.ws.wanted()
        if self.kind == "http" and self._head is not None:
            return max(self._chunk_left, 0)
        buffer = self.buffer
        if self._binary_stream and buffer[:1] == _MAGIC and len(buffer) >= _attachments.PREFIX.size:
            return _attachments.PREFIX.size + _attachments.parse_prefix(buffer)[1] - len(buffer)
        return 0

    def to_send(self) -> bytes:
        """What the connection owes the server (a WebSocket pong)."""
        return self.ws.to_send() if self.ws is not None else b""

    def events(self) -> list[tuple[str, Any]]:
        """The items (``("item", value)``) and the final reply (``("reply", data)``)
        complete so far, in order."""
        out: list[tuple[str, Any]] = []
        if self.done:
            return out
        if self.kind == "ws":
            assert self.ws is not None
            while not self.done:
                reply = self.ws.next()
                if reply is None:
                    break
                self._message(reply.body, out, reply.json_length)
        elif self.kind == "tcp":
            self._lines(self.buffer, out)
        else:
            self._http(out)
        if not self.done and self.ended and not out:
            raise ProtocolError("the server closed the connection before the stream ended")
        return out

    def _message(self, text: Any, out: list[tuple[str, Any]], json_length: int | None = None) -> None:
        """A message's JSON text; with ``json_length``, a binary message's body (the reply
        of a call sent as one that did not stream, its result an array or bytes)."""
        if json_length is not None:
            message = _attachments.decode(text, json_length)
        else:
            try:
                message = json.loads(text)
            except ValueError:
                raise ProtocolError(f"not JSON in a stream: {bytes(text[:200])!r}") from None
        if isinstance(message, dict) and message.get("method") == ITEM_METHOD and "id" not in message:
            params = message.get("params")
            if not isinstance(params, dict) or params.get("id") != self.request_id:
                raise ProtocolError(f"an item of another call: {bytes(text[:200])!r}")
            out.append((ITEM, params.get("item")))
            return
        self.done = True
        out.append((REPLY, message))

    def _lines(self, buffer: bytearray, out: list[tuple[str, Any]]) -> None:
        while not self.done:
            if self._binary_stream and buffer[:1] == _MAGIC:  # a binary message (docs/wire.md §3.2)
                if len(buffer) < _attachments.PREFIX.size:
                    return
                json_length, length = _attachments.parse_prefix(buffer)
                end = _attachments.PREFIX.size + length
                if len(buffer) < end:
                    return
                with memoryview(buffer) as view:  # one copy, not a slice's and then bytes'
                    body = bytes(view[_attachments.PREFIX.size : end])
                del buffer[:end]
                self._message(body, out, json_length)
                continue
            end = buffer.find(b"\n")
            if end < 0:
                return
            line = bytes(buffer[:end])
            del buffer[: end + 1]
            if line.strip():
                self._message(line, out)

    def _http(self, out: list[tuple[str, Any]]) -> None:
        if self._plain is not None or self._head is None:
            if self._plain is None:
                end = self.buffer.find(b"\r\n\r\n")
                if end < 0:
                    return
                status, headers = ReplyReader._parse_head(bytes(self.buffer[:end]))
                content_type = headers.get("content-type", "")
                self._binary_stream = content_type.startswith(_attachments.STREAM_CONTENT_TYPE)
                streamed = "chunked" in headers.get("transfer-encoding", "").lower() and (
                    content_type.startswith("application/jsonl") or self._binary_stream
                )
                if streamed:
                    self._head = (status, headers)
                    del self.buffer[: end + 4]
                else:
                    # Not streamed (refused, or no item came): one ordinary reply.
                    self._plain = ReplyReader(http=True)
            if self._plain is not None:
                self._plain.feed(bytes(self.buffer))
                self.buffer.clear()
                if self.ended:
                    self._plain.feed(b"")
                reply = self._plain.next()
                if reply is not None:
                    self._reply(reply, out)
                return
        self._chunks(out)

    def _reply(self, reply: Reply, out: list[tuple[str, Any]]) -> None:
        self.done = True
        if reply.json_length is not None:  # a binary reply: its result an array or bytes
            out.append((REPLY, _attachments.decode(reply.body, reply.json_length)))
            return
        try:
            data = json.loads(reply.body) if reply.body else None
        except ValueError:
            raise ProtocolError(f"HTTP {reply.status}: the reply is not JSON: {reply.body[:200]!r}") from None
        if isinstance(data, dict) and "jsonrpc" not in data and "code" in data:
            data = {"jsonrpc": "2.0", "id": None, "error": data}  # the HTTP request itself was refused
        out.append((REPLY, data))

    def _chunks(self, out: list[tuple[str, Any]]) -> None:
        # `_chunk_left`: -1 before a chunk's size line, > 0 inside its data, 0 before the
        # CRLF that ends it (RFC 9112 7.1).
        buffer = self.buffer
        while True:
            if self._chunk_left < 0:
                line_end = buffer.find(b"\r\n")
                if line_end < 0:
                    break
                try:
                    size = int(bytes(buffer[:line_end]).split(b";", 1)[0].strip(), 16)
                except ValueError:
                    raise ProtocolError("a malformed chunk size") from None
                del buffer[: line_end + 2]
                if size == 0:
                    break
                self._chunk_left = size
            elif self._chunk_left > 0:
                take = min(self._chunk_left, len(buffer))
                if take == 0:
                    break
                self._text += buffer[:take]
                del buffer[:take]
                self._chunk_left -= take
            else:
                if len(buffer) < 2:
                    break
                del buffer[:2]
                self._chunk_left = -1
        self._lines(self._text, out)


def request(method: str, params: Any, request_id: int) -> bytes:
    """The call's JSON text."""
    message: dict[str, Any] = {"jsonrpc": "2.0", "method": method, "id": request_id}
    if params is not None:
        message["params"] = params
    meta = current_meta()
    if meta is not None:
        message["_meta"] = meta
    return dumps(message)
