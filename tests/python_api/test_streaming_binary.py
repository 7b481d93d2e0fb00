# SPDX-License-Identifier: Apache-2.0
"""Streamed calls whose params hold numpy arrays or bytes (docs/python.md, "Binary
messages"): ``Client.stream`` and ``AsyncClient.stream`` send them as a binary message
(docs/wire.md) over HTTP, raw TCP and WebSocket as other calls do, and the server streams
back the arrays and bytes of its items and final reply as attachments too (over HTTP in
an ``application/vnd.ucall.binary-stream`` body); to a plain JSON caller, as base64. The
server tells how an array came: one viewing an attachment is read-only, one decoded from
base64 ``.npy`` is writable."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from typing import Any

import pytest

from ucall import Context
from ucall.client import AsyncClient, Client, Response
from ucall.exceptions import ProtocolError

np = pytest.importorskip("numpy")

ADDRESSES = {"http": "http://127.0.0.1:{}", "tcp": "tcp://127.0.0.1:{}", "ws": "ws://127.0.0.1:{}"}
TRANSPORTS = sorted(ADDRESSES)


class Closed:
    """The tags of the generators whose ``finally`` ran, across threads."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.tags: list[str] = []

    def add(self, tag: str) -> None:
        with self.lock:
            self.tags.append(tag)

    def wait_for(self, tag: str, limit: float = 10.0) -> bool:
        deadline = time.monotonic() + limit
        while time.monotonic() < deadline:
            with self.lock:
                if tag in self.tags:
                    return True
            time.sleep(0.01)
        return False


@pytest.fixture
def closed() -> Closed:
    return Closed()


@pytest.fixture
def server(make_server, closed):
    server = make_server()

    @server
    def facts(x: np.ndarray, data: bytes, ctx: Context):
        yield {"writeable": bool(x.flags.writeable), "shape": list(x.shape), "sum": float(x.sum())}
        yield {"length": len(data), "head": data[:3].decode()}
        yield ctx.headers.get("content-type", "")
        for i in range(3):
            yield i
        return "done"

    @server
    async def afacts(x: np.ndarray, data: bytes):
        yield bool(x.flags.writeable)
        await asyncio.sleep(0.001)
        yield len(data)
        yield float(x.sum())

    @server
    def endless(x: np.ndarray, tag: str):
        try:
            while True:
                yield bool(x.flags.writeable)
                time.sleep(0.002)
        finally:
            closed.add(tag)

    @server
    async def aendless(x: np.ndarray, tag: str):
        try:
            while True:
                yield bool(x.flags.writeable)
                await asyncio.sleep(0.002)
        finally:
            closed.add(tag)

    @server
    def doubled(x: np.ndarray) -> np.ndarray:
        return x * 2

    @server
    def frames(x: np.ndarray, n: int):
        for i in range(n):
            yield x * i
        return x[:1]

    @server
    async def aframes(x: np.ndarray, n: int):
        for i in range(n):
            await asyncio.sleep(0)
            yield {"i": i, "frame": x + i, "raw": bytes([i]) * 4}

    @server
    def tokens(n: int):
        for i in range(n):
            yield np.full(3, i, np.int16)
        return b"end"

    return server.start()


ARRAY = np.arange(24, dtype=np.float32).reshape(4, 6)
DATA = b"binary bytes \x00\xff"


