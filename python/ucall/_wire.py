# SPDX-License-Identifier: Apache-2.0
"""Bytes on the wire for the clients, without I/O: requests out, replies framed in.

``ReplyReader`` is fed whatever the socket gave and hands out complete replies: HTTP/1.1
responses framed by ``Content-Length``, chunked encoding or the end of the connection, or
raw-TCP JSON texts framed by their own syntax. ``WebSocketReader`` does the same for one
WebSocket connection (RFC 6455) on the ``websockets`` library's sans-I/O protocol: the
opening handshake, requests out as text messages, replies in as messages. The sync and
asyncio clients share both, and so share the framing over plain sockets and TLS alike.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections import deque
from typing import Any

from ucall import _attachments
from ucall.exceptions import ProtocolError

MAX_HEAD = 64 << 10
# Bodies at least this long are read into a buffer of their own, once their length is
# known: the reply's arrays view it, with no copy out of the stream's buffer.
DIRECT = 64 << 10
# A TLS alert record (content type 21, version 3.x): what a TLS port sends back to plaintext.
TLS_ALERT = b"\x15\x03"


@dataclasses.dataclass
class Reply:
    status: int | None  # the HTTP status, None over raw TCP
    body: Any  # bytes; from the native transport, the reply's JSON value when it is JSON
    close: bool = False  # the server will close the connection after this reply
    json_length: int | None = None  # a binary message's (docs/wire.md): its JSON text's length


def dumps(value: Any) -> bytes:
    """Compact JSON, UTF-8; NaN and infinities are refused (JSON has no form for them)."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode()


def host_port(host: str, port: int) -> str:
    """``host:port`` as in a URL or a ``Host`` header (an IPv6 address in brackets)."""
    return f"[{host}]:{port}" if ":" in host and not host.startswith("[") else f"{host}:{port}"


def http_request(
    body: bytes, host: str, port: int, path: str = "/", headers: str = "", accept: str = "application/json"
) -> bytes:
    """A POST of ``body``; ``headers`` are extra lines as ``header_lines`` makes them."""
    return http_head(len(body), host, port, path, headers, accept=accept) + body


#: What a request for binary replies accepts (docs/wire.md §3.1): either kind of body.
BINARY_ACCEPT = f"{_attachments.CONTENT_TYPE}, application/json"


def http_head(
    length: int,
    host: str,
    port: int,
    path: str = "/",
    headers: str = "",
    json_length: int | None = None,
    accept: str | None = None,
) -> bytes:
    """The head of a POST of ``length`` body bytes; with ``json_length``, of a binary
    message whose JSON text is that long, which accepts binary replies too unless
    ``accept`` (the Accept field's value) says otherwise."""
    if json_length is None:
        kind = f"Accept: {accept or 'application/json'}\r\nContent-Type: application/json\r\n"
    else:
        kind = (
            f"Accept: {accept or BINARY_ACCEPT}\r\nContent-Type: {_attachments.CONTENT_TYPE}\r\n"
            f"{_attachments.JSON_LENGTH_HEADER}: {json_length}\r\n"
        )
    head = (
        f"POST {path} HTTP/1.1\r\nHost: {host_port(host, port)}\r\nUser-Agent: ucall-python\r\n"
        f"{kind}{headers}Content-Length: {length}\r\n\r\n"
    )
    return head.encode("latin-1")


# What the client writes itself, which a caller's header would contradict.
_OWN_HEADERS = frozenset(
    {"host", "content-length", "content-type", "transfer-encoding", "connection", "upgrade"}
    | {"sec-websocket-key", "sec-websocket-version"}
)
_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")  # RFC 9110 §5.1 (tchar)
_CONTROL = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")  # §5.5: no CR, LF, NUL or other control


def header_lines(headers: Any) -> str:
    """``Name: value\\r\\n`` for each of ``headers`` (a mapping), checked: a name must be an
    HTTP token, a value Latin-1 without control characters, and neither a header the
    client writes itself (``Host``, ``Content-Length``, ...). ValueError says which."""
    lines = []
    for name, value in dict(headers).items():
        if not isinstance(name, str) or not isinstance(value, str):
            raise TypeError(f"header names and values are str, got {name!r}: {value!r}")
        if not _TOKEN.fullmatch(name):
            raise ValueError(f"{name!r} is not an HTTP header name")
        if name.lower() in _OWN_HEADERS:
            raise ValueError(f"the client writes the {name} header itself")
        if _CONTROL.search(value) or any(ord(c) > 0xFF for c in value):
            raise ValueError(f"the value of the {name} header has a control character or a character beyond Latin-1")
        lines.append(f"{name}: {value.strip(' ')}\r\n")
    return "".join(lines)


