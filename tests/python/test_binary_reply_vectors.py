# SPDX-License-Identifier: Apache-2.0
"""The binary reply vectors (tests/vectors/binary/replies, docs/wire.md) on the test server:
results that are bytes (`unhex`) and arrays (`floats`) come as attachments of a binary
reply to a caller that accepts one (a binary message over raw TCP and WebSocket, HTTP with
Accept) and in their plain JSON form to any other. The Rust spec server and the C one both
answer them; a server without deferred replies (the C API has none) answers the vectors of
`unhex_later` with -32601, and those are skipped there, saying so."""

from __future__ import annotations

import json

import pytest

import binary_replies


def has_deferred_replies(address: tuple[str, int]) -> bool:
    text = b'{"jsonrpc":"2.0","method":"unhex_later","params":["00"],"id":1}'
    _, body, _ = binary_replies.http_exchange(address, text, False)
    error = json.loads(body).get("error")
    return not (error and error.get("code") == -32601)


@pytest.mark.parametrize("path", binary_replies.VECTORS, ids=[p.stem for p in binary_replies.VECTORS])
def test_binary_reply_vector(server, path):
    vector = json.loads(path.read_text())
    if vector.get("deferred") and not has_deferred_replies(server):
        pytest.skip("this server has no unhex_later: the C API cannot defer a reply")
    binary_replies.check(server, vector)
