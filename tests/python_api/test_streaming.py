# SPDX-License-Identifier: Apache-2.0
"""Streamed replies (docs/streaming.md): generator and async-generator handlers send their
items as they yield them, then a final reply; over raw TCP and WebSocket as ``ucall.stream``
notifications, over HTTP as a chunked ``application/jsonl`` body. The client iterates them
(``for``, ``async for``). A caller that hangs up or cancels (``ucall.cancel``) stops the
generator; one that reads slowly holds it back; a call that cannot stream is refused; HTTP
sends server-sent events when asked."""

from __future__ import annotations

import asyncio
import http.client
import json
import socket
import threading
import time

import pytest

from ucall import RPCError
from ucall.client import AsyncClient, Client

TRANSPORTS = ["http", "tcp", "ws"]


class Seen:
    """What the handlers let the tests observe, across threads."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.closed: list[str] = []  # generators whose `finally` ran
        self.produced = 0


@pytest.fixture
def seen() -> Seen:
    return Seen()


@pytest.fixture
def server(make_server, seen):
    server = make_server()

    @server
    def count(n: int):
        for i in range(n):
            yield i
        return "done"

    @server
    async def tokens(prompt: str):
        for word in prompt.split():
            await asyncio.sleep(0.001)
            yield word

    @server
    def endless(tag: str):
        try:
            while True:
                yield tag
                time.sleep(0.002)
        finally:
            with seen.lock:
                seen.closed.append(tag)

    @server
    async def aendless(tag: str):
        try:
            while True:
                yield tag
                await asyncio.sleep(0.002)
        finally:
            with seen.lock:
                seen.closed.append(tag)

    @server
    def large(n: int):
        for i in range(n):
            yield f"{i:08}" + "x" * (16 << 10)
            with seen.lock:
                seen.produced += 1
        return n

    @server
    def broken(n: int):
        for i in range(n):
            yield i
        raise RPCError(-32010, "ran dry", {"after": n})

    @server
    def unserializable():
        yield 1
        yield object()

    @server
    def plain(a: int) -> int:
        return a

    return server.start()


def client_for(server, transport: str, cls=Client):
    if transport == "ws":
        return cls(f"ws://127.0.0.1:{server.port}/")
    return cls("127.0.0.1", server.port, use_http=transport == "http")


def wait_for(condition, limit: float = 10.0) -> bool:
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.01)
    return condition()


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_a_generator_streams_its_items_then_its_return_value(server, transport):
    client = client_for(server, transport)
    stream = client.stream("count", n=4)
    assert list(stream) == [0, 1, 2, 3]
    assert stream.result == "done"
    # An ordinary call afterwards, and a stream with no items.
    assert client.plain(5).json == 5
    empty = client.stream("count", 0)
    assert list(empty) == []
    assert empty.result == "done"


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_an_async_generator_streams_to_async_for(server, transport):
    async def main() -> tuple[list[str], object]:
        client = client_for(server, transport, AsyncClient)
        stream = client.stream("tokens", prompt="a model streams tokens")
        words = [word async for word in stream]
        return words, stream.result

    words, result = asyncio.run(main())
    assert words == ["a", "model", "streams", "tokens"]
    assert result is None  # an async generator returns nothing


def test_http_sends_a_chunked_body_of_json_lines(server):
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    body = json.dumps({"jsonrpc": "2.0", "method": "count", "params": [2], "id": "x"})
    connection.request("POST", "/", body, {"Content-Type": "application/json"})
    response = connection.getresponse()
    assert response.status == 200
    assert response.getheader("Content-Type") == "application/jsonl"
    assert response.getheader("Transfer-Encoding") == "chunked"
    lines = [json.loads(line) for line in response.read().splitlines()]
    assert lines == [
        {"jsonrpc": "2.0", "method": "ucall.stream", "params": {"id": "x", "item": 0}},
        {"jsonrpc": "2.0", "method": "ucall.stream", "params": {"id": "x", "item": 1}},
        {"jsonrpc": "2.0", "id": "x", "result": "done"},
    ]
    connection.close()


def test_raw_tcp_sends_notifications_then_the_reply(server):
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
        sock.sendall(b'{"jsonrpc":"2.0","method":"count","params":{"n":2},"id":7}\n')
        reader = sock.makefile("rb")
        lines = [json.loads(reader.readline()) for _ in range(3)]
    assert lines[0] == {"jsonrpc": "2.0", "method": "ucall.stream", "params": {"id": 7, "item": 0}}
    assert lines[1]["params"] == {"id": 7, "item": 1}
    assert lines[2] == {"jsonrpc": "2.0", "id": 7, "result": "done"}


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("method", ["endless", "aendless"])
def test_hanging_up_stops_the_generator(server, seen, transport, method):
    tag = f"{method}-{transport}"
    client = client_for(server, transport)
    stream = client.stream(method, tag=tag)
    assert [next(stream), next(stream)] == [tag, tag]
    stream.close()
    assert wait_for(lambda: tag in seen.closed), f"{tag}: the generator was not closed"
    assert client.plain(1).json == 1, "the server goes on serving"


def test_leaving_async_for_early_stops_the_generator(server, seen):
    async def main() -> None:
        async with client_for(server, "tcp", AsyncClient).stream("aendless", tag="early") as stream:
            async for _ in stream:
                break

    asyncio.run(main())
    assert wait_for(lambda: "early" in seen.closed)


def test_a_slow_reader_holds_the_generator_back(server, seen):
    total = 2000  # 32 MiB of items
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.settimeout(20)
    sock.connect(("127.0.0.1", server.port))
    try:
        sock.sendall(json.dumps({"jsonrpc": "2.0", "method": "large", "params": [total], "id": 1}).encode() + b"\n")
        time.sleep(0.5)
        with seen.lock:
            stalled = seen.produced
        time.sleep(0.3)
        with seen.lock:
            still = seen.produced
        assert still == stalled and still < total // 2, f"a caller reading nothing let {still} of {total} through"
        reader = sock.makefile("rb")
        for i in range(total):
            message = json.loads(reader.readline())
            assert message["params"]["item"][:8] == f"{i:08}"
        assert json.loads(reader.readline()) == {"jsonrpc": "2.0", "id": 1, "result": total}
    finally:
        sock.close()


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_an_error_after_items_reaches_the_caller(server, transport):
    client = client_for(server, transport)
    stream = client.stream("broken", 2)
    assert next(stream) == 0
    assert next(stream) == 1
    with pytest.raises(RPCError) as raised:
        next(stream)
    assert (raised.value.code, raised.value.data) == (-32010, {"after": 2})
    bad = client.stream("unserializable")
    assert next(bad) == 1
    with pytest.raises(RPCError) as raised:
        next(bad)
    assert raised.value.code == -32603
    assert "serialized" in str(raised.value)


def test_calls_that_cannot_stream_are_refused(server):
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
        batch = [
            {"jsonrpc": "2.0", "method": "count", "params": [2], "id": 1},
            {"jsonrpc": "2.0", "method": "plain", "params": [3], "id": 2},
        ]
        notification = {"jsonrpc": "2.0", "method": "count", "params": [2]}
        after = {"jsonrpc": "2.0", "method": "plain", "params": [4], "id": 3}
        sock.sendall(b"\n".join(json.dumps(m).encode() for m in (batch, notification, after)) + b"\n")
        reader = sock.makefile("rb")
        replies = json.loads(reader.readline())
        assert replies[0]["error"]["code"] == -32600
        assert "streams its result" in replies[0]["error"]["message"]
        assert replies[1] == {"jsonrpc": "2.0", "id": 2, "result": 3}
        # The notification is not answered: the next line is the call after it.
        assert json.loads(reader.readline()) == {"jsonrpc": "2.0", "id": 3, "result": 4}
    # A REST-style URL cannot stream either.
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    connection.request("GET", "/count?n=2")
    response = connection.getresponse()
    assert response.status == 400
    assert json.loads(response.read())["code"] == -32600
    connection.close()


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_calling_a_streaming_procedure_says_to_stream_it(server, transport):
    """``call`` gets items where it waits for one reply: a ``ProtocolError`` that says so
    (not "not JSON" or "a reply to another request"), and the client goes on serving."""
    from ucall.exceptions import ProtocolError

    client = client_for(server, transport)
    with pytest.raises(ProtocolError, match=r"streams its result .*client\.stream"):
        client.call("count", n=3)
    assert client.plain(5).json == 5

    async def main() -> object:
        client = client_for(server, transport, AsyncClient)
        with pytest.raises(ProtocolError, match=r"streams its result .*client\.stream"):
            await client.call("count", n=3)
        return (await client.plain(6)).json

    assert asyncio.run(asyncio.wait_for(main(), 30)) == 6


def _rss_mib() -> float:
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("VmRSS:")) / 1024


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_a_long_stream_does_not_hold_what_it_sent(make_server, transport):
    """2,000 items of 100 KB (200 MB in all): the server lets go of each once it is sent
    (it held every item until the stream ended: RSS grew by the whole stream)."""
    server = make_server()

    @server
    def ticks(n: int, size: int):
        item = "x" * size
        for _ in range(n):
            yield item

    server.start()
    client = client_for(server, transport)
    before, peak = _rss_mib(), 0.0
    for i, item in enumerate(client.stream("ticks", 2_000, 100_000)):
        assert len(item) == 100_000
        if i % 100 == 0:
            peak = max(peak, _rss_mib())
    assert peak - before < 64, f"RSS grew by {peak - before:.0f} MiB over a 200 MB stream"


def test_stream_on_an_ordinary_method_gives_its_result(server):
    stream = Client("127.0.0.1", server.port).stream("plain", 9)
    assert list(stream) == []
    assert stream.result == 9
    with pytest.raises(RPCError) as raised:
        list(Client("127.0.0.1", server.port).stream("missing"))
    assert raised.value.code == -32601


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("method", ["endless", "aendless"])
def test_cancel_stops_the_generator_and_ends_the_stream(server, seen, transport, method):
    tag = f"cancel-{method}-{transport}"
    client = client_for(server, transport)
    stream = client.stream(method, tag=tag)
    assert next(stream) == tag
    stream.cancel()
    rest = list(stream)  # the items already on their way, then the end
    assert set(rest) <= {tag}
    assert stream.result is None
    assert wait_for(lambda: tag in seen.closed), f"{tag}: the generator was not closed"


def test_cancel_from_async_for(server, seen):
    async def main() -> list[str]:
        stream = client_for(server, "ws", AsyncClient).stream("aendless", tag="acancel")
        got = []
        async for item in stream:
            got.append(item)
            if len(got) == 2:
                await stream.cancel()
        return got

    got = asyncio.run(main())
    assert got[:2] == ["acancel", "acancel"]
    assert wait_for(lambda: "acancel" in seen.closed)


def test_ucall_cancel_answers_whether_a_stream_was_found(server):
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
        sock.sendall(b'{"jsonrpc":"2.0","method":"ucall.cancel","params":{"id":42},"id":1}\n')
        assert json.loads(sock.makefile("rb").readline()) == {"jsonrpc": "2.0", "id": 1, "result": False}


def test_http_sends_server_sent_events_when_asked(server):
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    body = json.dumps({"jsonrpc": "2.0", "method": "count", "params": [2], "id": 5})
    connection.request("POST", "/", body, {"Content-Type": "application/json", "Accept": "text/event-stream"})
    response = connection.getresponse()
    assert response.getheader("Content-Type") == "text/event-stream"
    events = response.read().decode().split("\n\n")
    assert events[-1] == ""
    messages = [json.loads(event.removeprefix("data: ")) for event in events[:-1]]
    assert [m.get("params", {}).get("item") for m in messages[:2]] == [0, 1]
    assert messages[2] == {"jsonrpc": "2.0", "id": 5, "result": "done"}
    connection.close()
