# SPDX-License-Identifier: Apache-2.0
"""HTTP/1.1 behaviour (RFC 9112, RFC 9110) checked with raw bytes on a socket."""

from __future__ import annotations

import email.utils
import re
import time
from datetime import datetime, timezone

import pytest

from jsonrpc_match import assert_error, assert_result, differences
from wire import HttpConn, dumps, http_request, jsonrpc_post, request

IMF_FIXDATE = re.compile(
    r"(Mon|Tue|Wed|Thu|Fri|Sat|Sun), \d{2} (Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) \d{4} "
    r"\d{2}:\d{2}:\d{2} GMT"
)


def subtract(minuend, subtrahend, id):
    return dumps(request("subtract", [minuend, subtrahend], id=id))


def assert_ok_subtract(response, minuend, subtrahend, id):
    assert response.status == 200, f"expected 200, got {response}"
    assert_result(response.json(), minuend - subtrahend, id)


# ------------------------------------------------------------------------------------
# Persistence (RFC 9112 §9.3)


def test_keep_alive_is_the_default(server):
    with HttpConn(server) as conn:
        for i in range(3):
            response = conn.roundtrip(jsonrpc_post(subtract(10, i, i)))
            assert response.version == "HTTP/1.1", response
            assert "close" not in response.connection_tokens(), response
            assert_ok_subtract(response, 10, i, i)
        assert conn.nothing_received_within(0.3), "the server closed a keep-alive connection"


@pytest.mark.parametrize("value", ["close", "CLOSE", "keep-alive, close"])
def test_connection_close_closes_after_the_reply(server, value):
    with HttpConn(server) as conn:
        response = conn.roundtrip(jsonrpc_post(subtract(5, 3, 1), {"Connection": value}))
        assert_ok_subtract(response, 5, 3, 1)
        conn.expect_closed(3)


def test_http10_closes_by_default(server):
    with HttpConn(server) as conn:
        response = conn.roundtrip(jsonrpc_post(subtract(5, 3, 1), version="HTTP/1.0"))
        assert_ok_subtract(response, 5, 3, 1)
        conn.expect_closed(3)


def test_http10_keep_alive_persists(server):
    with HttpConn(server) as conn:
        for i in range(2):
            response = conn.roundtrip(jsonrpc_post(subtract(7, i, i), {"Connection": "keep-alive"}, version="HTTP/1.0"))
            assert_ok_subtract(response, 7, i, i)
            # An HTTP/1.0 client only keeps the connection when the response says so.
            assert "keep-alive" in response.connection_tokens(), response


def test_pipelined_requests_are_answered_in_order(server):
    with HttpConn(server) as conn:
        conn.send(
            jsonrpc_post(subtract(10, 1, 1))
            + jsonrpc_post(dumps(request("notify_hello", [7], notification=True)))
            + jsonrpc_post(subtract(30, 3, 3))
        )
        assert_ok_subtract(conn.final_response(), 10, 1, 1)
        second = conn.final_response()
        assert second.status == 204 and second.body == b"", second
        assert_ok_subtract(conn.final_response(), 30, 3, 3)


def test_many_pipelined_requests(server):
    with HttpConn(server) as conn:
        conn.send(b"".join(jsonrpc_post(subtract(1000, i, i)) for i in range(100)))
        for i in range(100):
            assert_ok_subtract(conn.final_response(), 1000, i, i)


# ------------------------------------------------------------------------------------
# Message body framing (RFC 9112 §6, §7)


def chunked_request(body: bytes, transfer_encoding: str = "chunked") -> bytes:
    """`body` in three chunks with extensions, then trailer fields."""
    p1, p2, p3 = body[:10], body[10:-5], body[-5:]
    head = http_request("POST", "/", None, {"Content-Type": "application/json", "Transfer-Encoding": transfer_encoding})
    return (
        head
        + b"%x;name=value\r\n" % len(p1) + p1 + b"\r\n"
        + b'%X ; quoted="a;b\\"c" ;flag\r\n' % len(p2) + p2 + b"\r\n"
        + b"%04x\r\n" % len(p3) + p3 + b"\r\n"
        + b"0;last=yes\r\nX-Trailer-One: 1\r\nX-Trailer-Two: two\r\n\r\n"
    )


