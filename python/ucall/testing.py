# SPDX-License-Identifier: Apache-2.0
"""Test your own procedures with a real server in the test's process.

    from ucall import Server
    from ucall.testing import TestClient

    server = Server()

    @server
    def sum(a: int, b: int) -> int:
        return a + b

    def test_sum() -> None:
        with TestClient(server) as client:
            assert client.sum(a=1, b=2).json == 3

``TestClient(server)`` serves ``server`` on a free port of 127.0.0.1, whatever port it was
made with (so tests run side by side and beside a server already on that port), and hands
back a ``ucall.client.Client`` connected to it; leaving the ``with`` closes the client and
stops the server. A server already running is called where it listens and left running.
``transport`` picks how the client speaks: ``"http"`` (default), ``"tcp"`` or ``"ws"``;
other keywords (``headers=``, ``timeout=``) go to the ``Client``.
"""

from __future__ import annotations

from typing import Any

from ucall._server import Server
from ucall.client import Client

__all__ = ["TestClient"]

_SCHEMES = {"http": ("http", "https"), "tcp": ("tcp", "tls"), "ws": ("ws", "wss")}  # plaintext, TLS
_WILDCARDS = ("", "0.0.0.0", "::")


class TestClient:
    """Serves a ``Server`` for the length of a ``with`` block and calls it (see the module)."""

    __test__ = False  # a class named Test* that pytest must not collect

    def __init__(self, server: Server, *, transport: str = "http", **client: Any) -> None:
        if not isinstance(server, Server):
            raise TypeError(f"TestClient takes a ucall.Server, not {type(server).__name__}")
        if transport not in _SCHEMES:
            raise ValueError(f"transport must be one of {', '.join(_SCHEMES)}, got {transport!r}")
        self.server = server
        self.transport = transport
        self._options = client
        self._client: Client | None = None
        self._started = False

    def __enter__(self) -> Client:
        if not self.server.running:
            self._serve()
        try:
            self._client = self._connect()
        except BaseException:
            self._stop()
            raise
        return self._client

    def __exit__(self, *exc: object) -> None:
        client, self._client = self._client, None
        try:
            if client is not None:
                client.close()
        finally:
            self._stop()

    def _serve(self) -> None:
        """Start the server on a free loopback port, then give it back the address it was
        made with (read once, when it starts)."""
        server = self.server
        host, port = server.host, server._requested_port
        if host in _WILDCARDS or host == "localhost":
            server.host = "127.0.0.1"
        server._requested_port = 0
        try:
            server.start()
            self._started = True
        finally:
            server._requested_port = port
        self._host, server.host = server.host, host

    def _connect(self) -> Client:
        server = self.server
        tls = server.url.startswith("https://")
        host = self._host if self._started else server.host
        host = "127.0.0.1" if host in _WILDCARDS else host
        host = f"[{host}]" if ":" in host else host
        options = dict(self._options)
        if tls:
            options.setdefault("insecure", True)  # the test's own server, with the test's certificate
        return Client(f"{_SCHEMES[self.transport][tls]}://{host}:{server.port}/", **options)

    def _stop(self) -> None:
        if self._started:
            self._started = False
            self.server.stop()
