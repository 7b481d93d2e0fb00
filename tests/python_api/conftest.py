# SPDX-License-Identifier: Apache-2.0
"""Fixtures for the `ucall` package's suite: real servers on loopback, on each engine.

Environment:
  UCALL_ENGINES  comma-separated engines every server test runs on (default: poll, plus
                 uring where a server can run it here)
"""

from __future__ import annotations

import asyncio
import contextlib
import http.client
import json
import os
import re
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

from ucall import RPCError, Server

REPO_ROOT = Path(__file__).resolve().parents[2]
#: The start-up line every UCall server says on stderr (docs/operations.md), or its log
#: record at --log-level info: "ucall: listening on http://HOST:PORT (engine E, ...)".
LISTENING = re.compile(r"ucall: listening on [a-z]+://(?:\[[^\]]+\]|[^\s:/]+):(\d+)")


def read_until_listening(stream: Any, seconds: float = 60) -> tuple[str, int]:
    """The lines read from a server's stderr up to its start-up line, and its port;
    fails with them when the stream ends first."""
    deadline = time.monotonic() + seconds
    lines = ""
    while time.monotonic() < deadline:
        line = stream.readline()
        if not line:
            break
        lines += line
        found = LISTENING.search(line)
        if found:
            return lines, int(found.group(1))
    raise AssertionError(f"no start-up line on stderr:\n{lines}")


def with_client_procedures(server: Server) -> Server:
    """`server` with what the client and command suites call: sum, echo, fail, size,
    kinds, nap and anap (async)."""

    @server
    def sum(a: int, b: int) -> int:
        return a + b

    @server
    def echo(data):  # type: ignore[no-untyped-def]
        return data

    @server
    def fail() -> None:
        raise RPCError(-32001, "boom", {"why": "asked"})

    @server
    def size(data: bytes) -> int:
        return len(data)

    @server
    def kinds(**params):  # type: ignore[no-untyped-def]
        return {k: type(v).__name__ for k, v in params.items()}

    @server
    def nap(seconds: float) -> float:
        time.sleep(seconds)
        return seconds

    @server
    async def anap(x: int) -> int:
        await asyncio.sleep(0.05)
        return x

    return server


def default_engines() -> list[str]:
    probe = Server(port=0, engine="uring")
    try:
        probe.start()
    except OSError as error:
        print(f"tests/python_api: testing the poll engine only; uring cannot run here: {error}", file=sys.stderr)
        return ["poll"]
    finally:
        probe.stop()
    return ["poll", "uring"]


ENGINES = [e.strip() for e in os.environ.get("UCALL_ENGINES", "").split(",") if e.strip()] or default_engines()
sys.path.insert(0, str(Path(__file__).resolve().parent))


