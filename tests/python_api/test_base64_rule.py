# SPDX-License-Identifier: Apache-2.0
"""The one base64 rule: the schema's pattern (what `/openapi.json` and `rpc.discover` say
`bytes` takes) and the decoder (what the server takes) agree on every text, and a text
refused says why."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ucall import _schema
from ucall._ucall import b64decode

PATTERN = re.compile(_schema.schema(bytes)["pattern"])


def decodes(text: str) -> bool:
    try:
        b64decode(text)
    except ValueError:
        return False
    return True


@settings(max_examples=3000, deadline=None, database=None)
@given(st.text(alphabet="AQEJZgkmw/+=-", max_size=14))
def test_the_pattern_and_the_decoder_agree(text):
    assert (PATTERN.fullmatch(text) is not None) == decodes(text), text


@pytest.mark.parametrize("text", ["AQI", "AQI=", "AQ", "AQ==", "", "AQID"])
def test_padding_is_optional_for_both(text):
    # Unpadded `AQI` was taken by the decoder and refused by the pattern.
    assert PATTERN.fullmatch(text) and decodes(text)


@pytest.mark.parametrize("text", ["AQJ", "Zh==", "AR"])
def test_leftover_bits_are_refused_by_both(text):
    # `Zh==` was allowed by the pattern and refused by the decoder.
    assert not PATTERN.fullmatch(text) and not decodes(text)


@pytest.mark.parametrize(
    "value,says",
    [
        ("Zh==", "the last character sets bits"),
        ("Zm-_", "'-' at index 2 is not a base64 character (URL-safe base64 is not taken"),
        ("Zm9vY", "a length of 4n+1 is never base64"),
        ("Zg=", "does not complete a final group of four"),
    ],
)
def test_a_refused_text_says_why(make_server, wire, value, says):
    server = make_server()

    @server
    def size(data: bytes) -> int:
        return len(data)

    @server
    def sizes(data: list[bytes]) -> int:
        return sum(len(d) for d in data)

    with server:
        connection = wire(server)
        for method, params in [("size", {"data": value}), ("sizes", {"data": [value]})]:
            error = connection.error(method, params)
            assert error["code"] == -32602, error
            # It was "expected a base64 string, got a string".
            assert "got a string" not in error["message"] and says in error["message"], error
        assert connection.result("size", {"data": "AQI"}) == 2


def test_a_lone_surrogate_is_named(make_server, wire):
    server = make_server()

    @server
    def echo(text: str) -> str:
        return text

    with server:
        connection = wire(server)
        error = connection.post('{"jsonrpc":"2.0","method":"echo","params":{"text":"a\\ud800"},"id":1}')
        assert b"-32602" in error[1] and b"lone surrogate" in error[1], error
        assert b"got a string" not in error[1], error
