# SPDX-License-Identifier: Apache-2.0
"""Helpers shared by the peer servers: a free loopback port, and the line
`listening on HOST:PORT` printed once the port accepts connections (benches/run.py waits
for it)."""

from __future__ import annotations

import socket
import sys
import threading
import time

HOST = "127.0.0.1"


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def announce_when_ready(port: int, what: str, timeout: float = 30.0) -> None:
    """In a daemon thread: poll until HOST:port accepts, then print the line."""

    def poll() -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                with socket.create_connection((HOST, port), timeout=0.5):
                    print(f"listening on {HOST}:{port} ({what})", flush=True)
                    return
            except OSError:
                time.sleep(0.05)
        print(f"error: {what} did not accept on {HOST}:{port} within {timeout:.0f} s", file=sys.stderr, flush=True)

    threading.Thread(target=poll, daemon=True).start()