@pytest.fixture(params=ENGINES)
def engine(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def make_server(engine: str) -> Iterator[Callable[..., Server]]:
    """Factory: `make_server(**options)` is a `Server(port=0, engine=...)` stopped after the test."""
    made: list[Server] = []

    def make(**options: Any) -> Server:
        options.setdefault("port", 0)
        options.setdefault("engine", engine)
        server = Server(**options)
        made.append(server)
        return server

    yield make
    for server in made:
        server.stop()


def _websocket_opcodes(data: bytes) -> list[int]:
    """The opcodes of the WebSocket frames in ``data`` (whole frames, masked or not)."""
    opcodes, at = [], 0
    while at + 2 <= len(data):
        opcodes.append(data[at] & 0x0F)
        length, at = data[at + 1] & 0x7F, at + 2
        masked = data[at - 1] & 0x80
        if length == 126:
            length, at = int.from_bytes(data[at : at + 2], "big"), at + 2
        elif length == 127:
            length, at = int.from_bytes(data[at : at + 8], "big"), at + 8
        at += (4 if masked else 0) + length
    return opcodes


class Recorder:
    """A loopback TCP relay to a server that keeps what each connection's client sent."""

    def __init__(self, port: int) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.sent: list[bytearray] = []
        self.received: list[bytearray] = []  # what each connection's server sent
        self.target = port
        self.sockets: list[socket.socket] = []
        self.threads = [threading.Thread(target=self._accept, daemon=True)]
        self.threads[0].start()

    def _accept(self) -> None:
        self.listener.settimeout(0.1)  # to see close() soon: closing does not wake accept()
        while self.listener.fileno() >= 0:
            try:
                client, _ = self.listener.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            client.settimeout(None)
            server = socket.create_connection(("127.0.0.1", self.target))
            self.sockets += [client, server]
            record, answer = bytearray(), bytearray()
            self.sent.append(record)
            self.received.append(answer)
            for args in ((client, server, record), (server, client, answer)):
                thread = threading.Thread(target=self._pump, args=args, daemon=True)
                self.threads.append(thread)
                thread.start()

    @staticmethod
    def _pump(source: socket.socket, sink: socket.socket, record: bytearray | None) -> None:
        try:
            while data := source.recv(1 << 16):
                if record is not None:
                    record += data
                sink.sendall(data)
        except OSError:
            pass
        for end in (source, sink):
            try:
                end.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def binary_messages(self, transport: str, replies: bool = False) -> int:
        """How many connections carried a binary message (over WebSocket, a binary frame
        after the upgrade): from the client, or with ``replies`` from the server."""
        count = 0
        for record in self.received if replies else self.sent:
            data = bytes(record)
            if transport == "http":
                count += b"content-type: application/vnd.ucall.binary" in data.lower()
            elif transport == "tcp":
                # 0xC1 is in no UTF-8 text: only a binary message's prefix brings it.
                count += b"\xc1" in data
            else:
                head_end = data.find(b"\r\n\r\n")
                count += head_end >= 0 and 0x2 in _websocket_opcodes(data[head_end + 4 :])
        return count

    def close(self) -> None:
        self.listener.close()
        for sock in self.sockets:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        for thread in self.threads:
            thread.join(5)
        for sock in self.sockets:
            sock.close()


class Wire:
    """A plain HTTP/1.1 keep-alive connection, independent of `ucall.client`."""

    def __init__(self, port: int, host: str = "127.0.0.1") -> None:
        self.connection = http.client.HTTPConnection(host, port, timeout=10)
        self.ids = 0

    def post(self, body: bytes | str, path: str = "/") -> tuple[int, bytes]:
        data = body.encode() if isinstance(body, str) else body
        self.connection.request("POST", path, data, {"Content-Type": "application/json"})
        reply = self.connection.getresponse()
        return reply.status, reply.read()

    def call(self, method: str, params: Any = None) -> dict[str, Any]:
        self.ids += 1
        request: dict[str, Any] = {"jsonrpc": "2.0", "method": method, "id": self.ids}
        if params is not None:
            request["params"] = params
        status, body = self.post(json.dumps(request))
        assert status == 200, (status, body)
        reply = json.loads(body)
        assert reply["id"] == self.ids
        return reply  # type: ignore[no-any-return]

    def result(self, method: str, params: Any = None) -> Any:
        reply = self.call(method, params)
        assert "error" not in reply, reply
        return reply["result"]

    def error(self, method: str, params: Any = None) -> dict[str, Any]:
        reply = self.call(method, params)
        assert "error" in reply, reply
        return reply["error"]  # type: ignore[no-any-return]

    def close(self) -> None:
        self.connection.close()


@pytest.fixture
def wire() -> Iterator[Callable[[Server], Wire]]:
    """Factory: `wire(server)` is a keep-alive HTTP connection to a started server."""
    opened: list[Wire] = []

    def connect(server: Server) -> Wire:
        if not server.running:
            server.start()
        w = Wire(server.port)
        opened.append(w)
        return w

    yield connect
    for w in opened:
        w.close()


def tcp_exchange(port: int, payload: bytes, replies: int, timeout: float = 10) -> list[dict[str, Any]]:
    """Send `payload` over raw TCP and read `replies` newline-framed replies."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.sendall(payload)
        reader = sock.makefile("rb")
        return [json.loads(reader.readline()) for _ in range(replies)]


def once(port: int, method: str, params: Any = None) -> Any:
    """One call on a fresh connection, closed afterwards; the result (asserts no error)."""
    w = Wire(port)
    try:
        return w.result(method, params)
    finally:
        w.close()


def once_error(port: int, method: str, params: Any = None) -> dict[str, Any]:
    w = Wire(port)
    try:
        return w.error(method, params)
    finally:
        w.close()


@contextlib.contextmanager
def canned_server(reply: bytes, connections: int = 1) -> Iterator[int]:
    """A server on 127.0.0.1 that reads once from each of `connections` connections, sends
    `reply` and closes it; yields the port."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()

    def answer() -> None:
        for _ in range(connections):
            conn, _ = listener.accept()
            conn.recv(65536)
            conn.sendall(reply)
            conn.close()

    thread = threading.Thread(target=answer)
    thread.start()
    try:
        yield listener.getsockname()[1]
    finally:
        thread.join(10)
        listener.close()


@contextlib.contextmanager
def described_rust_server(engine: str) -> Iterator[int]:
    """Run examples/rust's described_server (debug build) on `engine` until it says its
    start-up line on stderr; yield the port, and kill it at the end."""
    binary = REPO_ROOT / "target" / "debug" / "described_server"
    assert binary.exists(), "build it first: cargo build -p ucall-examples --bin described_server"
    env = dict(os.environ, UCALL_ENGINE=engine)
    with server_process([str(binary), "--port", "0"], env=env, stdout=subprocess.DEVNULL) as (_, port):
        yield port


def serving(
    args: list[str], engine: str, cwd: Path | None = None
) -> contextlib.AbstractContextManager[tuple[subprocess.Popen[str], int]]:
    """Run `python ARGS` (a server on `engine`, the repository's package first on the path)
    as `server_process` does."""
    env = dict(os.environ, UCALL_ENGINE=engine, PYTHONUNBUFFERED="1", PYTHONPATH=str(REPO_ROOT / "python"))
    return server_process([sys.executable, *args], env=env, cwd=cwd)


@contextlib.contextmanager
def server_process(
    command: list[str], *, env: dict[str, str] | None = None, cwd: Path | None = None, stdout: Any = subprocess.PIPE
) -> Iterator[tuple[subprocess.Popen[str], int]]:
    """Run `command` (a server) until it says its start-up line on stderr; yield the
    process and the port, and kill it at the end if it still runs. `proc.started` holds
    the stderr read until then."""
    proc = subprocess.Popen(command, cwd=cwd, stdout=stdout, stderr=subprocess.PIPE, text=True, env=env)
    try:
        proc.started, port = read_until_listening(proc.stderr)  # type: ignore[attr-defined]
        yield proc, port
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for stream in (proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()
