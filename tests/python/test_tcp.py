# SPDX-License-Identifier: Apache-2.0
"""Raw TCP transport: a stream of JSON texts in, one reply line per call out."""

from __future__ import annotations

import time

from check_vectors import strict_json_loads
from jsonrpc_match import assert_error, assert_result
from wire import TcpConn, dumps, request


def subtract(minuend, subtrahend, id) -> bytes:
    return dumps(request("subtract", [minuend, subtrahend], id=id))


def read_subtract(conn, minuend, subtrahend, id):
    assert_result(conn.read_reply(), minuend - subtrahend, id)


def test_requests_back_to_back(server):
    with TcpConn(server) as conn:
        conn.send(subtract(10, 1, 1) + subtract(20, 2, 2) + subtract(30, 3, 3))
        for i in (1, 2, 3):
            read_subtract(conn, 10 * i, i, i)


def test_requests_separated_by_whitespace_and_newlines(server):
    with TcpConn(server) as conn:
        conn.send(subtract(10, 1, 1) + b"\n\n  \t" + subtract(20, 2, 2) + b"\r\n" + subtract(30, 3, 3) + b" \r\n\t\n")
        for i in (1, 2, 3):
            read_subtract(conn, 10 * i, i, i)
        # A batch in the same stream, on a line of its own.
        conn.send(b"\n[" + subtract(5, 1, "b1") + b" , " + subtract(5, 2, "b2") + b"]\n")
        replies = conn.read_reply()
        assert isinstance(replies, list) and len(replies) == 2, replies
        assert_result(replies[0], 4, "b1")
        assert_result(replies[1], 3, "b2")


def test_each_reply_is_one_line(server):
    """Replies are compact single lines even when the data holds newlines."""
    data = {"text": "line 1\nline 2\r\n", "list": [1, 2, {"a": "b"}]}
    with TcpConn(server) as conn:
        conn.send(dumps(request("echo", [data], id="lines")) + b"\n")
        line = conn.read_line()
        assert b"\n" not in line and b"\r" not in line
        assert_result(strict_json_loads(line.decode()), data, "lines")
        assert conn.nothing_received_within(0.2), "more than one line for one call"


STREAM = (
    dumps(request("echo", ["aé€😀z"], id="é"))
    + b"\n"
    + dumps(request("notify_hello", [7], notification=True))
    + dumps(request("subtract", {"minuend": 8, "subtrahend": 5}, id=2))
)


def check_stream_replies(conn):
    assert_result(conn.read_reply(), "aé€😀z", "é")
    read_subtract(conn, 8, 5, 2)


def test_stream_sent_one_byte_at_a_time(server):
    with TcpConn(server) as conn:
        conn.send_in_pieces(STREAM, size=1, pause=0.001)
        check_stream_replies(conn)


def test_stream_split_at_every_byte(server):
    """One split point at a time, including every byte inside a multi-byte character."""
    assert len(STREAM.decode("utf-8")) < len(STREAM)  # the stream does hold multi-byte characters
    with TcpConn(server) as conn:
        for cut in range(1, len(STREAM)):
            conn.send(STREAM[:cut])
            time.sleep(0.002)
            conn.send(STREAM[cut:])
            check_stream_replies(conn)


def test_many_requests_in_one_send_are_answered_in_order(server):
    with TcpConn(server) as conn:
        conn.send(b"\n".join(subtract(5000, i, i) for i in range(1000)) + b"\n")
        for i in range(1000):
            read_subtract(conn, 5000, i, i)


def test_large_request(server):
    data = "ü" * 40000
    with TcpConn(server) as conn:
        assert_result(conn.call(request("echo", [data], id="large"), timeout=10), data, "large")


def test_garbage_after_valid_requests(server):
    with TcpConn(server) as conn:
        conn.send(subtract(3, 1, 1) + b"\n" + subtract(4, 1, 2) + b"\n@@@ this is not JSON\n")
        read_subtract(conn, 3, 1, 1)
        read_subtract(conn, 4, 1, 2)
        assert_error(conn.read_reply(), -32700, None)
        conn.expect_closed(3)


def test_garbage_in_a_later_send(server):
    with TcpConn(server) as conn:
        conn.send(subtract(0, 0, 0))
        read_subtract(conn, 0, 0, 0)
        conn.send(b"}")
        assert_error(conn.read_reply(), -32700, None)
        conn.expect_closed(3)


def test_half_close_after_complete_requests(server):
    """The server answers what it received before the end of input, then closes."""
    with TcpConn(server) as conn:
        conn.send(subtract(9, 1, 1) + subtract(9, 2, 2))
        conn.shutdown_write()
        read_subtract(conn, 9, 1, 1)
        read_subtract(conn, 9, 2, 2)
        conn.expect_closed(3)


def test_notifications_write_nothing(server):
    with TcpConn(server) as conn:
        conn.send(dumps(request("notify_sum", [1, 2], notification=True)) + b"\n")
        conn.send(dumps([request("update", [1], notification=True), request("notify_hello", [7], notification=True)]))
        assert conn.nothing_received_within(0.3)
        conn.send(subtract(2, 1, "x"))
        read_subtract(conn, 2, 1, "x")
