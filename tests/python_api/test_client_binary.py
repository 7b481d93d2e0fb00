# SPDX-License-Identifier: Apache-2.0
"""The clients' binary messages (docs/wire.md): attachments written as the spec and its
vectors say, binary replies read back into numpy arrays and bytes, and arrays echoed by a
real server over HTTP, raw TCP and WebSocket, from ``Client`` and ``AsyncClient``."""

from __future__ import annotations

import asyncio
import json
import socket
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from conftest import Recorder

from ucall import Context, _attachments
from ucall._wire import ReplyReader
from ucall.client import AsyncClient, Client, Response, _BinaryRequest, _decode, _request
from ucall.exceptions import ProtocolError
from ucall.testing import TestClient

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "vectors"))
import binary_wire  # noqa: E402

np = pytest.importorskip("numpy")

VECTORS = Path(__file__).resolve().parents[1] / "vectors" / "binary"


def _hexdump(text: str) -> bytes:
    """The bytes of an ``xxd`` dump as docs/wire.md prints them."""
    out = b""
    for line in text.strip().splitlines():
        groups = line.split(":", 1)[1].split("  ")[0]
        out += bytes.fromhex(groups.replace(" ", ""))
    return out


def _wire_md_dumps() -> list[bytes]:
    """The hex dumps of docs/wire.md §6, in order."""
    text = (Path(__file__).resolve().parents[2] / "docs" / "wire.md").read_text()
    section = text.split("## 6. Examples", 1)[1]
    blocks = section.split("```")[1::2]
    return [_hexdump(block) for block in blocks if block.strip().startswith("00000000:")]


def _call(method: str, params: Any, call_id: int) -> _BinaryRequest:
    """A call with every binary value as an attachment (``binary=True``)."""
    return _BinaryRequest(_request(method, params, call_id), lambda method: None)


def _message(call: _BinaryRequest) -> bytes:
    """The raw TCP message of ``call``, its pieces joined."""
    parts = call.parts(_attachments.prefix(len(call.text), call.length))
    return b"".join(bytes(memoryview(p).cast("B")) for p in parts)


def test_the_request_of_the_spec_example_byte_for_byte():
    request_dump, _ = _wire_md_dumps()
    assert _message(_call("hex", [b"foo"], 1)) == request_dump


def test_the_reply_of_the_spec_example_reads_as_a_float32_array():
    _, reply_dump = _wire_md_dumps()
    head = (
        b"HTTP/1.1 200 OK\r\nContent-Type: application/vnd.ucall.binary\r\n"
        b"UCall-JSON-Length: 106\r\nContent-Length: 136\r\n\r\n"
    )
    reader = ReplyReader(http=True)
    for byte in head + reply_dump:  # byte by byte: framing resumes wherever the input stops
        reader.feed(bytes([byte]))
    reply = reader.next()
    assert reply is not None and reply.json_length == 106
    response = Response(_decode(reply))
    result = response.json
    assert isinstance(result, np.ndarray) and result.dtype == np.float32
    assert result.tolist() == [1.5, -2.0]
    assert response.numpy is result
    assert np.shares_memory(result, np.frombuffer(reply.body, np.uint8)), "a view of the reply, not a copy"


def test_a_raw_tcp_binary_reply_after_a_json_one():
    body_text = b'{"jsonrpc":"2.0","result":{"$ucall":"bytes","offset":0,"length":3},"id":2}'
    body = binary_wire.body(body_text, b"abc")
    stream = b'{"jsonrpc":"2.0","result":1,"id":1}\n' + _attachments.prefix(len(body_text), len(body)) + body
    reader = ReplyReader(http=False)
    reader.feed(stream)
    first, second = reader.next(), reader.next()
    assert first is not None and json.loads(first.body)["result"] == 1
    assert second is not None and _decode(second)["result"] == b"abc"
    assert reader.next() is None