_NOT_SPACE = re.compile(rb"[^ \t\r\n]")
_SPACE_AT = re.compile(rb"[ \t\r\n]")
_STRUCTURE = re.compile(rb'["{}\[\]]')
_IN_STRING = re.compile(rb'["\\]')


class TextEnd:
    """Where one JSON text ends, found by regular expressions over the structural bytes
    (a long string is one search) and resumed where the last look stopped, so a reply
    that arrives in many pieces is scanned once in all."""

    def __init__(self, start: int = 0) -> None:
        self.start = start
        self.pos = start
        self.depth = 0
        self.in_string = False

    def find(self, buffer: bytes | bytearray) -> int:
        """Index just past the text, or -1 while it is incomplete."""
        n = len(buffer)
        if buffer[self.start] not in b'{["':
            # A scalar: it ends at whitespace (a text that is only a number needs one after it).
            space = _SPACE_AT.search(buffer, self.pos)
            self.pos = n
            return space.start() if space is not None else -1
        i = self.pos
        while i < n:
            if self.in_string:
                match = _IN_STRING.search(buffer, i)
                if match is None:
                    i = n
                    break
                i = match.start()
                if buffer[i] == 0x5C:  # a backslash: skip what it escapes, once that has arrived
                    if i + 1 >= n:
                        break
                    i += 2
                    continue
                self.in_string = False
                i += 1
                if self.depth == 0:
                    return i
            else:
                match = _STRUCTURE.search(buffer, i)
                if match is None:
                    i = n
                    break
                i = match.start()
                c = buffer[i]
                i += 1
                if c == 0x22:
                    self.in_string = True
                elif c in b"{[":
                    self.depth += 1
                else:
                    self.depth -= 1
                    if self.depth == 0:
                        return i
        self.pos = i
        return -1


def json_text_end(buffer: bytes | bytearray, start: int) -> int:
    """Index just past the JSON text starting at ``start``, or -1 when it is incomplete."""
    return TextEnd(start).find(buffer)


def too_large(size: int, at_least: bool, max_size: int) -> ProtocolError:
    """A reply over the client's ``max_reply_size``, as the native client words it."""
    more = " or more" if at_least else ""
    return ProtocolError(
        f"a reply of {size} bytes{more}, over the client's max_reply_size of {max_size} bytes"
        " (the connection is closed; raise max_reply_size to take it)"
    )