def _facts_expected(transport: str, binary: bool) -> list:
    content_type = {"http": "application/vnd.ucall.binary" if binary else "application/json"}.get(transport, "")
    return [
        {"writeable": not binary, "shape": [4, 6], "sum": float(ARRAY.sum())},
        {"length": len(DATA), "head": "bin"},
        content_type,
        0,
        1,
        2,
    ]


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("binary", [None, True])
def test_a_stream_sends_arrays_and_bytes_as_attachments(server, transport, binary):
    with Client(ADDRESSES[transport].format(server.port), binary=binary) as client:
        stream = client.stream("facts", x=ARRAY, data=DATA)
        assert list(stream) == _facts_expected(transport, binary=True)
        assert stream.result == "done"
        positional = client.stream("facts", ARRAY, DATA)  # by position too
        assert next(positional) == _facts_expected(transport, binary=True)[0]
        positional.close()


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_binary_false_streams_with_base64(server, transport):
    with Client(ADDRESSES[transport].format(server.port), binary=False) as client:
        stream = client.stream("facts", x=ARRAY, data=DATA)
        assert list(stream) == _facts_expected(transport, binary=False)
        assert stream.result == "done"


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("binary", [None, True, False])
def test_an_async_stream_sends_arrays_and_bytes_as_attachments(server, transport, binary):
    async def main() -> tuple[list, object]:
        async with AsyncClient(ADDRESSES[transport].format(server.port), binary=binary) as client:
            stream = client.stream("afacts", ARRAY, DATA)
            items = [item async for item in stream]
            facts = client.stream("facts", x=ARRAY, data=DATA)
            assert [item async for item in facts] == _facts_expected(transport, binary=binary is not False)
            assert facts.result == "done"
            return items, stream.result

    items, result = asyncio.run(asyncio.wait_for(main(), 30))
    assert items == [binary is False, len(DATA), float(ARRAY.sum())]
    assert result is None


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("method", ["endless", "aendless"])
def test_closing_or_cancelling_a_binary_stream_stops_the_generator(server, closed, transport, method):
    with Client(ADDRESSES[transport].format(server.port)) as client:
        tag = f"close-{method}-{transport}"
        stream = client.stream(method, x=ARRAY, tag=tag)
        assert [next(stream), next(stream)] == [False, False]
        stream.close()
        assert closed.wait_for(tag), f"{tag}: the generator was not closed"
        tag = f"cancel-{method}-{transport}"
        stream = client.stream(method, x=ARRAY, tag=tag)
        assert next(stream) is False
        stream.cancel()
        assert set(stream) <= {False}  # the items already on their way, then the end
        assert stream.result is None
        assert closed.wait_for(tag), f"{tag}: the generator was not closed"
        assert client.doubled(ARRAY).numpy.tolist() == (ARRAY * 2).tolist(), "the server goes on serving"


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_leaving_or_cancelling_an_async_binary_stream_stops_the_generator(server, closed, transport):
    async def main() -> None:
        async with AsyncClient(ADDRESSES[transport].format(server.port)) as client:
            async with client.stream("aendless", x=ARRAY, tag=f"leave-{transport}") as stream:
                async for item in stream:
                    assert item is False
                    break
            stream = client.stream("endless", x=ARRAY, tag=f"acancel-{transport}")
            got = []
            async for item in stream:
                got.append(item)
                if len(got) == 2:
                    await stream.cancel()
            assert set(got) == {False}

    asyncio.run(asyncio.wait_for(main(), 30))
    assert closed.wait_for(f"leave-{transport}")
    assert closed.wait_for(f"acancel-{transport}")


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_streaming_an_ordinary_method_with_an_array_gives_its_result(server, transport):
    """A method that does not stream answers with its result, a binary reply to a call sent
    as a binary message (over HTTP, one that accepts a binary stream): the stream reads it."""
    with Client(ADDRESSES[transport].format(server.port)) as client:
        stream = client.stream("doubled", ARRAY)
        assert list(stream) == []
        result = Response({"jsonrpc": "2.0", "id": 1, "result": stream.result}).numpy  # base64 .npy or an array
        assert result.tolist() == (ARRAY * 2).tolist()
        assert not isinstance(stream.result, str), "an attachment, not base64 .npy"


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_a_large_array_streams_from_client_and_async_client(server, transport):
    """1.6 MB written from the array's own memory, the socket taking it in pieces."""
    large = np.random.default_rng(3).standard_normal((400, 1000)).astype(np.float32)
    expected = [False, len(DATA), pytest.approx(float(large.sum()), rel=1e-4)]
    with Client(ADDRESSES[transport].format(server.port)) as client:
        assert list(client.stream("afacts", large, DATA)) == expected

    async def main() -> list:
        async with AsyncClient(ADDRESSES[transport].format(server.port)) as client:
            return [item async for item in client.stream("afacts", large, DATA)]

    assert asyncio.run(asyncio.wait_for(main(), 30)) == expected


