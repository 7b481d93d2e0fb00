# SPDX-License-Identifier: Apache-2.0
"""MCP over stdio (``ucall mcp MODULE:SERVER``): the server's MCP endpoint, reached through
a private Unix socket, with each line of standard input relayed to it as one request and
each message of its reply written to standard output as one line.

The core answers every message, as it does over HTTP (docs/mcp.md); this module only moves
lines. It mirrors each request's version, method and tool name into the header fields the
HTTP transport carries, as an HTTP client would, and turns ``notifications/cancelled`` into
the hang-up the server already takes as the caller going away: each request has its own
connection, so that reaches the cancelled call alone, and no line answers it. Nothing but
MCP messages goes to standard output: logs go to standard error.
"""

from __future__ import annotations

import base64
import http.client
import json
import os
import socket
import sys
import tempfile
import threading
from typing import IO, Any

from ucall._server import Server

__all__ = ["serve_stdio"]


class _UnixConnection(http.client.HTTPConnection):
    """An HTTP/1.1 connection over a Unix domain socket."""

    def __init__(self, path: str) -> None:
        super().__init__("localhost")
        self._path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.connect(self._path)
        self.sock = sock


def _header_value(text: str) -> str:
    """`text` as a header value: as it is when plain ASCII, else in the ``=?base64?...?=``
    form (MCP 2026-07-28, "Value Encoding")."""
    plain = text.isascii() and text.isprintable() and text == text.strip()
    if plain and not (text.startswith("=?base64?") and text.endswith("?=")):
        return text
    return "=?base64?" + base64.b64encode(text.encode()).decode() + "?="


class _Relay:
    def __init__(self, socket_path: str, path: str, output: IO[bytes]) -> None:
        self.socket_path = socket_path
        self.path = path
        self.output = output
        self.write_lock = threading.Lock()
        self.version: str | None = None  # the session-era version `initialize` agreed
        self.in_flight: dict[str, _UnixConnection] = {}
        self.lock = threading.Lock()
        self.threads: list[threading.Thread] = []

    def write(self, line: bytes) -> None:
        with self.write_lock:
            self.output.write(line.rstrip(b"\r\n") + b"\n")
            self.output.flush()

    def headers(self, message: Any) -> dict[str, str]:
        headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
        if not isinstance(message, dict):
            if self.version is not None:
                headers["MCP-Protocol-Version"] = self.version
            return headers
        params = message.get("params")
        meta = params.get("_meta") if isinstance(params, dict) else None
        modern = meta.get("io.modelcontextprotocol/protocolVersion") if isinstance(meta, dict) else None
        if isinstance(modern, str):
            headers["MCP-Protocol-Version"] = _header_value(modern)
            if isinstance(message.get("method"), str):
                headers["Mcp-Method"] = _header_value(message["method"])
            if isinstance(params, dict) and isinstance(params.get("name"), str):
                headers["Mcp-Name"] = _header_value(params["name"])
        elif self.version is not None and message.get("method") != "initialize":
            headers["MCP-Protocol-Version"] = self.version
        return headers

    def handle(self, line: bytes) -> None:
        try:
            message = json.loads(line)
        except ValueError:
            message = None
        if isinstance(message, dict) and message.get("method") == "notifications/cancelled":
            self.cancel(message.get("params"))
        key = json.dumps(message.get("id")) if isinstance(message, dict) and "id" in message else None
        thread = threading.Thread(target=self.exchange, args=(line, message, key), daemon=True)
        self.threads = [t for t in self.threads if t.is_alive()]
        self.threads.append(thread)
        thread.start()

    def cancel(self, params: Any) -> None:
        """The client gave up on a request: hang up its connection, which the server takes
        as the caller gone (a generator is stopped)."""
        if not isinstance(params, dict) or "requestId" not in params:
            return
        with self.lock:
            connection = self.in_flight.pop(json.dumps(params["requestId"]), None)
        if connection is not None and connection.sock is not None:
            try:
                connection.sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def exchange(self, line: bytes, message: Any, key: str | None) -> None:
        connection = _UnixConnection(self.socket_path)
        if key is not None:
            with self.lock:
                self.in_flight[key] = connection
        try:
            connection.request("POST", self.path, line, self.headers(message))
            response = connection.getresponse()
            if response.status == 202:
                response.read()
                return
            if (response.getheader("Content-Type") or "").startswith("text/event-stream"):
                while event := response.readline():
                    if event.startswith(b"data: "):
                        self.write(event[len(b"data: ") :])
                return
            body = response.read()
            if body:
                self.write(body)
                self.note_version(message, body)
        except (OSError, http.client.HTTPException):
            pass  # cancelled, or the server stopped: nothing to relay
        finally:
            if key is not None:
                with self.lock:
                    if self.in_flight.get(key) is connection:
                        del self.in_flight[key]
            connection.close()

    def note_version(self, message: Any, body: bytes) -> None:
        """After ``initialize``: the version agreed, sent on the requests that follow as
        an HTTP client would."""
        if not isinstance(message, dict) or message.get("method") != "initialize":
            return
        try:
            version = json.loads(body)["result"]["protocolVersion"]
        except (ValueError, KeyError, TypeError):
            return
        if isinstance(version, str):
            self.version = version

    def wait(self, timeout: float) -> None:
        for thread in self.threads:
            thread.join(timeout)


def serve_stdio(server: Server, input: IO[bytes] | None = None, output: IO[bytes] | None = None) -> None:
    """Serve `server`'s procedures as MCP tools over `input` and `output` (standard input
    and output by default) until the input ends."""
    source = input if input is not None else sys.stdin.buffer
    sink = output if output is not None else sys.stdout.buffer
    folder = tempfile.mkdtemp(prefix="ucall-mcp-")
    socket_path = os.path.join(folder, "mcp.sock")
    # One client per process: no sessions to tell clients apart (a cancellation hangs up).
    server._mcp = {"path": (server._mcp or {}).get("path", "/mcp")}
    server._limits["quiet"] = True
    server.host = "127.0.0.1"
    server._requested_port = 0
    server._set_unix_socket(socket_path, 0o600)
    server.start()
    relay = _Relay(socket_path, server._mcp["path"], sink)
    try:
        for line in source:
            if line.strip():
                relay.handle(line)
        relay.wait(timeout=server._limits.get("shutdown_timeout") or 5.0)
    finally:
        server.stop()
        try:
            os.rmdir(folder)
        except OSError:
            pass