class ReplyReader:
    """Frames replies out of a byte stream (sans-I/O); a reply over ``max_size`` bytes
    (an HTTP body, a raw-TCP JSON text) raises ``ProtocolError``, ``None``: any size."""

    def __init__(self, http: bool, max_size: int | None = None) -> None:
        self.http = http
        self.max_size = max_size
        self.buffer = bytearray()
        self.ended = False
        self.why = ""  # why the stream ended, when the server said
        self._head: tuple[int, dict[str, str]] | None = None
        self._chunks: bytearray | None = None
        self._text: TextEnd | None = None  # the raw-TCP reply being scanned
        self._body: bytearray | None = None  # a large body being read into its own buffer
        self._message: tuple[int, int] | None = None  # (J, B) of a raw TCP binary message being read
        self._filled = 0  # how much of it has arrived

    def feed(self, data: bytes | bytearray | memoryview) -> None:
        if not data:
            self.ended = True
        body = self._body
        if body is not None and self._filled < len(body):
            take = min(len(data), len(body) - self._filled)
            body[self._filled : self._filled + take] = memoryview(data)[:take]
            self._filled += take
            data = memoryview(data)[take:]
        self.buffer += data

    def room(self) -> memoryview | None:
        """Where the next bytes go, when a large body is being read: a socket may read
        straight into it (``recv_into``), then call ``filled``; None otherwise."""
        body = self._body
        return memoryview(body)[self._filled :] if body is not None and self._filled < len(body) else None

    def filled(self, n: int) -> None:
        """``n`` bytes were read into ``room()``; none means the connection ended."""
        if n == 0:
            self.ended = True
        self._filled += n

    def _take(self, length: int) -> bytes | bytearray | None:
        """The next ``length`` body bytes once they have all arrived; a large body in a
        buffer of its own (a ``bytearray``), read into as it arrives."""
        body = self._body
        if body is None:
            if len(self.buffer) >= length:
                taken = bytes(self.buffer[:length])
                del self.buffer[:length]
                return taken
            if length < DIRECT or self.ended:
                return None
            body = self._body = bytearray(length)
            self._filled = len(self.buffer)
            body[: self._filled] = self.buffer
            self.buffer.clear()
        if self._filled < len(body):
            return None
        self._body = None
        return body

    def next(self) -> Reply | None:
        """The next complete reply, or None until more bytes (or the end) arrive."""
        if self.ended and self.buffer.startswith(TLS_ALERT):
            raise ProtocolError(
                "the server answered with a TLS alert and closed: the port speaks TLS (use tls=True, https:// or --tls)"
            )
        return self._next_http() if self.http else self._next_json()

    def to_send(self) -> bytes:
        """Bytes the connection owes the server after ``feed`` (none for HTTP or raw TCP)."""
        return b""

    def _next_json(self) -> Reply | None:
        if self._message is not None:
            return self._next_binary()
        if self._text is None:
            first = _NOT_SPACE.search(self.buffer)
            if first is None:
                self.buffer.clear()
                return None
            del self.buffer[: first.start()]
            if self.buffer[0] == _attachments.MAGIC:  # a binary message (docs/wire.md §3.2)
                if len(self.buffer) < _attachments.PREFIX.size:
                    if self.ended:
                        raise ProtocolError("the connection closed in the middle of a reply")
                    return None
                self._message = _attachments.parse_prefix(self.buffer)
                del self.buffer[: _attachments.PREFIX.size]
                return self._next_binary()
            self._text = TextEnd()
        end = self._text.find(self.buffer)
        over = len(self.buffer) if end < 0 else end
        if self.max_size is not None and over > self.max_size:
            raise too_large(over, end < 0, self.max_size)
        if end < 0:
            if self.ended:
                if self.buffer[0] not in b'{["':
                    end = len(self.buffer)
                else:
                    raise ProtocolError("the connection closed in the middle of a reply")
            else:
                return None
        body = bytes(self.buffer[:end])
        del self.buffer[:end]
        self._text = None
        return Reply(None, body)

    def _next_binary(self) -> Reply | None:
        """The body of the binary message whose prefix was read (``_message``)."""
        assert self._message is not None
        json_length, length = self._message
        body = self._take(length)
        if body is None:
            if self.ended:
                raise ProtocolError("the connection closed in the middle of a reply")
            return None
        self._message = None
        return Reply(None, body, json_length=json_length)

    def _next_http(self) -> Reply | None:
        while True:
            if self._head is None:
                end = self.buffer.find(b"\r\n\r\n")
                if end < 0:
                    if len(self.buffer) > MAX_HEAD:
                        raise ProtocolError("the reply head is too large")
                    if self.ended and self.buffer:
                        raise ProtocolError("the connection closed in the middle of a reply head")
                    return None
                self._head = self._parse_head(bytes(self.buffer[:end]))
                del self.buffer[: end + 4]
                status, headers = self._head
                if 100 <= status < 200:  # 100 Continue and friends: the real reply follows
                    self._head = None
                    continue
            status, headers = self._head
            close = "close" in headers.get("connection", "").lower()
            if status in (204, 304):
                self._head = None
                return Reply(status, b"", close)
            body: bytes | bytearray | None
            if "chunked" in headers.get("transfer-encoding", "").lower():
                body = self._chunked()
                if body is None:
                    return None
            elif "content-length" in headers:
                try:
                    length = int(headers["content-length"])
                except ValueError:
                    raise ProtocolError("a malformed Content-Length") from None
                if self.max_size is not None and length > self.max_size:
                    raise too_large(length, False, self.max_size)
                body = self._take(length)
                if body is None:
                    if self.ended:
                        raise ProtocolError("the connection closed in the middle of a reply body")
                    return None
            else:  # the body runs to the end of the connection
                if self.max_size is not None and len(self.buffer) > self.max_size:
                    raise too_large(len(self.buffer), True, self.max_size)
                if not self.ended:
                    return None
                body = bytes(self.buffer)
                self.buffer.clear()
                close = True
            self._head = None
            json_length = None
            if headers.get("content-type", "").split(";")[0].strip().lower() == _attachments.CONTENT_TYPE:
                text = headers.get(_attachments.JSON_LENGTH_HEADER.lower(), "")
                if not text.isdigit() or int(text) > len(body):
                    raise ProtocolError(f"a binary reply with a bad {_attachments.JSON_LENGTH_HEADER}: {text!r}")
                json_length = int(text)
            return Reply(status, body, close, json_length)

    @staticmethod
    def _parse_head(head: bytes) -> tuple[int, dict[str, str]]:
        lines = head.decode("latin-1").split("\r\n")
        parts = lines[0].split(" ", 2)
        if len(parts) < 2 or not parts[0].startswith("HTTP/") or not parts[1].isdigit():
            raise ProtocolError(f"not an HTTP reply: {lines[0][:80]!r}")
        headers = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        return int(parts[1]), headers

    def _chunked(self) -> bytes | None:
        """Decode as much of a chunked body as is buffered; the body once complete."""
        if self._chunks is None:
            self._chunks = bytearray()
        while True:
            line_end = self.buffer.find(b"\r\n")
            if line_end < 0:
                break
            size_text = bytes(self.buffer[:line_end]).split(b";", 1)[0].strip()
            try:
                size = int(size_text, 16)
            except ValueError:
                raise ProtocolError("a malformed chunk size") from None
            if size == 0:
                trailer_end = self.buffer.find(b"\r\n\r\n", line_end)
                if trailer_end < 0:
                    break
                del self.buffer[: trailer_end + 4]
                body, self._chunks = bytes(self._chunks), None
                return body
            if len(self.buffer) < line_end + 2 + size + 2:
                break
            self._chunks += self.buffer[line_end + 2 : line_end + 2 + size]
            if self.max_size is not None and len(self._chunks) > self.max_size:
                raise too_large(len(self._chunks), True, self.max_size)
            del self.buffer[: line_end + 2 + size + 2]
        if self.ended:
            raise ProtocolError("the connection closed in the middle of a chunked body")
        return None