def _section(vector: dict[str, Any]) -> bytes:
    placed = [(a["offset"], bytes.fromhex(a["hex"])) for a in vector.get("attachments", [])]
    return binary_wire.section(placed, vector.get("section_length"))


def _values(value: Any, section: bytes) -> Any:
    """A request's params with each placeholder read back into the bytes or array it names."""
    if binary_wire.is_placeholder(value):
        data = binary_wire.resolve(value, section)
        if value["$ucall"] == "ndarray":
            return np.frombuffer(data, np.dtype(value["dtype"]).newbyteorder("<")).reshape(value["shape"])
        return data
    if isinstance(value, list):
        return [_values(v, section) for v in value]
    if isinstance(value, dict):
        return {k: _values(v, section) for k, v in value.items()}
    return value


def _layout_cases() -> list[Any]:
    """The valid vectors of a call with attachments whose JSON text is the one this client
    writes for the same call (the others order members otherwise, or share attachments),
    and whose section is its attachments alone (no ``section_length`` of spare bytes)."""
    cases = []
    for path in sorted(VECTORS.glob("valid_*.json")):
        vector = json.loads(path.read_text())
        request = json.loads(vector.get("json", "null"))
        if not isinstance(request, dict) or "id" not in request or "section_length" in vector:
            continue
        section = _section(vector)
        call = _call(request["method"], _values(request["params"], section), request["id"])
        if call.attachments.buffers and call.text == vector["json"].encode():
            cases.append(pytest.param(call, binary_wire.body(call.text, section), id=path.stem))
    assert len(cases) >= 4, "the vectors have calls this client writes alike"
    return cases


@pytest.mark.parametrize(("call", "body"), _layout_cases())
def test_requests_are_laid_out_as_the_vectors(call, body):
    assert b"".join(bytes(memoryview(p).cast("B")) for p in call.parts(b"")) == body


def _bad_placeholders() -> list[tuple[str, Any, bytes]]:
    """The invalid placeholders of the vectors, with their sections."""
    found = []
    for path in sorted(VECTORS.glob("invalid_*.json")):
        vector = json.loads(path.read_text())
        if "json" not in vector or not ("placeholder" in path.stem or "ndarray" in path.stem):
            continue
        request = json.loads(vector["json"])
        if not isinstance(request, dict):
            continue  # a batch: its bad entry is another vector's
        params = request["params"]
        bad = params[0] if isinstance(params, list) else next(iter(params.values()))
        found.append((path.stem, bad, _section(vector)))
    return found


@pytest.mark.parametrize(("name", "placeholder", "section"), _bad_placeholders(), ids=lambda v: str(v)[:40])
def test_a_reply_with_an_invalid_placeholder_is_a_protocol_error(name, placeholder, section):
    text = json.dumps({"jsonrpc": "2.0", "result": placeholder, "id": 1}).encode()
    with pytest.raises(ProtocolError, match="placeholder|array"):
        _attachments.decode(binary_wire.body(text, section), len(text))


def test_a_placeholder_outside_results_stays_an_object():
    text = json.dumps({"jsonrpc": "2.0", "error": {"code": 1, "message": "m", "data": {"$ucall": 1}}, "id": 1})
    assert _attachments.decode(text.encode(), len(text))["error"]["data"] == {"$ucall": 1}


def test_params_pack_into_placeholders_and_aligned_attachments():
    array = np.arange(6, dtype=">i4").reshape(2, 3)  # big-endian: sent little-endian
    column = np.arange(12, dtype=np.float64).reshape(3, 4)[:, 1]  # strided: sent C-contiguous
    call = _call("f", {"a": array, "b": [b"xy", column], "n": 1, "s": "text"}, 3)
    params = call.request["params"]
    assert params["a"] == {"$ucall": "ndarray", "offset": 0, "length": 24, "dtype": "int32", "shape": [2, 3]}
    assert params["b"][0] == {"$ucall": "bytes", "offset": 64, "length": 2}
    assert params["b"][1] == {"$ucall": "ndarray", "offset": 128, "length": 24, "dtype": "float64", "shape": [3]}
    assert (params["n"], params["s"]) == (1, "text")
    body = b"".join(bytes(memoryview(p).cast("B")) for p in call.parts(b""))
    section = body[binary_wire.align(len(call.text)) :]
    assert section[:24] == np.arange(6, dtype="<i4").tobytes()
    assert section[64:66] == b"xy"
    assert section[128:152] == np.array([1.0, 5.0, 9.0]).tobytes()
    assert call.plain()["params"]["n"] == 1 and isinstance(call.plain()["params"]["a"], str)  # base64 .npy