@pytest.mark.parametrize("transfer_encoding", ["chunked", "Chunked"])
def test_chunked_body_with_extensions_and_trailers(server, transfer_encoding):
    body = dumps(request("subtract", {"minuend": 100, "subtrahend": 1}, id="chunked"))
    with HttpConn(server) as conn:
        # A second request right behind the trailers: they must be consumed exactly.
        conn.send(chunked_request(body, transfer_encoding) + jsonrpc_post(subtract(2, 1, "after")))
        assert_ok_subtract(conn.final_response(), 100, 1, "chunked")
        assert_ok_subtract(conn.final_response(), 2, 1, "after")


def test_expect_100_continue(server):
    body = subtract(50, 8, "expect")
    head = http_request(
        "POST", "/", None,
        {"Content-Type": "application/json", "Content-Length": str(len(body)), "Expect": "100-continue"},
    )
    with HttpConn(server) as conn:
        conn.send(head)
        interim = conn.read_response(timeout=3)
        assert interim.status == 100, f"expected '100 Continue' before the body was sent, got {interim}"
        assert interim.head.startswith(b"HTTP/1.1 100 Continue\r\n"), interim.head
        conn.send(body)
        assert_ok_subtract(conn.final_response(), 50, 8, "expect")


def test_header_names_in_any_case(server):
    body = subtract(9, 4, "case")
    raw = (
        b"POST / HTTP/1.1\r\nhOsT: 127.0.0.1\r\ncontent-TYPE: application/json\r\n"
        b"CONTENT-LENGTH: %d\r\nconnection: KEEP-ALIVE\r\n\r\n" % len(body)
    ) + body
    with HttpConn(server) as conn:
        for _ in range(2):
            assert_ok_subtract(conn.roundtrip(raw), 9, 4, "case")


def test_lowercase_chunked_header_name(server):
    body = dumps(request("subtract", [6, 1], id="lower"))
    raw = chunked_request(body).replace(b"Transfer-Encoding:", b"transfer-encoding:")
    with HttpConn(server) as conn:
        assert_ok_subtract(conn.roundtrip(raw), 6, 1, "lower")


def test_request_split_byte_by_byte(server):
    with HttpConn(server) as conn:
        for i in range(2):
            conn.send_in_pieces(jsonrpc_post(subtract(20, i, f"slow{i}")), size=1, pause=0.001)
            assert_ok_subtract(conn.final_response(), 20, i, f"slow{i}")


def test_chunked_request_split_byte_by_byte(server):
    body = dumps(request("echo", ["é€😀"], id="split"))
    with HttpConn(server) as conn:
        conn.send_in_pieces(chunked_request(body), size=1, pause=0.001)
        response = conn.final_response()
        assert response.status == 200, response
        assert_result(response.json(), "é€😀", "split")


# ------------------------------------------------------------------------------------
# Rejected requests


def head_with(*headers: str) -> bytes:
    lines = "".join(h + "\r\n" for h in headers)
    return ("POST / HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n" + lines + "\r\n").encode()


@pytest.mark.parametrize(
    "headers",
    [
        ["Content-Length: abc"],
        ["Content-Length: -5"],
        ["Content-Length: +5"],
        ["Content-Length: 0x10"],
        ["Content-Length: 1 2"],
        ["Content-Length:"],
        ["Content-Length: 5", "Content-Length: 6"],
        ["Content-Length: 5, 6"],
    ],
    ids=["letters", "negative", "plus-sign", "hex", "two-numbers", "empty", "conflicting-headers", "conflicting-list"],
)
def test_bad_content_length_is_400_and_closes(server, headers):
    with HttpConn(server) as conn:
        conn.send(head_with(*headers))
        response = conn.final_response(timeout=3)
        assert response.status == 400, response
        # RFC 9112 §6.3: the framing is lost, the server must close.
        conn.expect_closed(3)


