# SPDX-License-Identifier: Apache-2.0
"""The request log from Python: ``Server(request_log=..., request_log_format=...)`` (a path,
a file object or a descriptor) and ``ucall serve --access-log PATH --access-log-format
json``, also with ``--workers``: one line per call, its fields checked against what the
client sent and got, over HTTP, raw TCP and WebSocket, on each engine; nothing when off
(the default)."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import textwrap
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest
from conftest import Wire, once, serving, tcp_exchange
from test_workers import serve_args, supervised

from ucall import RPCError, Server

WS_UPGRADE = (
    b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
    b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
)


def ws_frame(payload: bytes) -> bytes:
    """A client's masked text frame (RFC 6455 5.2), under 126 bytes."""
    mask = b"\x11\x22\x33\x44"
    assert len(payload) < 126
    return bytes([0x81, 0x80 | len(payload)]) + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload))


def ws_call(port: int, payload: bytes) -> tuple[bytes, str]:
    """One message over WebSocket: the reply's payload and the client's own address."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(WS_UPGRADE + ws_frame(payload))
        data = b""
        while b"\r\n\r\n" not in data:
            data += sock.recv(4096)
        head, _, data = data.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 101"), head
        while len(data) < 2 or len(data) < 2 + (data[1] & 0x7F):
            data += sock.recv(4096)
        assert data[0] == 0x81 and data[1] < 126, data
        host, port_ = sock.getsockname()[:2]
        return data[2 : 2 + data[1]], f"{host}:{port_}"


def serve(make_server: Any, **options: Any) -> Server:
    server = make_server(threads=1, **options)

    @server
    def add(a: int, b: int) -> int:
        return a + b

    @server
    def fail() -> None:
        raise RPCError(-32042, "not today")

    server.start()
    return server


def lines_of(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def only(lines: list[dict[str, Any]], **fields: Any) -> dict[str, Any]:
    found = [line for line in lines if all(line.get(k, "absent") == v for k, v in fields.items())]
    assert len(found) == 1, (fields, lines)
    return found[0]


def check(line: dict[str, Any], peer: str, code: int, status: int | None, sent: bytes, received: bytes) -> None:
    assert line["peer"] == peer, line
    assert line["code"] == code, line
    assert line.get("status") == status, line
    assert line["bytes_in"] == len(sent), line
    assert line["bytes_out"] == len(received), line
    assert isinstance(line["duration_us"], int) and line["duration_us"] >= 0, line
    when = datetime.strptime(line["time"], "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=timezone.utc)
    assert abs((datetime.now(timezone.utc) - when).total_seconds()) < 60, line
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", line["time"]), line


def request(method: str, params: Any = None, id: Any = None) -> bytes:
    message: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
    if params is not None:
        message["params"] = params
    if id is not None:
        message["id"] = id
    return json.dumps(message).encode()


def test_every_call_gets_a_json_line(make_server, tmp_path):
    path = tmp_path / "requests.log"
    server = serve(make_server, request_log=path, request_log_format="json")
    wire = Wire(server.port)
    add = request("add", {"a": 1, "b": 2}, 1)
    status, add_reply = wire.post(add)
    assert status == 200 and json.loads(add_reply)["result"] == 3
    host, port = wire.connection.sock.getsockname()[:2]
    peer = f"{host}:{port}"
    note = request("add", [5, 6])
    assert wire.post(note) == (204, b"")
    fail = request("fail", id="f")
    fail_reply = wire.post(fail)[1]
    failed = json.loads(fail_reply)["error"]
    unknown = request("nope", id=3)
    unknown_reply = wire.post(unknown)[1]
    batch_elements = [request("add", [2, 2], 10), request("add", [9, 9])]
    status, batch_reply = wire.post(b"[" + b",".join(batch_elements) + b"]")
    assert status == 200
    (batch_answer,) = json.loads(batch_reply)
    wire.close()
    tcp = request("add", [3, 4], 7)
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
        sock.sendall(tcp + b"\n")
        tcp_reply = sock.makefile("rb").readline().rstrip(b"\n")
        tcp_peer = "{}:{}".format(*sock.getsockname()[:2])
    ws = request("add", [5, 5], 8)
    ws_reply, ws_peer = ws_call(server.port, ws)
    server.stop()  # the workers write their last lines as they stop

    lines = lines_of(path)
    assert len(lines) == 8, lines
    assert {line["transport"] for line in lines} == {"http", "tcp", "websocket"}
    check(only(lines, method="add", id=1), peer, 0, 200, add, add_reply)
    check(only(lines, method="add", id="absent", status=204), peer, 0, 204, note, b"")
    check(only(lines, method="fail", id="f"), peer, failed["code"], 200, fail, fail_reply)
    assert failed["code"] == -32042
    unknown_line = only(lines, method="nope", id=3)
    check(unknown_line, peer, -32601, 200, unknown, unknown_reply)
    assert unknown_line["duration_us"] == 0
    answer = json.dumps(batch_answer, separators=(",", ":")).encode()
    check(only(lines, method="add", id=10), peer, 0, 200, batch_elements[0], answer)
    check(only(lines, method="add", id="absent", status=200), peer, 0, 200, batch_elements[1], b"")
    check(only(lines, method="add", id=7), tcp_peer, 0, None, tcp, tcp_reply)
    assert only(lines, id=7)["transport"] == "tcp"
    check(only(lines, method="add", id=8), ws_peer, 0, None, ws, ws_reply)
    assert only(lines, id=8)["transport"] == "websocket"


def test_text_lines_to_a_file_object_or_a_descriptor(make_server, tmp_path):
    path = tmp_path / "requests.log"
    with open(path, "ab") as file:
        server = serve(make_server, request_log=file)
        assert tcp_exchange(server.port, request("add", [1, 2], "a b") + b"\n", 1)[0]["result"] == 3
        server.stop()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND)
    try:
        server = serve(make_server, request_log=fd, request_log_format="text")
        assert tcp_exchange(server.port, request("nope", id=2) + b"\n", 1)[0]["error"]["code"] == -32601
        server.stop()
    finally:
        os.close(fd)  # the server wrote to its own duplicate
    first, second = path.read_text().splitlines()
    pattern = (
        r"time=\S+Z peer=127\.0\.0\.1:\d+ transport=tcp method=\"{method}\" id={id} code={code} "
        r"duration_us=\d+ bytes_in=\d+ bytes_out=\d+"
    )
    assert re.fullmatch(pattern.format(method="add", id=r"\"a b\"", code=0), first), first
    assert re.fullmatch(pattern.format(method="nope", id=2, code=-32601), second), second


def test_bad_settings_are_refused(tmp_path):
    with pytest.raises(ValueError, match="request_log_format"):
        Server(request_log=tmp_path / "x.log", request_log_format="xml")
    with pytest.raises(TypeError, match="request_log"):
        Server(request_log=3.5)  # type: ignore[arg-type]
    server = Server(port=0, request_log=tmp_path / "missing" / "x.log")
    with pytest.raises(OSError, match="x.log"):
        server.start()
    server.stop()


APP = """
import os
from ucall import Server
server = Server(threads=1)

