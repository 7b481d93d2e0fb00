# SPDX-License-Identifier: Apache-2.0
"""WebSocket (RFC 6455) interop with the `websockets` library, on the HTTP port.

Each text or binary message carries one JSON-RPC request or batch; each reply is one
text message, in order.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
from pathlib import Path

import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosedError

from wire import HttpConn


def url(server) -> str:
    host, port = server
    return f"ws://{host}:{port}/"


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 20))


def test_calls_batches_and_notifications_over_one_websocket(server):
    async def session():
        async with connect(url(server)) as ws:
            await ws.send('{"jsonrpc":"2.0","method":"subtract","params":[42,23],"id":1}')
            assert json.loads(await ws.recv()) == {"jsonrpc": "2.0", "id": 1, "result": 19}
            await ws.send(b'{"jsonrpc":"2.0","method":"subtract","params":{"minuend":5,"subtrahend":3},"id":"b"}')
            reply = await ws.recv()
            assert isinstance(reply, str), "replies are text messages"
            assert json.loads(reply) == {"jsonrpc": "2.0", "id": "b", "result": 2}
            await ws.send('{"jsonrpc":"2.0","method":"update","params":[1]}')  # notification: no reply
            await ws.send('[{"jsonrpc":"2.0","method":"get_data","id":9},{"jsonrpc":"2.0","method":"nope","id":10}]')
            replies = json.loads(await ws.recv())
            assert replies[0] == {"jsonrpc": "2.0", "id": 9, "result": ["hello", 5]}
            assert replies[1]["error"]["code"] == -32601
            await ws.send("{oops")
            assert json.loads(await ws.recv())["error"]["code"] == -32700
            await ws.ping(b"are you there")  # answered by a pong, or the library times out
            # 50 requests in flight: replies in request order.
            for i in range(50):
                await ws.send(json.dumps({"jsonrpc": "2.0", "method": "sum", "params": [i, 1], "id": i}))
            for i in range(50):
                assert json.loads(await ws.recv()) == {"jsonrpc": "2.0", "id": i, "result": i + 1}
        assert ws.close_code == 1000, "the close handshake completes cleanly"

    run(session())


def test_a_large_message_in_fragments(server):
    blob = "x" * 1_600_000

    async def session():
        async with connect(url(server), max_size=None) as ws:
            request = json.dumps({"jsonrpc": "2.0", "method": "echo", "params": [blob], "id": 7})
            chunks = [request[i : i + 100_000] for i in range(0, len(request), 100_000)]
            await ws.send(chunks)  # an iterable is sent as one fragmented message
            reply = json.loads(await ws.recv())
            assert reply["result"] == blob

    run(session())


def test_an_oversized_message_closes_with_1009(spawn_server):
    server = spawn_server("--max-body-bytes", "1000")

    async def session():
        async with connect(url(server.address)) as ws:
            await ws.send("[" + " " * 2000 + "]")
            with pytest.raises(ConnectionClosedError):
                await ws.recv()
        assert ws.close_code == 1009

    run(session())


def test_plain_http_keeps_working_next_to_websockets(server):
    with HttpConn(server) as http:
        reply = http.call(b'{"jsonrpc":"2.0","method":"subtract","params":[1,1],"id":1}')
        assert reply["result"] == 0


NODE_CLIENT = Path(__file__).resolve().parents[1] / "node" / "ws_client.mjs"


def node_client(address_url: str, *extra: str) -> dict:
    result = subprocess.run(
        ["node", str(NODE_CLIENT), address_url, *extra], capture_output=True, text=True, timeout=20
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return json.loads(result.stdout)


def test_node_ws_package_interop(server):
    seen = node_client(url(server))
    assert seen["code"] == 1000 and seen["pongs"] == 1, seen
    assert [r["text"] for r in seen["replies"]] == [True, True, True], "replies are text messages"
    assert seen["replies"][0]["reply"] == {"jsonrpc": "2.0", "id": 1, "result": 19}
    assert seen["replies"][1]["reply"] == {"jsonrpc": "2.0", "id": 2, "result": ["hello", 5]}
    batch = seen["replies"][2]["reply"]
    assert batch[0] == {"jsonrpc": "2.0", "id": 3, "result": 2} and batch[1]["error"]["code"] == -32601


HANDSHAKE = (
    b"GET / HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
    b"Sec-WebSocket-Key: MDEyMzQ1Njc4OWFiY2RlZg==\r\nSec-WebSocket-Version: 13\r\n"
)


@pytest.mark.parametrize(
    "extra",
    [
        # RFC 9110 §7.8: the new protocol starts after the whole request; "abcd" is a body,
        # not a frame (it was read as one, and the connection failed with 1002).
        b"Content-Length: 4\r\n\r\nabcd",
        # RFC 6455 §11.3.1: Sec-WebSocket-Key appears once (the second one was used).
        b"Sec-WebSocket-Key: AAAAAAAAAAAAAAAAAAAAAA==\r\n\r\n",
    ],
    ids=["with a body", "with two keys"],
)
def test_a_faulty_handshake_is_400(server, extra):
    with HttpConn(server) as conn:
        conn.send(HANDSHAKE + extra)
        response = conn.final_response(timeout=3)
        assert response.status == 400, response
        conn.expect_closed(3)


def masked_frame(opcode: int, payload: bytes) -> bytes:
    """A final client frame (RFC 6455 §5.2) of a short payload, masked with a fixed key."""
    key = b"\x01\x02\x03\x04"
    masked = bytes(b ^ key[i % 4] for i, b in enumerate(payload))
    return bytes([0x80 | opcode, 0x80 | len(payload)]) + key + masked


@pytest.mark.parametrize(
    ("payload", "code"),
    [
        (b"\x03\xe8bye", 1000),  # the peer's code is echoed
        (b"\x03\xe8\xc3\x28", 1007),  # §8.1: a reason that is not UTF-8
        (b"\x03\xed", 1002),  # §7.4.1: 1005 is never sent
        (b"\x03", 1002),  # §5.5.1: a code is two bytes
    ],
    ids=["normal", "reason not UTF-8", "code never sent", "one byte"],
)
def test_a_close_frame_is_answered_with_the_code_rfc_6455_names(server, payload, code):
    with HttpConn(server) as conn:
        conn.send(HANDSHAKE + b"\r\n")
        conn.recv_until(b"\r\n\r\n", what="the 101 response")
        conn.send(masked_frame(0x8, payload))
        reply = conn.recv_all_until_closed(3)
        assert reply[:2] == b"\x88\x02", f"an unmasked close frame with a code: {reply!r}"
        assert int.from_bytes(reply[2:4], "big") == code
