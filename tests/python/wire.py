# SPDX-License-Identifier: Apache-2.0
"""Raw-socket clients for the tests: bytes in, bytes out, nothing hidden.

`Conn` is a loopback TCP connection with a receive buffer; `HttpConn` reads HTTP/1.1
responses from it and `TcpConn` reads newline-terminated JSON replies. Every read has a
deadline, so a server that stays silent fails the test instead of hanging it.
"""

from __future__ import annotations

import errno
import json
import select
import socket
import struct
import time
from dataclasses import dataclass, field

from check_vectors import strict_json_loads

DEFAULT_TIMEOUT = 5.0


class PeerClosed(AssertionError):
    """The server closed (or reset) the connection while a reply was expected."""


def _connect(address, timeout: float) -> socket.socket:
    sock = socket.create_connection(address, timeout=timeout)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


class Conn:
    """A client connection with a receive buffer and deadlines on every read."""

    def __init__(self, address, timeout: float = DEFAULT_TIMEOUT):
        self.address = tuple(address)
        self.timeout = timeout
        self.sock = _connect(self.address, timeout)
        self.buf = bytearray()
        self.eof = False

    # -- lifetime -------------------------------------------------------------------
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass

    def shutdown_write(self) -> None:
        """Half-close: the server reads end of input, and may still write to us."""
        try:
            self.sock.shutdown(socket.SHUT_WR)
        except OSError:
            pass

    def reset(self) -> None:
        """Close with SO_LINGER 0 so that the kernel sends RST instead of FIN."""
        try:
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        except OSError:
            pass
        self.close()

    # -- sending --------------------------------------------------------------------
    def send(self, data: bytes) -> None:
        self.sock.settimeout(self.timeout)
        self.sock.sendall(data)

    def send_in_pieces(self, data: bytes, size: int = 1, pause: float = 0.001) -> None:
        """Send `size` bytes at a time with a pause between, so each goes out on its own."""
        for i in range(0, len(data), size):
            self.send(data[i : i + size])
            if pause:
                time.sleep(pause)

    # -- receiving ------------------------------------------------------------------
    def _fill(self, deadline: float, what: str) -> bool:
        """Receive more bytes into the buffer. False at end of stream."""
        if self.eof:
            return False
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError(f"no {what} from the server in time (received so far: {bytes(self.buf)[:300]!r})")
        self.sock.settimeout(remaining)
        try:
            chunk = self.sock.recv(65536)
        except socket.timeout:
            raise TimeoutError(
                f"no {what} from the server in time (received so far: {bytes(self.buf)[:300]!r})"
            ) from None
        except ConnectionResetError:
            chunk = b""
        if not chunk:
            self.eof = True
            return False
        self.buf += chunk
        return True

    def recv_until(self, marker: bytes, timeout: float | None = None, what: str = "data") -> bytes:
        """Bytes up to and including `marker`."""
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
        while True:
            at = self.buf.find(marker)
            if at >= 0:
                out = bytes(self.buf[: at + len(marker)])
                del self.buf[: at + len(marker)]
                return out
            if not self._fill(deadline, what):
                raise PeerClosed(f"connection closed while waiting for {what}; unread: {bytes(self.buf)[:300]!r}")

    def recv_exact(self, n: int, timeout: float | None = None, what: str = "data") -> bytes:
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
        while len(self.buf) < n:
            if not self._fill(deadline, what):
                raise PeerClosed(f"connection closed after {len(self.buf)} of {n} bytes of {what}")
        out = bytes(self.buf[:n])
        del self.buf[:n]
        return out

    def recv_all_until_closed(self, timeout: float | None = None) -> bytes:
        """Everything the server sends until it closes. Fails if it does not close in time."""
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
        try:
            while self._fill(deadline, "end of connection"):
                pass
        except TimeoutError:
            raise AssertionError(
                f"the server did not close the connection within {self.timeout if timeout is None else timeout} s "
                f"(pending: {bytes(self.buf)[:300]!r})"
            ) from None
        out = bytes(self.buf)
        self.buf.clear()
        return out

    def expect_closed(self, timeout: float | None = None) -> None:
        """Assert that the server closes the connection without sending anything more."""
        extra = self.recv_all_until_closed(timeout)
        assert extra == b"", f"unexpected bytes before the server closed: {extra[:300]!r}"

    def closed_within(self, timeout: float) -> bool:
        """True if the server closes within `timeout` (bytes sent before are kept in the buffer)."""
        deadline = time.monotonic() + timeout
        try:
            while self._fill(deadline, "end of connection"):
                pass
        except TimeoutError:
            return False
        return True

    def readable_within(self, timeout: float) -> bool:
        if self.buf or self.eof:
            return True
        ready, _, _ = select.select([self.sock], [], [], max(timeout, 0))
        return bool(ready)

    def nothing_received_within(self, timeout: float) -> bool:
        """True if no byte arrives and the connection stays open for `timeout` seconds."""
        if self.buf or self.eof:
            return False
        try:
            self._fill(time.monotonic() + timeout, "data")
        except TimeoutError:
            return True
        return False