def test_a_websocket_server_without_the_subprotocol_gets_a_plain_json_stream():
    """A JSON-only WebSocket server (it selects no subprotocol): with ``binary=None`` a
    stream's bytes go as base64 in a text message; ``binary=True`` raises ``ProtocolError``."""
    from websockets.sync.server import serve

    texts: list[Any] = []
    marked = {"methods": [{"name": "size", "params": [{"name": "data", "schema": {"x-ucall-attachment": "bytes"}}]}]}

    def handler(ws: Any) -> None:
        for message in ws:
            texts.append(message)
            request = json.loads(message)
            if request["method"] == "rpc.discover":
                ws.send(json.dumps({"jsonrpc": "2.0", "id": request["id"], "result": marked}))
                continue
            ws.send(json.dumps({"jsonrpc": "2.0", "method": "ucall.stream", "params": {"id": request["id"], "item": 1}}))
            ws.send(json.dumps({"jsonrpc": "2.0", "id": request["id"], "result": request["params"][0]}))

    with serve(handler, "127.0.0.1", 0) as websocket_server:
        port = websocket_server.socket.getsockname()[1]
        threading.Thread(target=websocket_server.serve_forever, daemon=True).start()
        with Client(f"ws://127.0.0.1:{port}", timeout=10) as client:
            stream = client.stream("size", b"abcd")
            assert list(stream) == [1] and stream.result == "YWJjZA=="
            assert client._marked == {"size": frozenset({0, "data"})}, "the server marks the param: sent plain all the same"
        with Client(f"ws://127.0.0.1:{port}", timeout=10, binary=True) as client:
            with pytest.raises(ProtocolError, match="did not select the WebSocket subprotocol"):
                client.stream("size", b"abcd")

        async def session() -> None:
            async with AsyncClient(f"ws://127.0.0.1:{port}", timeout=10) as client:
                stream = client.stream("size", b"ab")
                assert [item async for item in stream] == [1] and stream.result == "YWI="
            async with AsyncClient(f"ws://127.0.0.1:{port}", timeout=10, binary=True) as client:
                with pytest.raises(ProtocolError, match="did not select the WebSocket subprotocol"):
                    await client.stream("size", b"ab").__anext__()

        asyncio.run(asyncio.wait_for(session(), 30))
        websocket_server.shutdown()
    assert all(isinstance(text, str) for text in texts)


@pytest.mark.parametrize("address", ["https://localhost:{}", "tls://localhost:{}", "wss://localhost:{}"])
def test_a_binary_stream_over_tls(make_server, tmp_path, address):
    """Over TLS the attachments are joined once for ``ssl`` (it has no ``sendmsg``); an
    array item comes back as an attachment through TLS too."""
    from test_client_tls import make_certs

    certs = make_certs(tmp_path)
    server = make_server(tls_cert=str(certs / "cert.pem"), tls_key=str(certs / "key.pem"))

    @server
    def facts(x: np.ndarray, data: bytes):
        yield bool(x.flags.writeable)
        yield len(data)
        yield x * 3

    server.start()
    url = address.format(server.tls_port)
    with Client(url, cacert=certs / "ca.pem") as client:
        stream = client.stream("facts", ARRAY, DATA)
        *first, tripled = list(stream)
        assert first == [False, len(DATA)] and np.array_equal(tripled, ARRAY * 3)

    async def main() -> list:
        async with AsyncClient(url, cacert=certs / "ca.pem") as client:
            return [item async for item in client.stream("facts", x=ARRAY, data=DATA)]

    *first, tripled = asyncio.run(asyncio.wait_for(main(), 30))
    assert first == [False, len(DATA)] and np.array_equal(tripled, ARRAY * 3)


