# SPDX-License-Identifier: Apache-2.0
"""``Server(unix_socket=...)`` and ``ucall serve --uds PATH``: HTTP (keep-alive), raw TCP
and WebSocket over an AF_UNIX socket beside the TCP port, on each engine; the socket
file's mode, a stale file replaced, a live one refused, the file removed at stop; the
request log's peer for such calls; and no worker processes with it."""

from __future__ import annotations

import json
import os
import signal
import socket
import stat
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from conftest import REPO_ROOT, once, serving

from ucall import Server

WS_UPGRADE = (
    b"GET / HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
    b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
)


def connect(path: Path | str) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(10)
    sock.connect(str(path))
    return sock


def call(method: str, params: Any, id_: int) -> bytes:
    return json.dumps({"jsonrpc": "2.0", "method": method, "params": params, "id": id_}).encode()


def post(body: bytes) -> bytes:
    return b"POST / HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (
        len(body),
        body,
    )


class Reader:
    """Whole HTTP responses and lines from one socket, in order."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock, self.data = sock, b""

    def _more(self) -> None:
        chunk = self.sock.recv(65536)
        assert chunk, f"closed; received {self.data!r}"
        self.data += chunk

    def response(self) -> tuple[int, bytes]:
        while b"\r\n\r\n" not in self.data:
            self._more()
        head, _, rest = self.data.partition(b"\r\n\r\n")
        fields = dict(
            line.split(b":", 1) for line in head.split(b"\r\n")[1:] if b":" in line
        )
        length = int({k.strip().lower(): v for k, v in fields.items()}.get(b"content-length", b"0"))
        while len(rest) < length:
            self._more()
            rest = self.data.partition(b"\r\n\r\n")[2]
        self.data = rest[length:]
        return int(head.split()[1]), rest[:length]

    def line(self) -> bytes:
        while b"\n" not in self.data:
            self._more()
        line, _, self.data = self.data.partition(b"\n")
        return line


def result(body: bytes, id_: int) -> Any:
    reply = json.loads(body)
    assert reply.get("id") == id_ and "error" not in reply, reply
    return reply["result"]


def sum_server(make_server: Any, **options: Any) -> Server:
    server = make_server(threads=2, **options)

    @server
    def sum(a: int, b: int) -> int:
        return a + b

    return server


def test_http_raw_tcp_and_websocket_over_the_unix_socket(make_server, tmp_path):
    path = tmp_path / "api.sock"
    server = sum_server(make_server, unix_socket=path, unix_socket_mode=0o600).start()
    assert server.unix_socket == str(path)
    assert stat.S_ISSOCK(path.stat().st_mode) and stat.S_IMODE(path.stat().st_mode) == 0o600
    with connect(path) as sock:  # keep-alive, then two requests pipelined
        reader = Reader(sock)
        for id_ in (1, 2):
            sock.sendall(post(call("sum", [id_, 10], id_)))
            status, body = reader.response()
            assert status == 200 and result(body, id_) == id_ + 10
        sock.sendall(post(call("sum", [3, 3], 3)) + post(call("sum", [4, 4], 4)))
        assert [result(reader.response()[1], i) for i in (3, 4)] == [6, 8]
    with connect(path) as sock:  # raw TCP: JSON texts, one reply line each
        sock.sendall(call("sum", {"a": 5, "b": 6}, 5) + b"\n" + call("sum", [7, 8], 6) + b"\n")
        reader = Reader(sock)
        assert [result(reader.line(), i) for i in (5, 6)] == [11, 15]
    with connect(path) as sock:  # WebSocket
        payload = call("sum", [20, 22], 7)
        mask = b"\x01\x02\x03\x04"
        frame = bytes([0x81, 0x80 | len(payload)]) + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
        sock.sendall(WS_UPGRADE + frame)
        reader = Reader(sock)
        while b"\r\n\r\n" not in reader.data:
            reader._more()
        head, _, reader.data = reader.data.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 101"), head
        while len(reader.data) < 2 or len(reader.data) < 2 + (reader.data[1] & 0x7F):
            reader._more()
        assert reader.data[0] == 0x81
        assert result(reader.data[2 : 2 + reader.data[1]], 7) == 42
    assert once(server.port, "sum", [2, 2]) == 4  # the TCP port serves beside it
    server.stop()
    assert not path.exists(), "the socket file is removed at stop"


def test_a_stale_file_is_replaced_and_a_live_one_or_a_plain_file_refused(make_server, tmp_path):
    path = tmp_path / "api.sock"
    stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stale.bind(str(path))
    stale.close()  # what a killed server leaves: the file, nobody listening
    server = sum_server(make_server, unix_socket=path).start()
    with pytest.raises(OSError, match="another server listens on it"):
        sum_server(make_server, unix_socket=str(path)).start()
    with connect(path) as sock:  # the first still serves
        sock.sendall(post(call("sum", [1, 1], 1)))
        assert result(Reader(sock).response()[1], 1) == 2
    server.stop()
    assert not path.exists()
    path.write_text("data")
    with pytest.raises(OSError, match="is not a socket"):
        sum_server(make_server, unix_socket=path).start()
    assert path.read_text() == "data"


def test_the_request_log_has_no_peer_for_a_unix_socket_call(make_server, tmp_path):
    path, log = tmp_path / "api.sock", tmp_path / "requests.log"
    server = sum_server(make_server, unix_socket=path, request_log=log, request_log_format="json").start()
    with connect(path) as sock:
        sock.sendall(post(call("sum", [1, 2], 1)))
        assert result(Reader(sock).response()[1], 1) == 3
    server.stop()
    (line,) = log.read_text().splitlines()
    entry = json.loads(line)
    assert entry["peer"] is None and entry["transport"] == "http" and entry["method"] == "sum", entry


def test_options_are_checked_and_workers_refused(tmp_path):
    with pytest.raises(ValueError, match="unix_socket_mode needs unix_socket"):
        Server(port=0, unix_socket_mode=0o600)
    with pytest.raises(ValueError, match="permission bits"):
        Server(port=0, unix_socket=tmp_path / "s.sock", unix_socket_mode=0o10000)
    with pytest.raises(ValueError, match="unix_socket must be a path"):
        Server(port=0, unix_socket="")
    with pytest.raises(ValueError, match="worker processes cannot share its path"):
        Server(port=0, unix_socket=tmp_path / "s.sock").run(workers=2)
    assert not (tmp_path / "s.sock").exists()


def test_ucall_serve_uds(tmp_path, engine):
    (tmp_path / "app.py").write_text(
        textwrap.dedent("""
        from ucall import Server
        server = Server()

        @server
        def hello(name: str) -> str:
            return f"hello {name}"
    """)
    )
    path = tmp_path / "app.sock"
    args = ["-m", "ucall", "serve", "app:server", "--port", "0", "--uds", str(path), "--uds-mode", "660"]
    args += ["--metrics-buckets", "0.01,0.1"]
    with serving(args, engine, cwd=tmp_path) as (proc, port):
        assert stat.S_IMODE(path.stat().st_mode) == 0o660
        with connect(path) as sock:
            reader = Reader(sock)
            sock.sendall(post(call("hello", ["unix"], 1)))
            assert result(reader.response()[1], 1) == "hello unix"
            sock.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
            status, page = reader.response()
            assert status == 200 and b'le="0.01"' in page and b'le="0.005"' not in page, page[:400]
        assert once(port, "hello", ["tcp"]) == "hello tcp"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(10) == 0
    assert not path.exists()


def test_ucall_serve_uds_refuses_workers(tmp_path):
    (tmp_path / "app.py").write_text("from ucall import Server\nserver = Server()\n")
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT / "python"))
    for extra in (["--workers", "2"], ["--reload"]):
        done = subprocess.run(
            [sys.executable, "-m", "ucall", "serve", "app:server", "--uds", str(tmp_path / "s.sock"), *extra],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            env=env,
            timeout=30,
        )
        assert done.returncode == 2 and "--uds serves from one process" in done.stderr, done.stderr