# ------------------------------------------------------------------------------------
# HTTP/1.1


def http_request(
    method: str,
    target: str,
    body: bytes | str | None = None,
    headers: list[tuple[str, str]] | dict[str, str] | None = None,
    version: str = "HTTP/1.1",
    content_length: bool = True,
) -> bytes:
    """One request as bytes. `Host` is added, and `Content-Length` when there is a body."""
    if isinstance(body, str):
        body = body.encode("utf-8")
    items = list(headers.items()) if isinstance(headers, dict) else list(headers or [])
    names = {name.lower() for name, _ in items}
    if "host" not in names:
        items.insert(0, ("Host", "127.0.0.1"))
    if body is not None and content_length and "content-length" not in names and "transfer-encoding" not in names:
        items.append(("Content-Length", str(len(body))))
    head = f"{method} {target} {version}\r\n" + "".join(f"{n}: {v}\r\n" for n, v in items) + "\r\n"
    return head.encode("latin-1") + (body or b"")


def jsonrpc_post(body: bytes | str, headers: dict[str, str] | None = None, version: str = "HTTP/1.1") -> bytes:
    """`POST /` with a JSON body."""
    all_headers = {"Content-Type": "application/json"}
    all_headers.update(headers or {})
    return http_request("POST", "/", body, all_headers, version=version)


@dataclass
class HttpResponse:
    version: str
    status: int
    reason: str
    headers: list[tuple[str, str]]
    body: bytes
    head: bytes = field(repr=False)

    def header_values(self, name: str) -> list[str]:
        return [v for n, v in self.headers if n.lower() == name.lower()]

    def header(self, name: str) -> str | None:
        """The value of a header that must appear at most once."""
        values = self.header_values(name)
        assert len(values) <= 1, f"header {name} repeated: {values}"
        return values[0] if values else None

    def connection_tokens(self) -> set[str]:
        return {t.strip().lower() for v in self.header_values("Connection") for t in v.split(",") if t.strip()}

    def media_type(self) -> str | None:
        value = self.header("Content-Type")
        return value.split(";")[0].strip().lower() if value is not None else None

    def json(self):
        return strict_json_loads(self.body.decode("utf-8"))

    def __str__(self) -> str:
        return f"{self.status} {self.reason} {self.headers} body={self.body[:300]!r}"