@server
def pid() -> int:
    return os.getpid()
"""


def test_serve_with_workers_appends_to_one_file(tmp_path, engine):
    (tmp_path / "app.py").write_text(textwrap.dedent(APP))
    log = tmp_path / "access.log"
    args = serve_args(2, "--access-log", str(log), "--access-log-format", "json")
    with supervised(args, tmp_path, engine) as running:
        pids = [once(running.port, "pid") for _ in range(60)]
        running.wait_for(lambda: log.exists() and len(log.read_text().splitlines()) == 60)
        running.proc.send_signal(signal.SIGTERM)
        assert running.proc.wait(20) == 0
    lines = lines_of(log)
    assert len(lines) == 60 and all(line["method"] == "pid" and line["code"] == 0 for line in lines)
    assert len(set(pids)) == 2, "both workers answered (and logged)"


def test_off_by_default(tmp_path, engine):
    (tmp_path / "app.py").write_text(textwrap.dedent(APP))
    serve = ["-m", "ucall", "serve", "app:server", "--host", "127.0.0.1", "--port", "0"]
    with serving(serve, engine, cwd=tmp_path) as (proc, port):
        for _ in range(5):
            once(port, "pid")
        time.sleep(0.2)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(10) == 0
        output = proc.stdout.read() + proc.stderr.read()
    assert "pid" not in output and "duration_us" not in output, output
    assert not list(tmp_path.glob("*.log"))