WEBSOCKETS_MISSING = "WebSocket URIs need the websockets package (>= 12): pip install 'websockets>=12'"


class WebSocketReader:
    """One WebSocket connection's bytes (sans-I/O), on ``websockets.client.ClientProtocol``.

    ``handshake()`` is the opening request; ``feed`` takes what the socket gave until
    ``opened`` (a refused upgrade raises ``ProtocolError``); then ``encode(body)`` makes a
    request's text message and ``next()`` hands out each reply message as a ``Reply``.
    Whatever the protocol owes the server (a pong, the closing frame) is in ``to_send()``
    after each ``feed``. A message over ``max_size`` bytes raises ``ProtocolError`` (``None``: any size).
    """

    def __init__(
        self,
        host: str,
        port: int,
        path: str,
        secure: bool,
        headers: Any = (),
        binary: bool = False,
        max_size: int | None = None,
    ) -> None:
        try:
            from websockets.client import ClientProtocol
            from websockets.typing import Subprotocol
            from websockets.uri import parse_uri
        except ImportError:
            raise ImportError(WEBSOCKETS_MISSING) from None
        scheme = "wss" if secure else "ws"
        # With ``binary``, binary messages are offered (docs/wire.md §3.3): the server's
        # choice, once open, is ``self.binary``.
        offered = [Subprotocol(_attachments.SUBPROTOCOL)] if binary else None
        uri = parse_uri(f"{scheme}://{host_port(host, port)}{path}")
        self.protocol = ClientProtocol(uri, subprotocols=offered, max_size=max_size)
        self.max_size = max_size
        self._secure = secure
        self._headers = dict(headers)  # sent with the upgrade request (checked by header_lines)
        self.opened = False
        self.ended = False
        self.why = ""
        self._parts: list[bytes | bytearray | memoryview] = []
        self._kind: Any = None  # the opcode of the message being read
        self._replies: deque[Reply] = deque()

    def handshake(self) -> bytes:
        """The opening handshake's HTTP request."""
        request = self.protocol.connect()
        request.headers["User-Agent"] = "ucall-python"
        for name, value in self._headers.items():
            request.headers[name] = value.strip(" ")
        self.protocol.send_request(request)
        return self.to_send()

    def encode(self, body: bytes) -> bytes:
        """One request (or batch) as a text message."""
        self.protocol.send_text(body)
        return self.to_send()

    @property
    def binary(self) -> bool:
        """Whether the server took binary messages (selected the subprotocol)."""
        return self.protocol.subprotocol == _attachments.SUBPROTOCOL

    def encode_binary(self, message: bytes) -> bytes:
        """One binary message (prefix and body) as a binary WebSocket message."""
        self.protocol.send_binary(message)
        return self.to_send()

    def close(self) -> bytes:
        """The closing frame (normal closure), once; nothing when closing already."""
        from websockets.protocol import OPEN

        if self.protocol.state is not OPEN:
            return b""
        self.protocol.send_close(1000)
        return self.to_send()

    def to_send(self) -> bytes:
        # An empty chunk is the protocol asking to half-close: the clients close whole.
        return b"".join(self.protocol.data_to_send())

    def feed(self, data: bytes) -> None:
        from websockets.frames import Frame, Opcode

        if data:
            self.protocol.receive_data(data)
        else:
            self.protocol.receive_eof()
            self.ended = True
        for event in self.protocol.events_received():
            if not isinstance(event, Frame):  # the handshake's HTTP response
                if self.protocol.handshake_exc is not None:
                    self.ended = True
                    raise ProtocolError(f"the server refused the WebSocket upgrade: {self.protocol.handshake_exc}")
                self.opened = True
            elif event.opcode in (Opcode.TEXT, Opcode.BINARY, Opcode.CONT):
                if event.opcode is not Opcode.CONT:
                    self._kind = event.opcode
                self._parts.append(event.data)
                if event.fin:
                    message = b"".join(self._parts)
                    self._parts = []
                    if self._kind is Opcode.BINARY and self.binary and message[:1] == bytes([_attachments.MAGIC]):
                        json_length, length = _attachments.parse_prefix(message)
                        if length != len(message) - _attachments.PREFIX.size:
                            raise ProtocolError("a binary message whose length is not its WebSocket message's")
                        body = memoryview(message)[_attachments.PREFIX.size :]
                        self._replies.append(Reply(None, body, json_length=json_length))
                    else:
                        self._replies.append(Reply(None, message))
            elif event.opcode is Opcode.CLOSE:
                self.ended = True
                # The frame received: close_code stays None until the closing handshake ends.
                close = self.protocol.close_rcvd
                if close is not None:
                    self.why = f" (WebSocket close code {close.code}{': ' + close.reason if close.reason else ''})"
        error = self.protocol.parser_exc
        if error is not None and not isinstance(error, EOFError):
            self.ended = True
            if self.max_size is not None and type(error).__name__ == "PayloadTooBig":
                raise ProtocolError(
                    f"a reply over the client's max_reply_size of {self.max_size} bytes ({error})"
                    " (the connection is closed; raise max_reply_size to take it)"
                )
            raise ProtocolError(f"not a valid WebSocket stream: {error}")
        if self.ended and not self.opened:
            # Before any reply, the protocol notes why but queues no event for it.
            why = self.protocol.handshake_exc
            hint = "" if self._secure else " (if the port speaks TLS, use wss://)"
            raise ProtocolError(f"the connection closed during the WebSocket handshake{': ' + str(why) if why else ''}{hint}")

    def wanted(self) -> int:
        """Bytes the frame being received still needs, where known: a read may ask for
        that many, so that a large message comes in few reads. A hint only (0: unknown),
        taken from the protocol's parser, which waits in ``read_exact(n)`` for the frame's
        payload (websockets' sans-I/O parser keeps that size to itself)."""
        waiting = getattr(self.protocol, "parser", None)
        while getattr(waiting, "gi_yieldfrom", None) is not None:
            waiting = waiting.gi_yieldfrom  # type: ignore[union-attr]
        frame = getattr(waiting, "gi_frame", None)
        if frame is None or frame.f_code.co_name != "read_exact":
            return 0
        size, reader = frame.f_locals.get("n"), frame.f_locals.get("self")
        buffered = getattr(reader, "buffer", None)
        if not isinstance(size, int) or buffered is None:
            return 0
        return max(size - len(buffered), 0)

    def next(self) -> Reply | None:
        """The next complete reply message, or None until more bytes arrive."""
        if self._replies:
            return self._replies.popleft()
        if self.ended and self._parts:
            raise ProtocolError("the connection closed in the middle of a message")
        return None
