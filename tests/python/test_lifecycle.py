# SPDX-License-Identifier: Apache-2.0
"""Graceful shutdown of a blocking `run()` on SIGTERM and SIGINT, and the Rust example.

On a signal the server stops accepting, finishes the requests in flight, flushes their
replies, closes idle connections and exits with status 0.
"""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import time

import pytest

from conftest import REPO_ROOT, LISTENING, ServerProcess
from wire import HttpConn, TcpConn, jsonrpc_post

SUBTRACT = b'{"jsonrpc":"2.0","method":"subtract","params":[42,23],"id":1}'


def wait_exit(proc: subprocess.Popen, seconds: float) -> int:
    try:
        return proc.wait(seconds)
    except subprocess.TimeoutExpired:
        pytest.fail(f"the server did not exit within {seconds} s of the signal")


@pytest.fixture
def own_server(engine):
    """A server this test signals itself (the shared fixtures treat an exit as a crash)."""
    server = ServerProcess(engine).start()
    try:
        yield server
    finally:
        server.stop()


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_signal_finishes_the_request_in_flight_then_exits_cleanly(own_server, signum):
    server = own_server
    request = jsonrpc_post(SUBTRACT)
    with HttpConn(server.address) as idle, HttpConn(server.address) as busy:
        busy.send(request[:-10])  # the head and part of the body: a request in flight
        time.sleep(0.2)
        server.proc.send_signal(signum)
        time.sleep(0.2)
        busy.send(request[-10:])
        response = busy.final_response()
        assert response.status == 200, response
        assert response.json() == {"jsonrpc": "2.0", "id": 1, "result": 19}
        # RFC 9112 9.6: a server that is closing says so on its last response.
        assert [v.lower() for v in response.header_values("Connection")] == ["close"], response
        assert busy.recv_all_until_closed(5.0) == b"", "the connection closes after the last reply"
        assert idle.recv_all_until_closed(5.0) == b"", "an idle connection is closed without a reply"
    assert wait_exit(server.proc, 5.0) == 0, server.diagnostics()
    with pytest.raises(OSError):
        socket.create_connection(server.address, timeout=1.0).close()


def test_a_stalled_request_is_cut_after_the_grace_period(own_server):
    server = own_server
    with HttpConn(server.address) as stalled:
        stalled.send(jsonrpc_post(SUBTRACT)[:-5])
        time.sleep(0.2)
        started = time.monotonic()
        server.proc.send_signal(signal.SIGTERM)
        assert wait_exit(server.proc, 10.0) == 0, server.diagnostics()
    waited = time.monotonic() - started
    assert 4.0 <= waited <= 8.0, f"exited after {waited:.1f} s; the default grace period is 5 s"


def test_rust_example_sum_server_serves_sum_and_echo_then_stops():
    binary = REPO_ROOT / "target" / "debug" / "sum_server"
    assert binary.is_file(), f"{binary} missing: make test-python builds it"
    proc = subprocess.Popen(
        [str(binary), "--port", "0", "--threads", "2"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        line = proc.stderr.readline()  # the start-up line
        match = LISTENING.fullmatch(line.strip())
        assert match, f"unexpected first line {line!r}"
        address = (match.group(1), int(match.group(2)))
        with HttpConn(address) as http:
            assert http.call(b'{"jsonrpc":"2.0","method":"sum","params":{"a":1,"b":2},"id":1}')["result"] == 3
            assert http.call(b'{"jsonrpc":"2.0","method":"sum","params":[40,2],"id":2}')["result"] == 42
            reply = http.call('{"jsonrpc":"2.0","method":"echo","params":{"data":{"x":["é",1.5]}},"id":3}')
            assert reply["result"] == {"x": ["é", 1.5]}
            reply = http.call(b'{"jsonrpc":"2.0","method":"sum","params":{"a":1},"id":4}')
            assert reply["error"]["code"] == -32602 and "'b'" in reply["error"]["message"]
            rest = http.roundtrip(b"GET /sum?a=20&b=22 HTTP/1.1\r\nHost: x\r\n\r\n", request_method="GET")
            assert (rest.status, rest.body) == (200, b"42")
        with TcpConn(address) as tcp:
            assert tcp.call(b'{"jsonrpc":"2.0","method":"sum","params":[1,2],"id":"t"}') == {
                "jsonrpc": "2.0", "id": "t", "result": 3,
            }
        proc.send_signal(signal.SIGTERM)
        assert wait_exit(proc, 5.0) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(5)
        proc.stdout.close()
        proc.stderr.close()


def test_a_websocket_hears_going_away_on_shutdown(own_server):
    from websockets.exceptions import ConnectionClosed
    from websockets.sync.client import connect

    server = own_server
    host, port = server.address
    with connect(f"ws://{host}:{port}/", open_timeout=5, close_timeout=5) as ws:
        ws.send(SUBTRACT.decode())
        assert json.loads(ws.recv(timeout=5)) == {"jsonrpc": "2.0", "id": 1, "result": 19}
        server.proc.send_signal(signal.SIGTERM)
        with pytest.raises(ConnectionClosed) as closed:
            ws.recv(timeout=5)
    # RFC 6455 7.4.1: 1001, "going away", as a server goes down.
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 1001, closed.value
    assert wait_exit(server.proc, 5.0) == 0, server.diagnostics()