def test_an_async_stream_carries_the_span_it_was_made_in(make_server):
    """An ``AsyncStream`` makes its request at its first ``__anext__`` (after asking the
    server's description): it names the span current where ``stream(...)`` was called,
    in its ``traceparent`` header field over HTTP, binary message or JSON alike."""
    trace = pytest.importorskip("opentelemetry.trace")
    trace_id, span_id = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
    server = make_server()
    seen: list[tuple[str | None, bool]] = []

    @server
    def traced(x: np.ndarray, ctx: Context):
        seen.append((ctx.headers.get("traceparent"), not x.flags.writeable))
        yield 1

    server.start()
    parent = trace.SpanContext(int(trace_id, 16), int(span_id, 16), is_remote=True, trace_flags=trace.TraceFlags(1))

    async def main() -> list:
        async with AsyncClient(port=server.port) as binary, AsyncClient(port=server.port, binary=False) as plain:
            with trace.use_span(trace.NonRecordingSpan(parent)):
                streams = [binary.stream("traced", ARRAY), plain.stream("traced", ARRAY)]
            items = []
            for stream in streams:
                items.append([item async for item in stream])
            return items

    assert asyncio.run(asyncio.wait_for(main(), 30)) == [[1], [1]]
    assert seen == [(f"00-{trace_id}-{span_id}-01", True), (f"00-{trace_id}-{span_id}-01", False)]


def _assert_frames(items: list, result: Any, x: Any, n: int) -> None:
    """``frames(x, n)``'s items and result, each an array that came as an attachment."""
    assert len(items) == n
    for i, item in enumerate(items):
        assert isinstance(item, np.ndarray) and item.dtype == x.dtype, type(item)
        assert np.array_equal(item, x * i), i
    assert isinstance(result, np.ndarray) and np.array_equal(result, x[:1])


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("binary", [None, True])
def test_stream_items_and_result_come_back_as_attachments(server, transport, binary):
    with Client(ADDRESSES[transport].format(server.port), binary=binary) as client:
        stream = client.stream("frames", x=ARRAY, n=3)
        _assert_frames(list(stream), stream.result, ARRAY, 3)


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("binary", [None, True])
def test_async_stream_items_nest_arrays_and_bytes_as_attachments(server, transport, binary):
    async def main() -> list:
        async with AsyncClient(ADDRESSES[transport].format(server.port), binary=binary) as client:
            stream = client.stream("aframes", ARRAY, 2)
            items = [item async for item in stream]
            frames = client.stream("frames", x=ARRAY, n=2)
            _assert_frames([item async for item in frames], frames.result, ARRAY, 2)
            return items

    items = asyncio.run(asyncio.wait_for(main(), 30))
    assert [item["i"] for item in items] == [0, 1]
    assert [item["raw"] for item in items] == [b"\0" * 4, b"\1" * 4]
    for i, item in enumerate(items):
        assert isinstance(item["frame"], np.ndarray) and np.array_equal(item["frame"], ARRAY + i)


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_binary_false_streams_items_as_base64(server, transport):
    """A plain JSON stream: each array item is the base64 of its ``.npy`` form."""
    with Client(ADDRESSES[transport].format(server.port), binary=False) as client:
        stream = client.stream("frames", x=ARRAY, n=2)
        items = list(stream)
        assert all(isinstance(item, str) for item in items + [stream.result])
        decoded = [Response({"jsonrpc": "2.0", "id": 1, "result": item}).numpy for item in items]
        assert [item.tolist() for item in decoded] == [(ARRAY * i).tolist() for i in range(2)]


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_items_come_as_attachments_without_binary_params_only_with_binary_true(server, transport):
    """As for any call: a stream whose params hold no binary value is a JSON text (its
    items base64) unless ``binary=True`` sends it as a binary message."""
    with Client(ADDRESSES[transport].format(server.port)) as client:
        stream = client.stream("tokens", n=2)
        assert all(isinstance(item, str) for item in stream) and stream.result == "ZW5k"
    with Client(ADDRESSES[transport].format(server.port), binary=True) as client:
        stream = client.stream("tokens", n=2)
        items = list(stream)
        assert [item.tolist() for item in items] == [[0, 0, 0], [1, 1, 1]]
        assert all(item.dtype == np.int16 for item in items) and stream.result == b"end"


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_large_array_items_stream_back_equal(server, transport):
    """1.6 MB items, each sent from the array's own memory and read as it comes."""
    large = np.random.default_rng(5).standard_normal((400, 1000)).astype(np.float32)
    with Client(ADDRESSES[transport].format(server.port)) as client:
        stream = client.stream("frames", large, 3)
        _assert_frames(list(stream), stream.result, large, 3)

    async def main() -> None:
        async with AsyncClient(ADDRESSES[transport].format(server.port)) as client:
            stream = client.stream("frames", large, 3)
            _assert_frames([item async for item in stream], stream.result, large, 3)

    asyncio.run(asyncio.wait_for(main(), 30))