class HttpConn(Conn):
    def read_response(self, timeout: float | None = None, request_method: str = "POST") -> HttpResponse:
        """The next response, 1xx included. Bodies are delimited as RFC 9112 §6.3 says."""
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
        head = self.recv_until(b"\r\n\r\n", max(deadline - time.monotonic(), 0.001), "response head")
        lines = head[:-4].decode("latin-1").split("\r\n")
        parts = lines[0].split(" ", 2)
        assert len(parts) >= 2 and parts[0].startswith("HTTP/1.") and parts[1].isdigit() and len(parts[1]) == 3, (
            f"malformed status line {lines[0]!r}"
        )
        headers = []
        for line in lines[1:]:
            name, sep, value = line.partition(":")
            assert sep and name and name == name.strip() and " " not in name, f"malformed header line {line!r}"
            headers.append((name, value.strip(" \t")))
        response = HttpResponse(parts[0], int(parts[1]), parts[2] if len(parts) > 2 else "", headers, b"", head)

        if 100 <= response.status < 200 or response.status in (204, 304) or request_method == "HEAD":
            return response
        left = lambda: max(deadline - time.monotonic(), 0.001)  # noqa: E731
        encodings = [t.strip().lower() for v in response.header_values("Transfer-Encoding") for t in v.split(",")]
        if encodings:
            assert encodings[-1] == "chunked", f"response body framing not understood: {encodings}"
            response.body = self._read_chunked(left)
        elif response.header_values("Content-Length"):
            length = response.header("Content-Length")
            assert length.isdigit(), f"bad Content-Length in response: {length!r}"
            response.body = self.recv_exact(int(length), left(), "response body")
        else:
            response.body = self.recv_all_until_closed(left())
        return response

    def _read_chunked(self, left) -> bytes:
        body = bytearray()
        while True:
            size_line = self.recv_until(b"\r\n", left(), "chunk size")
            size = int(size_line.split(b";")[0].strip(), 16)
            if size == 0:
                while self.recv_until(b"\r\n", left(), "trailer") != b"\r\n":
                    pass
                return bytes(body)
            body += self.recv_exact(size, left(), "chunk")
            assert self.recv_exact(2, left(), "chunk end") == b"\r\n"

    def final_response(self, timeout: float | None = None, request_method: str = "POST") -> HttpResponse:
        """The next non-1xx response."""
        while True:
            response = self.read_response(timeout, request_method)
            if not 100 <= response.status < 200:
                return response

    def roundtrip(self, request: bytes, timeout: float | None = None, request_method: str = "POST") -> HttpResponse:
        self.send(request)
        return self.final_response(timeout, request_method)

    def call(self, payload, timeout: float | None = None):
        """POST a JSON-RPC request (object or text); return the parsed reply, asserting 200."""
        body = payload if isinstance(payload, (bytes, str)) else _dumps(payload)
        response = self.roundtrip(jsonrpc_post(body), timeout)
        assert response.status == 200, f"expected 200, got {response}"
        return response.json()


# ------------------------------------------------------------------------------------
# Raw TCP


class TcpConn(Conn):
    def read_line(self, timeout: float | None = None) -> bytes:
        """The next reply line, without its terminating newline."""
        return self.recv_until(b"\n", timeout, "reply line")[:-1]

    def read_reply(self, timeout: float | None = None):
        line = self.read_line(timeout)
        return strict_json_loads(line.decode("utf-8"))

    def call(self, payload, timeout: float | None = None):
        """Send one request text (object or text) followed by a newline; return the reply."""
        body = payload if isinstance(payload, (bytes, str)) else _dumps(payload)
        if isinstance(body, str):
            body = body.encode("utf-8")
        self.send(body + b"\n")
        return self.read_reply(timeout)


def _dumps(value) -> bytes:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def dumps(value) -> bytes:
    """Compact UTF-8 JSON."""
    return _dumps(value)


def request(method: str, params=None, id=None, notification: bool = False) -> dict:
    """A JSON-RPC 2.0 Request object."""
    out = {"jsonrpc": "2.0", "method": method}
    if params is not None:
        out["params"] = params
    if not notification:
        out["id"] = id
    return out


def is_reset_error(exc: BaseException) -> bool:
    return isinstance(exc, (ConnectionResetError, BrokenPipeError)) or (
        isinstance(exc, OSError) and exc.errno in (errno.ECONNRESET, errno.EPIPE, errno.ENOTCONN)
    )
