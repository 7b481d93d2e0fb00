# SPDX-License-Identifier: Apache-2.0
"""Minimal blocking clients for the soak run: HTTP/1.1 (keep-alive, pipelining, TLS), raw
TCP (newline-separated JSON texts) and WebSocket (the websockets library). They check
nothing themselves; the workloads compare each reply with its request.
"""

from __future__ import annotations

import json
import socket
import ssl
import struct
from typing import Any

TIMEOUT = 30.0


class Closed(Exception):
    """The server closed the connection."""


class Stream:
    """A socket (plain or TLS) with a receive buffer."""

    def __init__(self, address: tuple[str, int], tls: ssl.SSLContext | None = None, timeout: float = TIMEOUT):
        raw = socket.create_connection(address, timeout=timeout)
        raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sock: socket.socket = tls.wrap_socket(raw, server_hostname="localhost") if tls else raw
        self.buffer = bytearray()

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def _fill(self) -> None:
        chunk = self.sock.recv(1 << 20)
        if not chunk:
            raise Closed("the server closed the connection")
        self.buffer += chunk

    def read_until(self, marker: bytes) -> bytes:
        while True:
            at = self.buffer.find(marker)
            if at >= 0:
                data = bytes(self.buffer[: at + len(marker)])
                del self.buffer[: at + len(marker)]
                return data
            self._fill()

    def read_exact(self, n: int) -> bytes:
        while len(self.buffer) < n:
            self._fill()
        data = bytes(self.buffer[:n])
        del self.buffer[:n]
        return data

    def reset(self) -> None:
        """Close with a TCP reset (SO_LINGER 0) rather than a FIN."""
        try:
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        finally:
            self.close()

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass


def post(body: bytes, path: str = "/") -> bytes:
    return (
        f"POST {path} HTTP/1.1\r\nHost: soak\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode() + body


class Http(Stream):
    """HTTP/1.1 keep-alive; `exchange` pipelines several requests."""

    def read_response(self) -> tuple[int, dict[str, str], bytes]:
        head = self.read_until(b"\r\n\r\n").decode("latin-1")
        lines = head.split("\r\n")
        status = int(lines[0].split(" ", 2)[1])
        headers = {}
        for line in lines[1:]:
            if ":" in line:
                name, value = line.split(":", 1)
                headers[name.strip().lower()] = value.strip()
        body = self.read_exact(int(headers.get("content-length", "0")))
        return status, headers, body

    def exchange(self, bodies: list[bytes]) -> list[tuple[int, bytes]]:
        self.send(b"".join(post(b) for b in bodies))
        replies = []
        for _ in bodies:
            status, _, body = self.read_response()
            replies.append((status, body))
        return replies


class Tcp(Stream):
    """Raw TCP: JSON texts out, one reply line per call or batch back."""

    def exchange(self, texts: list[bytes], replies: int) -> list[Any]:
        self.send(b"\n".join(texts) + b"\n")
        return [json.loads(self.read_until(b"\n")) for _ in range(replies)]