@pytest.mark.parametrize("order", ["length-first", "chunked-first"])
def test_content_length_with_chunked_is_400_and_closes(server, order):
    headers = ["Content-Length: 10", "Transfer-Encoding: chunked"]
    if order == "chunked-first":
        headers.reverse()
    with HttpConn(server) as conn:
        conn.send(head_with(*headers))
        response = conn.final_response(timeout=3)
        assert response.status == 400, response
        conn.expect_closed(3)


@pytest.mark.parametrize("method", ["PUT", "DELETE"])
def test_other_methods_are_405(server, method):
    with HttpConn(server) as conn:
        response = conn.roundtrip(http_request(method, "/", b'{"a":1}', {"Content-Type": "application/json"}))
        assert response.status == 405, response
        allow = response.header("Allow")
        assert allow is not None, "RFC 9110 §15.5.6: a 405 response must carry Allow"
        methods = {m.strip().upper() for m in allow.split(",")}
        # `/` takes JSON-RPC only (`GET /` is 404).
        assert methods == {"POST", "OPTIONS"}, allow


@pytest.mark.parametrize("target", ["/sum?a=1&b=2", "/healthz", "/readyz", "/metrics"])
def test_head_is_a_get_without_content(server, target):
    """RFC 9110 §9.1 and §9.3.2: HEAD is served (uptime monitors send it), with the head a
    GET gets and no content. It was 405."""
    with HttpConn(server) as conn:
        got = conn.roundtrip(http_request("GET", target, b"", {}), request_method="GET")
        conn.send(f"HEAD {target} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        response = conn.final_response(timeout=3, request_method="HEAD")
        assert response.status == got.status == 200, response
        assert response.header("Content-Type") == got.header("Content-Type")
        if target != "/metrics":  # the page grows with each scrape
            assert response.header("Content-Length") == str(len(got.body))
        # Nothing followed the head: the next answer is the next request's.
        again = conn.roundtrip(b"GET /sum?a=2&b=2 HTTP/1.1\r\nHost: x\r\n\r\n", request_method="GET")
        assert (again.status, again.body) == (200, b"4"), again


def test_options_names_the_methods_of_the_target(server):
    """RFC 9110 §9.3.7: HAProxy's `option httpchk` sends OPTIONS; it was 405."""
    with HttpConn(server) as conn:
        for target, allow in [("/", "POST, OPTIONS"), ("/healthz", "GET, HEAD, OPTIONS"), ("/sum", "GET, HEAD, POST, OPTIONS")]:
            response = conn.roundtrip(f"OPTIONS {target} HTTP/1.1\r\nHost: x\r\n\r\n".encode(), request_method="OPTIONS")
            assert (response.status, response.header("Allow")) == (204, allow), response


def test_versions(server):
    """RFC 9110 §2.5: a later HTTP/1 minor version is served as HTTP/1.1; §15.6.6: another
    major version gets 505. Both were 400."""
    with HttpConn(server) as conn:
        response = conn.roundtrip(b"GET /sum?a=1&b=2 HTTP/1.2\r\nHost: x\r\n\r\n", request_method="GET")
        assert (response.status, response.version, response.body) == (200, "HTTP/1.1", b"3"), response
        conn.send(b"GET /sum?a=2&b=2 HTTP/1.1\r\nHost: x\r\n\r\n")  # the connection was kept
        assert conn.read_response(request_method="GET").body == b"4"
    with HttpConn(server) as conn:
        response = conn.roundtrip(b"GET /sum?a=1&b=2 HTTP/2.0\r\nHost: x\r\n\r\n", request_method="GET")
        assert response.status == 505, response


def test_an_unknown_method_is_501(server):
    with HttpConn(server) as conn:
        response = conn.roundtrip(http_request("FOO", "/", b"{}", {}))
        assert response.status == 501, response


def test_transfer_encoding_in_http_1_0_is_answered_then_closed(server):
    """RFC 9112 §6.1: HTTP/1.0 with Transfer-Encoding has faulty framing: close after it."""
    body = dumps(request("sum", [1, 2], id=1))
    chunked = f"{len(body):x}\r\n".encode() + body + b"\r\n0\r\n\r\n"
    with HttpConn(server) as conn:
        conn.send(
            b"POST / HTTP/1.0\r\nConnection: keep-alive\r\nTransfer-Encoding: chunked\r\n\r\n" + chunked
        )
        response = conn.final_response(timeout=3)
        assert response.status == 200, response
        assert_result(response.json(), 3, 1)
        conn.expect_closed(3)


def test_a_request_target_over_the_head_limit_is_414(server):
    with HttpConn(server) as conn:
        conn.send(b"GET /" + b"a" * 20000 + b" HTTP/1.1\r\nHost: x\r\n\r\n")
        assert conn.final_response(timeout=3).status == 414


@pytest.mark.parametrize("version", [b"HTTP/1.2", b"HTTP/1.9"])
def test_a_request_target_over_the_head_limit_with_a_later_minor_version_is_414(server, version):
    """Found by fuzzing: read as 1.1, such a line once made the server exit."""
    with HttpConn(server) as conn:
        conn.send(b"GET /" + b"a" * 20000 + b" " + version + b"\r\nHost: x\r\n\r\n")
        assert conn.final_response(timeout=3).status == 414
    with HttpConn(server) as conn:
        assert conn.call(b'{"jsonrpc":"2.0","method":"sum","params":[1,2],"id":1}')["result"] == 3


def test_body_over_limit_is_413_without_waiting_for_it(spawn_server):
    server = spawn_server("--max-body-bytes", "1024")
    with HttpConn(server.address) as conn:
        conn.send(head_with("Content-Length: 100000000"))
        started = time.monotonic()
        response = conn.final_response(timeout=3)
        assert response.status == 413, response
        assert time.monotonic() - started < 3
        assert b"more than max_body_bytes = 1024 bytes" in response.body, response  # which setting, set to what


def test_expect_continue_with_body_over_limit_is_413(spawn_server):
    server = spawn_server("--max-body-bytes", "1024")
    with HttpConn(server.address) as conn:
        conn.send(head_with("Content-Length: 5000", "Expect: 100-continue"))
        assert conn.final_response(timeout=3).status == 413


def test_chunked_body_over_limit_is_413(spawn_server):
    server = spawn_server("--max-body-bytes", "1024")
    chunk = b"x" * 600
    with HttpConn(server.address) as conn:
        conn.send(
            head_with("Transfer-Encoding: chunked")
            + b"".join(b"%x\r\n%s\r\n" % (len(chunk), chunk) for _ in range(3))
            + b"0\r\n\r\n"
        )
        response = conn.final_response(timeout=3)
        assert response.status == 413 and b"more than max_body_bytes = 1024 bytes" in response.body, response


def test_body_at_limit_is_accepted(spawn_server):
    server = spawn_server("--max-body-bytes", "1024")
    body = subtract(3, 2, "limit")
    body = body + b" " * (1024 - len(body))
    with HttpConn(server.address) as conn:
        assert_ok_subtract(conn.roundtrip(jsonrpc_post(body)), 3, 2, "limit")


def test_head_over_limit_is_431(spawn_server):
    server = spawn_server("--max-header-bytes", "1024")
    with HttpConn(server.address) as conn:
        assert_ok_subtract(conn.roundtrip(jsonrpc_post(subtract(3, 2, "small"))), 3, 2, "small")
    with HttpConn(server.address) as conn:
        response = conn.roundtrip(jsonrpc_post(subtract(3, 2, "big"), {"X-Padding": "p" * 4000}), timeout=3)
        assert response.status == 431, response


def test_unfinished_head_over_limit_is_431_without_waiting_for_its_end(spawn_server):
    server = spawn_server("--max-header-bytes", "1024")
    with HttpConn(server.address) as conn:
        conn.send(b"POST / HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Padding: " + b"p" * 3000)
        assert conn.final_response(timeout=3).status == 431


# ------------------------------------------------------------------------------------
# Reply headers


def assert_date_header(response):
    date = response.header("Date")
    assert date is not None, f"RFC 9110 §6.6.1: the response must carry Date: {response}"
    assert IMF_FIXDATE.fullmatch(date), f"Date is not an IMF-fixdate: {date!r}"
    sent = email.utils.parsedate_to_datetime(date)
    assert abs((datetime.now(timezone.utc) - sent).total_seconds()) < 300, date


def test_reply_headers(server):
    with HttpConn(server) as conn:
        response = conn.roundtrip(jsonrpc_post(subtract(2, 1, 1)))
        assert response.status == 200
        assert response.media_type() == "application/json", response
        length = response.header("Content-Length")
        assert length is not None and length == str(len(response.body)), response
        assert response.header("Transfer-Encoding") is None, response
        assert_date_header(response)
        assert conn.nothing_received_within(0.2), "bytes after the announced Content-Length"


def test_no_reply_is_204_without_content_length(server):
    with HttpConn(server) as conn:
        response = conn.roundtrip(jsonrpc_post(dumps(request("update", [1], notification=True))))
        assert response.status == 204, response
        assert response.body == b""
        # RFC 9110 §8.6: no Content-Length in a 204 response.
        assert response.header("Content-Length") is None, response
        assert_date_header(response)
        # And the connection stays usable.
        assert_ok_subtract(conn.roundtrip(jsonrpc_post(subtract(2, 1, 2))), 2, 1, 2)


# ------------------------------------------------------------------------------------
# JSON-RPC bodies that only HTTP can carry


def test_jsonrpc_errors_keep_the_connection_open(server):
    with HttpConn(server) as conn:
        for bad in (b'{"jsonrpc":"2.0",', b"[]", b'{"jsonrpc":"2.0","method":"nope","id":1}', b"\xff"):
            response = conn.roundtrip(jsonrpc_post(bad))
            assert response.status == 200, response
            assert "error" in response.json()
        assert_ok_subtract(conn.roundtrip(jsonrpc_post(subtract(4, 1, "still"))), 4, 1, "still")


@pytest.mark.parametrize("body", [b'"get_data"', b"1", b"null", b"true"])
def test_top_level_scalar_is_invalid_request(server, body):
    with HttpConn(server) as conn:
        response = conn.roundtrip(jsonrpc_post(body))
        assert response.status == 200, response
        assert_error(response.json(), -32600, None)


@pytest.mark.parametrize(
    "body",
    [b"", b"   \r\n", b'{"jsonrpc":"2.0","method":"get_data","id":1}{"jsonrpc":"2.0","method":"get_data","id":2}',
     b'{"jsonrpc":"2.0","method":"get_data","id":1} x'],
    ids=["empty", "whitespace", "two-texts", "trailing-garbage"],
)
def test_body_that_is_not_one_json_text_is_parse_error(server, body):
    with HttpConn(server) as conn:
        response = conn.roundtrip(jsonrpc_post(body))
        assert response.status == 200, response
        assert_error(response.json(), -32700, None)


def test_large_body(server):
    data = "ü" * 40000  # 80 000 bytes of UTF-8
    with HttpConn(server) as conn:
        response = conn.roundtrip(jsonrpc_post(dumps(request("echo", {"data": data}, id="large"))), timeout=10)
        assert response.status == 200, response
        assert_result(response.json(), data, "large")


# ------------------------------------------------------------------------------------
# REST: GET /<procedure>?query and POST /<procedure>


def rest(server, method: str, target: str, body: bytes | None = None):
    headers = {"Content-Type": "application/json"} if body is not None else {}
    with HttpConn(server) as conn:
        response = conn.roundtrip(http_request(method, target, body, headers), request_method=method)
    assert response.media_type() == "application/json", response
    return response


@pytest.mark.parametrize(
    "target,expected",
    [
        ("/sum?a=1&b=2", 3),
        ("/sum?a=1&b=2.5", 3.5),
        ("/echo?data=%22hi%20there%22", "hi there"),
        ("/echo?data=hello", "hello"),
        ("/echo?data=123", 123),
        ("/echo?data=%7B%22k%22%3A%5B1%2Cnull%5D%7D", {"k": [1, None]}),
        ("/echo?data=caf%C3%A9", "café"),
        ("/get_data", ["hello", 5]),
    ],
)
def test_rest_get(server, target, expected):
    response = rest(server, "GET", target)
    assert response.status == 200, response
    assert differences(expected, response.json()) == []


@pytest.mark.parametrize(
    "body,expected",
    [(b'{"minuend":5,"subtrahend":3}', 2), (b'{"subtrahend":3,"minuend":5.5}', 2.5)],
)
def test_rest_post(server, body, expected):
    response = rest(server, "POST", "/subtract", body)
    assert response.status == 200, response
    assert differences(expected, response.json()) == []


@pytest.mark.parametrize("body", [None, b"", b" \r\n"])
def test_rest_post_without_a_body_reads_the_query(server, body):
    """`curl -X POST '/subtract?minuend=5&subtrahend=3'`: with no body, the query holds the
    params, as for GET."""
    response = rest(server, "POST", "/subtract?minuend=5&subtrahend=3", body)
    assert response.status == 200, response
    assert response.json() == 2


def test_a_procedure_path_runs_that_procedure_or_nothing(server):
    """A path names one procedure or none: a JSON-RPC request or batch posted to a
    procedure's path used to run whatever method its body named (past path-based proxy
    rules); it is refused with -32600 saying where JSON-RPC goes."""
    for body in [b"[5,3]", b'{"jsonrpc":"2.0","method":"sum","params":[5,3],"id":1}',
                 b'[{"jsonrpc":"2.0","method":"sum","params":[5,3],"id":1}]']:
        response = rest(server, "POST", "/subtract", body)
        assert response.status == 400, response
        assert_error_object(response, -32600)
        assert "POST /" in response.json()["message"], response
    # A path that names no procedure may carry JSON-RPC.
    response = rest(server, "POST", "/rpc", b'{"jsonrpc":"2.0","method":"subtract","params":[5,3],"id":1}')
    assert response.json() == {"jsonrpc": "2.0", "id": 1, "result": 2}, response


def assert_error_object(response, code: int):
    error = response.json()
    assert isinstance(error, dict), response
    assert differences(code, error.get("code")) == [], response
    assert isinstance(error.get("message"), str), response


@pytest.mark.parametrize("method,target,body", [("GET", "/no_such_procedure?a=1", None),
                                                ("POST", "/no_such_procedure", b"{}")])
def test_rest_unknown_procedure_is_404(server, method, target, body):
    response = rest(server, method, target, body)
    assert response.status == 404, response
    assert_error_object(response, -32601)


@pytest.mark.parametrize("method,target,body", [("GET", "/subtract?minuend=5", None),
                                                ("GET", "/subtract?minuend=5&subtrahend=x", None),
                                                ("POST", "/subtract", b'{"minuend":5}')])
def test_rest_invalid_params_is_400(server, method, target, body):
    response = rest(server, method, target, body)
    assert response.status == 400, response
    assert_error_object(response, -32602)


def test_rest_handler_failure_is_500(server):
    response = rest(server, "GET", "/panic")
    assert response.status == 500, response
    assert_error_object(response, -32603)


def test_a_sum_with_no_finite_double_is_invalid_params(server):
    """JSON has no infinity: the spec server's float sum refuses rather than answer null."""
    with HttpConn(server) as conn:
        assert_error(conn.call(request("sum", [1e308, 1e308], id=1)), -32602, 1)
