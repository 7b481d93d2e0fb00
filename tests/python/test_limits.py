# SPDX-License-Identifier: Apache-2.0
"""Limits and time-outs, many connections, and clients that misbehave."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from jsonrpc_match import assert_error, assert_result
from wire import Conn, HttpConn, TcpConn, dumps, is_reset_error, jsonrpc_post, request


def subtract(minuend, subtrahend, id) -> bytes:
    return dumps(request("subtract", [minuend, subtrahend], id=id))


def http_subtract(conn: HttpConn, minuend, subtrahend, id, timeout=None):
    response = conn.roundtrip(jsonrpc_post(subtract(minuend, subtrahend, id)), timeout)
    assert response.status == 200, response
    assert_result(response.json(), minuend - subtrahend, id)


# ------------------------------------------------------------------------------------
# Time-outs


def test_header_timeout_closes_a_slow_client_while_others_are_served(spawn_server):
    server = spawn_server("--header-timeout-ms", "1000")
    head = b"POST / HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nX-Slow: " + b"s" * 200
    started = time.monotonic()
    slow = Conn(server.address)
    closed_at = None
    other_latency = None
    received = bytearray()
    try:
        for byte_index in range(len(head)):
            try:
                slow.send(head[byte_index : byte_index + 1])
            except OSError as exc:
                assert is_reset_error(exc), exc
                closed_at = time.monotonic()
                break
            if slow.closed_within(0.3):
                closed_at = time.monotonic()
                break
            if other_latency is None and time.monotonic() - started > 0.4:
                t0 = time.monotonic()
                with HttpConn(server.address) as other:
                    http_subtract(other, 5, 2, "other", timeout=2)
                other_latency = time.monotonic() - t0
            if time.monotonic() - started > 8:
                break
        received += slow.buf
    finally:
        slow.close()
    assert other_latency is not None and other_latency < 0.5, (
        f"another client waited {other_latency} s while a slow client was sending its head"
    )
    assert closed_at is not None, "a client sending its head one byte per 300 ms was never closed"
    elapsed = closed_at - started
    assert 0.9 <= elapsed <= 3.0, f"closed after {elapsed:.2f} s with --header-timeout-ms 1000"
    assert received == b"" or received.startswith(b"HTTP/1.1 408"), bytes(received[:200])


def test_idle_keep_alive_connection_is_closed(spawn_server):
    server = spawn_server("--idle-timeout-ms", "500")
    with HttpConn(server.address) as conn:
        http_subtract(conn, 5, 2, 1)
        replied = time.monotonic()
        conn.expect_closed(3)
        elapsed = time.monotonic() - replied
        assert 0.4 <= elapsed <= 2.5, f"idle connection closed after {elapsed:.2f} s with --idle-timeout-ms 500"


def test_active_keep_alive_connection_is_kept(spawn_server):
    server = spawn_server("--idle-timeout-ms", "500")
    with HttpConn(server.address) as conn:
        deadline = time.monotonic() + 1.6
        i = 0
        while time.monotonic() < deadline:
            http_subtract(conn, 100, i, i)
            i += 1
            time.sleep(0.2)
        assert i >= 5


# ------------------------------------------------------------------------------------
# Size and count limits


def test_max_connections(spawn_server):
    server = spawn_server("--max-connections", "4")
    held = [HttpConn(server.address) for _ in range(4)]
    try:
        for i, conn in enumerate(held):
            http_subtract(conn, 10, i, i)

        # A fifth connection must not be served while four are open: it may be left
        # waiting, closed, reset or answered 503, but not answered 200.
        extra = HttpConn(server.address, timeout=2)
        try:
            try:
                extra.send(jsonrpc_post(subtract(1, 1, "extra")))
                extra.closed_within(1.5)
            except OSError as exc:
                assert is_reset_error(exc), exc
            got = bytes(extra.buf)
            assert not got.startswith(b"HTTP/1.1 200"), "a fifth connection was served with --max-connections 4"
            assert got == b"" or got.startswith(b"HTTP/1.1 503"), got[:200]
        finally:
            extra.close()

        # The four open connections still work.
        for i, conn in enumerate(held):
            http_subtract(conn, 20, i, i)

        # Once one of them is gone, a new connection is served.
        held.pop().close()
        deadline = time.monotonic() + 3
        while True:
            try:
                with HttpConn(server.address, timeout=1) as fresh:
                    http_subtract(fresh, 7, 7, "fresh", timeout=1)
                break
            except (OSError, AssertionError):
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
    finally:
        for conn in held:
            conn.close()


def batch(n: int, offset: int = 0) -> list[dict]:
    return [request("subtract", [100, offset + i], id=offset + i) for i in range(n)]


def check_batch_replies(replies, n: int, offset: int = 0):
    assert isinstance(replies, list) and len(replies) == n, replies
    for i, reply in enumerate(replies):
        assert_result(reply, 100 - offset - i, offset + i)


def test_max_batch_over_http(spawn_server):
    server = spawn_server("--max-batch", "4")
    with HttpConn(server.address) as conn:
        check_batch_replies(conn.call(batch(4)), 4)
        assert_error(conn.call(batch(5)), -32600, None)
        check_batch_replies(conn.call(batch(3, 10)), 3, 10)


def test_max_batch_over_tcp(spawn_server):
    server = spawn_server("--max-batch", "4")
    with TcpConn(server.address) as conn:
        check_batch_replies(conn.call(batch(4)), 4)
        assert_error(conn.call(batch(5)), -32600, None)
        check_batch_replies(conn.call(batch(3, 10)), 3, 10)


# ------------------------------------------------------------------------------------
# Many clients, broken clients


def test_200_concurrent_keep_alive_connections(server):
    clients = 200
    gate = threading.Barrier(clients, timeout=20)

    def client(n: int) -> None:
        with HttpConn(server, timeout=10) as conn:
            gate.wait()  # all 200 connections are open at once
            for k in range(3):
                http_subtract(conn, n * 10, k, f"{n}-{k}", timeout=10)

    with ThreadPoolExecutor(max_workers=clients) as pool:
        futures = [pool.submit(client, n) for n in range(clients)]
        errors = [f.exception(timeout=25) for f in futures]
    failed = [(n, repr(e)) for n, e in enumerate(errors) if e is not None]
    assert not failed, f"{len(failed)} of {clients} clients failed, first ones: {failed[:5]}"


def test_200_concurrent_tcp_connections(server):
    clients = 200
    gate = threading.Barrier(clients, timeout=20)

    def client(n: int) -> None:
        with TcpConn(server, timeout=10) as conn:
            gate.wait()
            for k in range(3):
                assert_result(conn.call(request("subtract", [n, k], id=k), timeout=10), n - k, k)

    with ThreadPoolExecutor(max_workers=clients) as pool:
        futures = [pool.submit(client, n) for n in range(clients)]
        errors = [f.exception(timeout=25) for f in futures]
    failed = [(n, repr(e)) for n, e in enumerate(errors) if e is not None]
    assert not failed, f"{len(failed)} of {clients} clients failed, first ones: {failed[:5]}"


@pytest.mark.parametrize("protocol", ["http", "tcp"])
def test_connection_reset_mid_request_does_not_disturb_others(spawn_server, protocol):
    server = spawn_server()
    body = subtract(8, 3, "kept")
    whole = jsonrpc_post(body) if protocol == "http" else body + b"\n"
    with HttpConn(server.address) as keeper:
        http_subtract(keeper, 8, 3, "before")
        for _ in range(20):
            # Reset in the middle of a request...
            half = Conn(server.address)
            half.send(whole[: len(whole) // 2])
            half.reset()
        for _ in range(5):
            # ...and right after many requests, while the server is writing the replies.
            busy = Conn(server.address)
            busy.send(whole * 200)
            busy.reset()
        http_subtract(keeper, 8, 3, "after")
    with HttpConn(server.address) as fresh:
        http_subtract(fresh, 8, 3, "fresh")
    with TcpConn(server.address) as fresh_tcp:
        assert_result(fresh_tcp.call(request("subtract", [8, 3], id="tcp")), 5, "tcp")
    assert server.alive(), server.diagnostics()


def test_max_body_bytes_over_tcp_however_the_text_arrives(spawn_server):
    """A raw-TCP text over --max-body-bytes is refused with -32600 and the connection closed,
    also when it arrives whole in one read (it was checked only while incomplete)."""
    server = spawn_server("--max-body-bytes", "1024")
    short = dumps(request("echo", ["x" * 900], id=1))
    long = dumps(request("echo", ["x" * 2000], id=2))
    for pieces in ([long], [long[:500], long[500:]]):
        with TcpConn(server.address) as conn:
            assert_result(conn.call(short), "x" * 900, 1)
            for piece in pieces[:-1]:
                conn.send(piece)
                time.sleep(0.05)
            reply = conn.call(pieces[-1])
            assert_error(reply, -32600, None)
            assert "1024 bytes" in reply["error"]["message"]
            conn.expect_closed()