def test_a_large_array_is_written_from_its_own_memory():
    array = np.ones(1 << 20, dtype=np.float32)
    call = _call("echo", [array], 1)
    parts = call.parts(b"")
    assert any(np.shares_memory(np.frombuffer(p, np.uint8), array) for p in parts if len(p) == array.nbytes)


# ------------------------------------------------------------------ against the server


def _echo_server(make_server: Any, ports: list[int] | None = None) -> Any:
    """A started server with echo(x: ndarray), echo_any(x) and reverse(data: bytes); with
    `ports`, each call notes there the peer port of the connection it came on."""
    server = make_server()

    def seen(ctx: Context) -> None:
        if ports is not None:
            assert ctx.peer is not None
            ports.append(ctx.peer[1])

    @server
    def echo(x: np.ndarray, ctx: Context) -> np.ndarray:
        seen(ctx)
        return x

    @server
    def echo_any(x: Any, ctx: Context) -> Any:
        seen(ctx)
        return x

    @server
    def reverse(data: bytes, ctx: Context) -> bytes:
        seen(ctx)
        return data[::-1]

    server.start()
    return server


ADDRESSES = {"http": "http://127.0.0.1:{}", "tcp": "tcp://127.0.0.1:{}", "websocket": "ws://127.0.0.1:{}"}


@pytest.mark.parametrize("transport", sorted(ADDRESSES))
def test_a_numpy_array_comes_back_equal_from_client(make_server, transport):
    server = _echo_server(make_server)
    relay = Recorder(server.port)
    array = np.random.default_rng(7).standard_normal((400, 1000)).astype(np.float32)  # 1.6 MB
    try:
        with Client(ADDRESSES[transport].format(relay.port)) as client:
            back = client.echo(array).numpy
            assert back.dtype == np.float32 and back.shape == array.shape and np.array_equal(back, array)
            assert client.reverse(b"abc").bytes == b"cba"
            assert np.array_equal(client.echo(x=array[:2]).numpy, array[:2])  # by name too
            assert isinstance(client.echo(array[:5]).json, np.ndarray)  # a binary reply's array as it is
            # An untyped param is not marked: the array goes as base64 .npy, and comes back so.
            assert np.array_equal(client.echo_any(array[:3]).numpy, array[:3])
        assert relay.binary_messages(transport) == 1, "the calls with marked params went on one connection, binary"
        assert relay.binary_messages(transport, replies=True) == 1, "and the arrays came back so"
        before = len(relay.sent)
        with Client(ADDRESSES[transport].format(relay.port), binary=False) as client:
            assert np.array_equal(client.echo(array[:10]).numpy, array[:10])
        assert relay.binary_messages(transport) == 1 and len(relay.sent) > before
    finally:
        relay.close()


@pytest.mark.parametrize("transport", sorted(ADDRESSES))
def test_a_numpy_array_comes_back_equal_from_async_client(make_server, transport):
    server = _echo_server(make_server)
    relay = Recorder(server.port)
    arrays = [np.arange(i * 1000, dtype=np.int64).reshape(-1, 10) for i in range(1, 6)]

    async def session() -> None:
        async with AsyncClient(ADDRESSES[transport].format(relay.port)) as client:
            backs = await asyncio.gather(*(client.echo(a) for a in arrays))
            for back, array in zip(backs, arrays):
                assert np.array_equal(back.numpy, array) and back.numpy.dtype == np.int64
            assert (await client.reverse(b"abc")).bytes == b"cba"
        assert relay.binary_messages(transport) == 1
        assert relay.binary_messages(transport, replies=True) == 1
        async with AsyncClient(ADDRESSES[transport].format(relay.port), binary=False) as client:
            assert np.array_equal((await client.echo(arrays[0])).numpy, arrays[0])
        assert relay.binary_messages(transport) == 1

    try:
        asyncio.run(asyncio.wait_for(session(), 30))
    finally:
        relay.close()