def test_a_plain_http_client_streams_json_lines(server):
    """curl's view: without ``Accept`` naming both binary types, the body is JSON lines
    whose arrays are base64, even for a request that accepts binary replies."""
    import http.client

    from ucall import _attachments

    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    try:
        request = {"jsonrpc": "2.0", "method": "tokens", "params": {"n": 2}, "id": 1}
        connection.request("POST", "/", json.dumps(request), {"Content-Type": "application/json"})
        reply = connection.getresponse()
        assert reply.getheader("Content-Type") == "application/jsonl"
        lines = [json.loads(line) for line in reply.read().splitlines()]
        items = [Response({"jsonrpc": "2.0", "id": 1, "result": line["params"]["item"]}).numpy for line in lines[:2]]
        assert [item.tolist() for item in items] == [[0, 0, 0], [1, 1, 1]], "base64 .npy"
        assert lines[2] == {"jsonrpc": "2.0", "id": 1, "result": "ZW5k"}
        connection.request(
            "POST", "/", json.dumps(request), {"Content-Type": "application/json", "Accept": _attachments.CONTENT_TYPE}
        )
        reply = connection.getresponse()
        assert reply.getheader("Content-Type") == "application/jsonl"
        assert json.loads(reply.read().splitlines()[-1])["result"] == "ZW5k"
    finally:
        connection.close()


def test_the_framer_asks_for_the_rest_of_a_large_message_in_one_read():
    """``StreamFramer.wanted``: once a binary message's prefix (raw TCP) or a chunk's size
    line (HTTP) has come, what the message still needs, so that the stream reads an
    attachment in few reads rather than in 64 KiB pieces; 0 where nothing is known."""
    from ucall import _attachments, _streamed

    body = b'{"jsonrpc":"2.0","method":"ucall.stream","params":{"id":1,"item":1}}'
    message = _attachments.prefix(len(body), len(body) + 1000) + body + bytes(1000)
    framer = _streamed.StreamFramer("tcp", 1)
    framer.feed(message[:10])
    assert framer.wanted() == 0, "the prefix is not whole yet"
    framer.feed(message[10:100])
    assert framer.wanted() == len(message) - 100
    framer.feed(message[100:])
    assert framer.events() == [("item", 1)] and framer.wanted() == 0

    http = _streamed.StreamFramer("http", 1)
    head = b"HTTP/1.1 200 OK\r\nContent-Type: application/vnd.ucall.binary-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
    http.feed(head + f"{len(message):x}\r\n".encode() + message[:50])
    assert http.events() == [] and http.wanted() == len(message) - 50
    http.feed(message[50:] + b"\r\n0\r\n\r\n")
    assert http.events() == [("item", 1)]
