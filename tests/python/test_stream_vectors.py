# SPDX-License-Identifier: Apache-2.0
"""The stream vectors (tests/vectors/streams, docs/streaming.md) on the test server: a
streaming procedure's items, then its reply, however the caller reads them (raw TCP lines
or binary messages, WebSocket text or binary, HTTP JSON lines, server-sent events or the
binary stream). A server whose procedures cannot stream (the C API has no streams)
answers `count` with -32601, and the vectors are skipped there, saying so."""

from __future__ import annotations

import json

import pytest

import streams


def can_stream(address: tuple[str, int]) -> bool:
    text = b'{"jsonrpc":"2.0","method":"count","params":{"n":0},"id":1}'
    (reply, _), *_ = streams.http_exchange(address, text, None)
    error = json.loads(reply).get("error")
    return not (error and error.get("code") == -32601)


@pytest.mark.parametrize("path", streams.VECTORS, ids=[p.stem for p in streams.VECTORS])
def test_stream_vector(server, path):
    if not can_stream(server):
        pytest.skip("this server has no count: the C API cannot stream a result")
    streams.check(server, json.loads(path.read_text()))