def test_binary_true_sends_attachments_without_asking(make_server):
    server = _echo_server(make_server)
    relay = Recorder(server.port)
    try:
        with Client(port=relay.port, binary=True) as client:
            assert client.reverse(b"abc").bytes == b"cba"
        assert relay.binary_messages("http") == 1
        assert b"rpc.discover" not in b"".join(relay.sent)
    finally:
        relay.close()


def test_binary_must_be_a_bool_or_none():
    with pytest.raises(TypeError, match="binary="):
        Client(binary="yes")  # type: ignore[arg-type]


def test_a_server_that_does_not_describe_itself_gets_plain_json():
    """A server without ``rpc.discover`` (any JSON-RPC server) marks no param: a call with
    bytes goes as plain JSON, base64."""
    seen: list[bytes] = []
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]

    def serve(connection: socket.socket) -> None:
        with connection:
            reader = connection.makefile("rb")
            while True:
                head = b""
                while not head.endswith(b"\r\n\r\n"):
                    line = reader.readline()
                    if not line:
                        return
                    head += line
                length = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
                request = json.loads(reader.read(length))
                seen.append(head.lower().split(b"content-type:", 1)[1].split(b"\r\n")[0].strip())

                def answer(request: Any) -> Any:
                    if request["method"] == "rpc.discover":
                        reply = {"jsonrpc": "2.0", "error": {"code": -32601, "message": "Method not found"}}
                    else:
                        reply = {"jsonrpc": "2.0", "result": request["params"][0]}
                    return {**reply, "id": request["id"]}

                text = json.dumps([answer(r) for r in request] if isinstance(request, list) else answer(request)).encode()
                connection.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(text), text))

    def accept() -> None:
        while True:
            try:
                connection, _ = listener.accept()
            except OSError:
                return
            threading.Thread(target=serve, args=(connection,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    try:
        with Client(port=port, timeout=10) as client:
            assert client.size(b"abcd").json == "YWJjZA=="
            assert client.size(b"abcdef").json == "YWJjZGVm"
            assert [r.json for r in client.pipeline([("size", [b"ab"]), ("size", [b"abc"])])] == ["YWI=", "YWJj"]
            with client.batch() as batch:
                batched = batch.size(b"a")
            assert batched.json == "YQ=="
    finally:
        listener.close()
    assert seen == [b"application/json"] * 6  # rpc.discover once, then the five calls


def _reply_vectors() -> list[Any]:
    """The reply vectors (tests/vectors/binary/replies) whose reply has an attachment."""
    cases = []
    for path in sorted((VECTORS / "replies").glob("*.json")):
        vector = json.loads(path.read_text())
        if vector.get("reply") is not None and "$ucall" in json.dumps(vector["reply"]):
            cases.append(pytest.param(vector, id=path.stem))
    return cases


@pytest.mark.parametrize("vector", _reply_vectors())
def test_binary_replies_read_as_their_plain_json_form(vector):
    """A binary reply of the vectors, read by the client, is what a plain JSON client gets
    (each value in its plain form: base64, an array's .npy)."""
    from ucall import _codec

    text = json.dumps(vector["reply"]).encode()
    placed = [(a["offset"], bytes.fromhex(a["hex"])) for a in vector.get("reply_attachments", [])]
    body = binary_wire.body(text, binary_wire.section(placed, vector.get("reply_section_length")))
    assert json.loads(json.dumps(_codec.pack(_attachments.decode(body, len(text))))) == vector["plain_reply"]


@pytest.mark.parametrize("transport", sorted(ADDRESSES))
def test_async_calls_batches_and_pipelines_share_one_connection(make_server, transport):
    """Calls with attachments go on the connection of every other call, in order, each
    reply to its call; a batch with attachments is one binary message whose calls share
    its section; a pipeline mixes binary messages and JSON texts."""
    server = _echo_server(make_server)
    relay = Recorder(server.port)
    arrays = [np.arange(i * 3000, dtype=np.float32).reshape(-1, 3) for i in range(1, 9)]

    async def session() -> None:
        async with AsyncClient(ADDRESSES[transport].format(relay.port), binary=True) as client:
            calls = []
            for i, array in enumerate(arrays):
                calls.append(client.echo(array))
                calls.append(client.echo_any(i))  # plain JSON, between binary messages
            replies = await asyncio.gather(*calls)
            for i, array in enumerate(arrays):
                back = replies[2 * i].numpy
                assert np.array_equal(back, array) and back.dtype == np.float32
                assert not back.flags.writeable, "a view of the reply's buffer, not a copy"
                assert replies[2 * i + 1].json == i
            batch = await client.batch([("echo", [arrays[0]]), ("reverse", [b"abc"]), ("echo_any", ["x"])])
            assert np.array_equal(batch[0].numpy, arrays[0])
            assert (batch[1].bytes, batch[2].json) == (b"cba", "x")
            async with client.batch() as collected:
                first, second = collected.reverse(b"xyz"), collected.echo(x=arrays[1])
            assert first.bytes == b"zyx" and np.array_equal(second.numpy, arrays[1])
            piped = await client.pipeline([("echo", [arrays[2]]), ("echo_any", [7]), ("reverse", [b"de"])])
            assert np.array_equal(piped[0].numpy, arrays[2])
            assert (piped[1].json, piped[2].bytes) == (7, b"ed")

    try:
        asyncio.run(asyncio.wait_for(session(), 30))
        assert len(relay.sent) == 1, "one connection"
        sent, received = bytes(relay.sent[0]), bytes(relay.received[0])
        # Each array went and came back as an attachment, once: no base64 of it anywhere.
        assert relay.binary_messages(transport) == 1 and relay.binary_messages(transport, replies=True) == 1
        assert received.count(arrays[-1].tobytes()) == 1
        if transport != "websocket":  # (a client's WebSocket frames are masked)
            assert sent.count(arrays[-1].tobytes()) == 1
        if transport == "http":
            batches = sent.count(b'[{"jsonrpc":"2.0","method":"echo","params":[{"$ucall":"ndarray"')
            assert batches == 1, "the batch is one binary message"
    finally:
        relay.close()


def test_sync_batches_carry_attachments(make_server):
    server = _echo_server(make_server)
    relay = Recorder(server.port)
    array = np.arange(5000, dtype=np.int32)
    try:
        with Client(port=relay.port, binary=True) as client:
            with client.batch() as batch:
                echoed, reversed_ = batch.echo(array), batch.reverse(b"abc")
            assert np.array_equal(echoed.numpy, array) and reversed_.bytes == b"cba"
            assert client([{"method": "echo_any", "params": [1]}, {"method": "echo_any", "params": ["x"]}])[1].json == "x"
        sent = b"".join(bytes(record) for record in relay.sent)
        assert sent.count(array.tobytes()) == 1, "the batch's array went once, as an attachment"
        assert b'"method":"reverse","params":[{"$ucall":"bytes"' in sent
    finally:
        relay.close()


@pytest.mark.parametrize("binary", [None, True])
@pytest.mark.parametrize("transport", sorted(ADDRESSES))
def test_sync_calls_batches_and_pipelines_share_one_connection(make_server, transport, binary):
    """``Client`` sends calls with attachments, batches and pipelines as binary messages
    on the one connection its other calls use (the server sees one peer port), in order,
    the arrays back as views of the reply's buffer."""
    ports: list[int] = []
    server = _echo_server(make_server, ports)
    relay = Recorder(server.port)
    arrays = [np.random.default_rng(i).standard_normal((i * 1000, 3)).astype(np.float32) for i in range(1, 7)]
    try:
        with Client(ADDRESSES[transport].format(relay.port), binary=binary, timeout=30) as client:
            for i, array in enumerate(arrays[:3]):
                back = client.echo(array).numpy
                assert np.array_equal(back, array) and back.dtype == np.float32
                assert not back.flags.writeable, "a view of the reply's buffer, not a copy"
                assert client.echo_any(i).json == i
            with client.batch() as batch:
                first, second, third = batch.reverse(b"xyz"), batch.echo(x=arrays[3]), batch.echo_any("b")
            assert first.bytes == b"zyx" and np.array_equal(second.numpy, arrays[3]) and third.json == "b"
            explicit = client([{"method": "echo", "params": [arrays[4]]}, {"method": "echo_any", "params": [2]}])
            assert np.array_equal(explicit[0].numpy, arrays[4]) and explicit[1].json == 2
            piped = client.pipeline(
                [("echo", [arrays[5]]), ("echo_any", [7]), ("reverse", [b"de"]), ("echo_any", ["x"]), ("echo", {"x": arrays[0]})]
            )
            assert np.array_equal(piped[0].numpy, arrays[5]) and np.array_equal(piped[4].numpy, arrays[0])
            assert (piped[1].json, piped[2].bytes, piped[3].json) == (7, b"ed", "x")
        assert len(ports) == 6 + 3 + 2 + 5 and len(set(ports)) == 1, "every call on one connection"
        assert len(relay.sent) == 1, "one connection"
        assert relay.binary_messages(transport) == 1 and relay.binary_messages(transport, replies=True) == 1
        received = bytes(relay.received[0])
        assert received.count(arrays[5].tobytes()) == 1, "the array came back as an attachment"
        if transport != "websocket":  # (a client's WebSocket frames are masked)
            sent = bytes(relay.sent[0])
            assert sent.count(arrays[5].tobytes()) == 1 and sent.count(arrays[1].tobytes()) == 1
            assert b"AAAA" not in sent, "no base64 of an array"
            batches = sent.count(b'[{"jsonrpc":"2.0","method":"reverse","params":[{"$ucall":"bytes"')
            assert batches == 1, "the batch is one binary message"
    finally:
        relay.close()


def test_sync_binary_messages_keep_the_timeout(make_server):
    """A binary call on the native connection fails with ``TimeoutError`` when its reply is
    late, and the next call opens a new connection."""
    import time

    from ucall.exceptions import TimeoutError as CallTimeout

    server = make_server()

    @server
    def slow(data: bytes) -> bytes:
        time.sleep(1.0)
        return data

    @server
    def fast(data: bytes) -> bytes:
        return data

    with TestClient(server, binary=True, timeout=0.3) as client:
        with pytest.raises(CallTimeout, match="within 0.3 s"):
            client.slow(b"x" * 100_000)
        time.sleep(1.0)
        assert client.fast(b"y" * 100_000).bytes == b"y" * 100_000


def test_a_websocket_server_without_the_subprotocol_gets_plain_json():
    """A JSON-only WebSocket server (it selects no subprotocol): ``binary=None`` sends
    plain JSON (base64); ``binary=True`` raises ``ProtocolError`` saying why."""
    from websockets.sync.server import serve

    texts: list[Any] = []

    def answer(request: Any) -> Any:
        if request["method"] == "rpc.discover":
            reply = {"error": {"code": -32601, "message": "Method not found"}}
        else:
            reply = {"result": request["params"][0]}
        return {"jsonrpc": "2.0", "id": request.get("id"), **reply}

    def handler(ws: Any) -> None:
        for message in ws:
            texts.append(message)
            request = json.loads(message)
            ws.send(json.dumps([answer(r) for r in request] if isinstance(request, list) else answer(request)))

    with serve(handler, "127.0.0.1", 0) as websocket_server:
        port = websocket_server.socket.getsockname()[1]
        threading.Thread(target=websocket_server.serve_forever, daemon=True).start()
        with Client(f"ws://127.0.0.1:{port}", timeout=10) as client:
            assert client.size(b"abcd").json == "YWJjZA=="
            assert [r.json for r in client.pipeline([("size", [b"ab"]), ("size", [b"abc"])])] == ["YWI=", "YWJj"]
        with Client(f"ws://127.0.0.1:{port}", timeout=10, binary=True) as client:
            with pytest.raises(ProtocolError, match="did not select the WebSocket subprotocol"):
                client.size(b"abcd")
            with pytest.raises(ProtocolError, match="did not select the WebSocket subprotocol"):
                client.pipeline([("size", [b"ab"])])

        async def session() -> None:
            async with AsyncClient(f"ws://127.0.0.1:{port}", timeout=10) as client:
                assert (await client.size(b"abcd")).json == "YWJjZA=="
                assert [r.json for r in await client.batch([("size", [b"ab"])])] == ["YWI="]
            async with AsyncClient(f"ws://127.0.0.1:{port}", timeout=10, binary=True) as client:
                with pytest.raises(ProtocolError, match="did not select the WebSocket subprotocol"):
                    await client.size(b"abcd")  # the connection opens with it
                with pytest.raises(ProtocolError, match="did not select the WebSocket subprotocol"):
                    await client.size(b"abcd")  # known by then

        asyncio.run(asyncio.wait_for(session(), 30))
        websocket_server.shutdown()
    # rpc.discover, then 3 calls; then AsyncClient's rpc.discover, a call and a batch
    assert all(isinstance(text, str) for text in texts) and len(texts) == 7


@pytest.mark.parametrize("transport", ["http", "tcp"])
def test_async_binary_true_gets_binary_replies_to_calls_without_attachments(make_server, transport):
    """docs/wire.md §3.2: over raw TCP a JSON text is answered with JSON; a call accepts a
    binary reply by being a binary message, with no attachment when it has none to send."""
    server = _echo_server(make_server)
    relay = Recorder(server.port)
    values = np.arange(2000, dtype=np.float64).tolist()

    async def session() -> None:
        async with AsyncClient(ADDRESSES[transport].format(relay.port), binary=True) as client:
            back = (await client.echo(values)).numpy
            assert back.tolist() == values and not back.flags.writeable
            assert (await client.echo_any({"a": 1})).json == {"a": 1}

    try:
        asyncio.run(asyncio.wait_for(session(), 30))
        assert relay.binary_messages(transport) == 1 and relay.binary_messages(transport, replies=True) == 1
        assert np.array(values).tobytes() in bytes(relay.received[0]), "the array came back as an attachment"
    finally:
        relay.close()


@pytest.mark.parametrize("transport", ["http", "tcp"])
def test_sync_binary_true_gets_binary_replies_to_calls_without_attachments(make_server, transport):
    """As ``AsyncClient``: with ``binary=True`` a call with no binary value is a binary
    message too, so that its array result comes back as an attachment."""
    server = _echo_server(make_server)
    relay = Recorder(server.port)
    values = np.arange(2000, dtype=np.float64).tolist()
    try:
        with Client(ADDRESSES[transport].format(relay.port), binary=True) as client:
            back = client.echo(values).numpy
            assert back.tolist() == values and not back.flags.writeable
            assert client.echo_any({"a": 1}).json == {"a": 1}
            assert [r.json for r in client.pipeline([("echo_any", [1]), ("echo_any", [2])])] == [1, 2]
        assert len(relay.sent) == 1
        assert relay.binary_messages(transport) == 1 and relay.binary_messages(transport, replies=True) == 1
        assert np.array(values).tobytes() in bytes(relay.received[0]), "the array came back as an attachment"
    finally:
        relay.close()
