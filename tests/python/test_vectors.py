# SPDX-License-Identifier: Apache-2.0
"""Every JSON-RPC vector of tests/vectors/jsonrpc, over HTTP and over raw TCP."""

from __future__ import annotations

import pytest

from check_vectors import VECTOR_DIR, check_directory, is_parse_error, load_vectors
from jsonrpc_match import assert_reply_matches, assert_result
from wire import HttpConn, TcpConn, dumps, jsonrpc_post, request

VECTORS = load_vectors()
IDS = [v["name"] for v in VECTORS]

# Sent after a vector on the same TCP connection: its reply must be the next line.
FOLLOW_UP = request("echo", ["follow-up"], id="follow-up")
# Sent first on a TCP connection whose vector does not start with '{' or '['.
OPENER = request("echo", ["opener"], id="opener")


def test_vector_files_are_well_formed():
    assert check_directory(VECTOR_DIR) == []


def test_every_spec_example_is_present():
    spec = sorted(v["name"] for v in VECTORS if v["name"].startswith("spec_"))
    assert len(spec) == 15, spec


@pytest.mark.parametrize("vector", VECTORS, ids=IDS)
def test_vector_over_http(server, vector):
    with HttpConn(server) as conn:
        response = conn.roundtrip(jsonrpc_post(vector["request_bytes"]))
        if vector["reply"] is None:
            assert response.status == 204, f"a request without reply must get 204, got {response}"
            assert response.body == b""
            return
        assert response.status == 200, f"expected 200, got {response}"
        assert response.media_type() == "application/json", response
        assert_reply_matches(vector, response.body)


@pytest.mark.parametrize("vector", VECTORS, ids=IDS)
def test_vector_over_tcp(server, vector):
    text = vector["request_bytes"]
    with TcpConn(server) as conn:
        if not text.startswith((b"{", b"[")):
            assert_result(conn.call(OPENER), "opener", "opener")

        if is_parse_error(vector["reply"]):
            # The server cannot know where a broken text ends: end the input, then the
            # server answers -32700 and closes.
            conn.send(text)
            conn.shutdown_write()
            assert_reply_matches(vector, conn.read_line())
            conn.expect_closed()
            return

        conn.send(text + b"\n")
        if vector["reply"] is not None:
            assert_reply_matches(vector, conn.read_line())
        # Nothing else was sent for the vector: the next line answers the next request.
        conn.send(dumps(FOLLOW_UP) + b"\n")
        assert_result(conn.read_reply(), "follow-up", "follow-up")
