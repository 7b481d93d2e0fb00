# SPDX-License-Identifier: Apache-2.0
"""ucall.client: Client and AsyncClient against real servers, over HTTP and raw TCP."""

import asyncio
import base64
import json
import socket
import ssl
import threading
import time
from typing import Any, Callable, Optional

import pytest
from conftest import canned_server, with_client_procedures
from test_client_tls import make_certs, openssl
from websockets.server import ServerProtocol

import ucall
from ucall import ConnectError, ProtocolError, RPCError, TimeoutError, TransportError
from ucall._wire import ReplyReader, WebSocketReader
from ucall.client import AsyncClient, Client, ClientTLS, Response


@pytest.fixture
def server(make_server):
    return with_client_procedures(make_server()).start()


@pytest.mark.parametrize("use_http", [True, False])
def test_calls(server, use_http):
    with Client(port=server.port, use_http=use_http) as client:
        assert client.sum(a=1, b=2).json == 3
        assert client.sum(1, 2).json == 3
        response = client({"method": "sum", "params": [5, 6]})
        assert isinstance(response, Response) and response.json == 11
        assert client.echo(2**80).json == 2**80
        error = client.fail()
        with pytest.raises(RPCError) as caught:
            error.json
        assert caught.value.code == -32001 and caught.value.data == {"why": "asked"}
        with pytest.raises(RPCError):
            error.raise_for_status()
        assert client.nope().error.code == -32601
        assert client.notify("echo", 1) is None
        assert client.sum(1, 1).json == 2  # the connection is still in step
        ids = {client.sum(1, 1).id for _ in range(5)}
        assert len(ids) == 5
        with pytest.raises(TypeError):
            client.sum(1, b=2)


@pytest.mark.parametrize("scheme", ["http", "tcp", "ws"])
def test_a_reply_over_max_reply_size_fails_its_call_naming_both_sizes(server, scheme):
    url = f"{scheme}://127.0.0.1:{server.port}"
    over = r"a reply of \d+ bytes( or more)?, over the client's max_reply_size of 1000 bytes"
    with Client(url, max_reply_size=1000) as client:
        assert client.max_reply_size == 1000
        with pytest.raises(ProtocolError, match=over):
            client.echo("x" * 2000)
        assert client.echo("y" * 900).json == "y" * 900  # a new connection, under the limit

    async def calls() -> None:
        async with AsyncClient(url, max_reply_size=1000) as client:
            with pytest.raises(ProtocolError, match=over):
                await client.echo("x" * 2000)
            assert (await client.sum(1, 2)).json == 3

    asyncio.run(calls())
    assert Client(url).max_reply_size == 64 << 20 == ucall.client.MAX_REPLY_SIZE
    assert Client(url, max_reply_size=None).echo("z" * 100_000).json == "z" * 100_000
    for bad in (0, -1, True, 1.5):
        with pytest.raises(ValueError, match="max_reply_size is a number of bytes from 1"):
            Client(url, max_reply_size=bad)


def _read_http_request(conn: socket.socket, buffered: bytearray) -> bytes:
    """One HTTP request's body from ``conn`` (bytes past it stay in ``buffered``)."""
    while b"\r\n\r\n" not in buffered:
        buffered += conn.recv(1 << 16)
    head, _, rest = bytes(buffered).partition(b"\r\n\r\n")
    length = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
    while len(rest) < length:
        rest += conn.recv(1 << 20)
    buffered[:] = rest[length:]
    return rest[:length]


def _answer(conn: socket.socket, body: bytes, result: str) -> None:
    reply = json.dumps({"jsonrpc": "2.0", "id": json.loads(body)["id"], "result": result}).encode()
    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(reply), reply))


def test_a_call_cut_short_after_replies_is_sent_again_and_one_written_whole_is_not():
    # A server that answers 3 calls, then dies while the 4th (32 MB) arrives; then one
    # that takes a whole call and dies before answering it.
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    seen: list[str] = []

    def serve() -> None:
        for n in (1, 2, 3):
            conn, _ = listener.accept()
            conn.settimeout(60)
            buffered = bytearray()
            with conn:
                if n == 1:
                    for i in range(3):
                        _answer(conn, _read_http_request(conn, buffered), f"reply {i}")
                    got = 0
                    while got < 1 << 16:
                        got += len(conn.recv(1 << 16))
                    seen.append(f"cut after {got}")
                    conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
                elif n == 2:
                    body = _read_http_request(conn, buffered)
                    seen.append(f"whole {len(body)}")
                    _answer(conn, body, "again on a new connection")
                    _read_http_request(conn, buffered)  # read whole, maybe run, then lost
                    seen.append("transfer")
                    conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
                else:
                    seen.append("a third connection")

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    with Client(port=port, timeout=60) as client:
        assert [client.small(i).json for i in range(3)] == ["reply 0", "reply 1", "reply 2"]
        assert client.large("x" * (32 << 20)).json == "again on a new connection"
        with pytest.raises(TransportError, match="may have run"):
            client.transfer(1)
    time.sleep(0.2)
    listener.close()
    assert seen[0].startswith("cut after") and seen[1].startswith("whole ") and seen[2:] == ["transfer"], seen
    assert int(seen[1].split()[1]) > 32 << 20  # the large call, whole, on the second connection


def test_the_python_transport_keeps_max_reply_size_too():
    # Clients given an ssl_context= frame replies in Python (ucall._wire).
    body = b'["' + b"x" * 200 + b'"]'
    sized = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(body) + body
    chunked = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n" % len(body) + body + b"\r\n0\r\n\r\n"
    until_end = b"HTTP/1.1 200 OK\r\n\r\n" + body
    for http, stream, size in ((True, sized, "204 bytes,"), (True, chunked, "204 bytes or more"), (True, until_end, "or more"), (False, body, "or more")):
        reader = ReplyReader(http, max_size=100)
        with pytest.raises(ProtocolError, match=f"{size}.*over the client's max_reply_size of 100 bytes"):
            for start in range(0, len(stream), 50):
                reader.feed(stream[start : start + 50])
                reader.next()
        reader = ReplyReader(http, max_size=len(body))
        reader.feed(stream)
        if not http or stream is until_end:
            reader.feed(b"")
        assert reader.next().body == body


def test_results_of_the_wrong_kind_and_refused_requests_are_reported(make_server):
    server = with_client_procedures(make_server(max_body_bytes=1000)).start()
    with Client(port=server.port) as client:
        three = client.sum(1, 2)
        for accessor in ("bytes", "numpy", "image"):
            with pytest.raises(ProtocolError, match=r"the result is 3, not bytes \(a base64 string\)"):
                getattr(three, accessor)
        with pytest.raises(ProtocolError, match="not a .npy array") as caught:
            client.echo(b"not npy").numpy
        assert "allow_pickle" not in str(caught.value)  # numpy's advice, for a file one trusts
        with pytest.raises(ProtocolError, match="not an image"):
            client.echo(b"not an image").image
        # A body over the limit is refused with HTTP 413 before any call is read: the
        # error is about the request, and the connection is fine for the next one.
        refused = client.echo("x" * 5000)
        with pytest.raises(RPCError, match="413: request body too large") as caught:
            refused.json
        assert caught.value.code == -32600
        with client.batch() as batch:
            big = batch.echo("y" * 5000)
        with pytest.raises(RPCError, match="413"):
            big.json
        assert client.sum(2, 2).json == 4


@pytest.mark.parametrize("use_http", [True, False])
def test_a_batch_refused_as_a_whole_answers_every_call(make_server, use_http):
    server = with_client_procedures(make_server(max_batch=2)).start()
    calls = [("echo", [i]) for i in range(3)]

    def refused(response: Response) -> None:
        with pytest.raises(RPCError, match="exceeds the limit of 2") as caught:
            response.json
        assert caught.value.code == -32600

    with Client(port=server.port, use_http=use_http) as client:
        with client.batch() as batch:
            collected = [batch.echo(i) for i in range(3)]
            batch.notify("echo", "no response")
        for response in collected:
            refused(response)  # each call, not only the first
        explicit = client([{"method": "echo", "params": [i]} for i in range(3)])
        assert len(explicit) == 3
        for response in explicit:
            refused(response)
        assert client.sum(1, 2).json == 3  # still in step

    async def main() -> None:
        async with AsyncClient(port=server.port, use_http=use_http) as client:
            given = await client.batch(calls)
            assert len(given) == 3
            async with client.batch() as batch:
                collected = [batch.echo(i) for i in range(3)]
            for response in [*given, *collected]:
                refused(response)

    asyncio.run(main())


@pytest.mark.parametrize("use_http", [True, False])
def test_batches_and_pipelining(server, use_http):
    with Client(port=server.port, use_http=use_http) as client:
        with client.batch() as batch:
            first = batch.sum(1, 2)
            batch.notify("echo", "ignored")
            second = batch.echo("x")
            third = batch.fail()
        assert first.json == 3 and second.json == "x"
        with pytest.raises(RPCError):
            third.json
        responses = client.pipeline([("sum", [i, i]) for i in range(20)])
        assert [r.json for r in responses] == [2 * i for i in range(20)]
        batch = client.batch()
        batch.notify("echo", 1)
        assert batch.send() == []


BIG = bytes(range(256)) * 4096  # 1 MiB, 1.4 MB of base64


def recording_server(make_server) -> tuple[ucall.Server, list[int]]:
    """A started server whose `record(data, n)` notes `n` in the list, in the order calls run."""
    seen: list[int] = []
    server = make_server(max_body_bytes=64 << 20)

    @server
    def record(data: bytes, n: int) -> int:
        seen.append(n)
        return len(data) + n

    return server.start(), seen


def test_a_large_pipeline_is_encoded_as_it_is_sent_and_stops_at_a_call_it_cannot_encode(make_server):
    # Past 2 MiB of requests, calls are encoded as the socket takes them; one that cannot
    # be encoded ends the pipeline there (those before it ran, and the connection stays in
    # step). Below that, a call that cannot be encoded stops the pipeline before any is sent.
    server, seen = recording_server(make_server)
    for use_http in (True, False):
        seen.clear()
        with Client(port=server.port, use_http=use_http, timeout=20) as client:
            replies = client.pipeline([("record", [BIG, n]) for n in range(12)])
            assert [r.json for r in replies] == [len(BIG) + n for n in range(12)] and seen == list(range(12))
            seen.clear()
            calls = [("record", [BIG, n]) for n in range(6)] + [("record", [object(), 6])]
            with pytest.raises(TypeError, match="cannot serialize"):
                client.pipeline(calls + [("record", [BIG, 7])])
            assert seen == list(range(6))
            assert client.record(b"ok", 1).json == 3  # in step: the replies to the six were read
            seen.clear()
            with pytest.raises(TypeError, match="cannot serialize"):
                client.pipeline([("record", [b"x", 0]), ("record", [object(), 1])])
            assert client.record(b"", 2).json == 2 and seen == [2]


def test_rich_arguments_and_results(server):
    np = pytest.importorskip("numpy")
    image = pytest.importorskip("PIL.Image")
    with Client(port=server.port) as client:
        assert client.size(b"\x00" * 1000).json == 1000
        assert client.echo(b"abc").bytes == b"abc"
        array = np.arange(6, dtype=np.int16).reshape(2, 3)
        returned = client.echo(array).numpy
        assert returned.dtype == np.int16 and (returned == array).all()
        picture = image.new("RGB", (2, 2), (1, 2, 3))
        assert client.echo(picture).image.getpixel((1, 1)) == (1, 2, 3)


def test_large_arrays_come_back_as_writable_arrays_equal_to_what_was_sent(server):
    np = pytest.importorskip("numpy")
    rng = np.random.default_rng(3)
    arrays = [
        rng.integers(0, 256, (32, 224, 224), dtype=np.uint8),  # 1.6 MB: the native fast path
        rng.integers(0, 256, (33, 224, 224), dtype=np.uint8)[1:],  # contiguous, not at its buffer's start
        rng.integers(0, 256, (64, 4096), dtype=np.uint8)[:, ::2],  # strided: np.save's path
        rng.standard_normal((300, 200)).astype(">f8"),  # big-endian
        np.asfortranarray(rng.standard_normal((256, 257))),  # not C-contiguous: np.save's path
        np.zeros((0, 3), dtype=np.int32),
        np.array(7.5),
    ]
    with Client(port=server.port) as client:
        for array in arrays:
            returned = client.echo(array).numpy
            assert returned.dtype == array.dtype and returned.shape == array.shape
            assert np.array_equal(returned, array)
            returned[...] = 0  # writable, as np.load's arrays are


def test_replies_are_read_by_the_cores_json_and_base64_rules():
    # The core's reader gives what json.loads gives for JSON, and refuses what is not.
    texts = ['{"a": [1, -2.5e3, "\\u00e9\\ud83d\\ude00", null, true]}', "123456789012345678901234567890", '"x"']
    for text in texts:
        assert ucall._ucall.loads(text.encode()) == json.loads(text) == ucall._ucall.loads(text)
    for bad in (b"{", b"NaN", b'{"a": 1} x', b'"\xff"'):  # the last one is not UTF-8
        with pytest.raises(ValueError):
            ucall._ucall.loads(bad)
    # Results are base64 by the rule bytes params follow: padding optional, leftover bits zero.
    assert Response({"jsonrpc": "2.0", "id": 1, "result": "Zm8"}).bytes == b"fo"
    assert Response({"jsonrpc": "2.0", "id": 1, "result": "Zm8="}).bytes == b"fo"
    for bad in ("Zh==", "Zg=", "Z", "Zm8 ", "Zm-_", "é"):
        with pytest.raises(ProtocolError, match="not bytes"):
            Response({"jsonrpc": "2.0", "id": 1, "result": bad}).bytes


def test_large_replies_are_read_as_small_ones_are():
    # Replies of 64 KiB and more are kept as their text and decoded from it when asked
    # (.bytes and .numpy never build the 2 MB str): every reading must match json.loads's.
    payload = bytes(range(256)) * 400  # its base64 has "/" and "+" in it
    text = base64.b64encode(payload).decode()
    escaped = text.replace("/", "\\/")  # as some encoders write "/"
    cases = [
        {"jsonrpc": "2.0", "id": 1, "result": text},
        json.dumps({"jsonrpc": "2.0", "id": 1, "result": "x"})[:-1] + f', "result": "{escaped}"}}',
        {"jsonrpc": "2.0", "id": 1, "result": ["x" * 70000]},
        {"jsonrpc": "2.0", "id": 1, "result": text, "error": {"code": 7, "message": "both"}},
        {"jsonrpc": "2.0", "id": 2, "result": text},
        {"jsonrpc": "2.0", "id": 1, "error": {"code": 5, "message": "big", "data": text}},
    ]
    for case in cases:
        body = case.encode() if isinstance(case, str) else json.dumps(case).encode()
        expected = json.loads(body)
        assert len(body) >= 65536
        reply = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)
        for kind in ("sync", "async"):
            with canned_server(reply) as port:
                if kind == "sync":
                    with Client(port=port) as client:
                        outcome = _outcome(lambda: client.echo())
                else:

                    async def call() -> Any:
                        async with AsyncClient(port=port) as client:
                            return await client.echo()

                    outcome = _outcome(lambda: asyncio.run(call()))
            if expected["id"] != 1:
                assert isinstance(outcome, ProtocolError) and "another request" in str(outcome), (case, kind)
                continue
            assert isinstance(outcome, Response), (outcome, kind)
            assert outcome.data == expected and outcome.ok == ("error" not in expected)
            if "error" in expected:
                with pytest.raises(RPCError) as caught:
                    outcome.bytes
                assert caught.value.code == expected["error"]["code"]
            elif isinstance(expected["result"], str):
                assert outcome.bytes == payload and outcome.json == text
            else:
                with pytest.raises(ProtocolError, match="not bytes"):
                    outcome.bytes


def _outcome(call: Callable[[], Any]) -> Any:
    try:
        return call()
    except Exception as error:  # the outcome compared, whichever it is
        return error


def test_async_calls_are_awaited_gathered_run_as_tasks_and_cancelled(server):
    async def main() -> None:
        async with AsyncClient(port=server.port, timeout=10) as client:
            assert (await client.sum(1, 2)).json == 3
            assert (await asyncio.create_task(client.sum(2, 3))).json == 5
            gathered = await asyncio.gather(*(client.sum(i, i) for i in range(200)))
            assert [r.json for r in gathered] == [2 * i for i in range(200)]
            assert (await asyncio.wait_for(client.call("sum", 3, 4), 10)).json == 7
            # An argument with no JSON form fails where the call is awaited, as a coroutine's would.
            unsent = client.sum(object(), 1)
            with pytest.raises(TypeError, match="cannot serialize"):
                await unsent
            # A task cancelled while its call runs ends cancelled; the connection goes on.
            napping = asyncio.create_task(client.nap(1))
            await asyncio.sleep(0.2)
            napping.cancel()
            with pytest.raises(asyncio.CancelledError):
                await napping
            with pytest.raises(asyncio.TimeoutError):
                await asyncio.wait_for(client.nap(1), 0.2)
            assert (await client.sum(5, 5)).json == 10
            assert (await client.fail()).error is not None

    asyncio.run(main())
    # A call made before any event loop runs is a coroutine that asyncio.run takes.
    client = AsyncClient(port=server.port)
    assert asyncio.run(client.sum(20, 22)).json == 42


def test_large_async_calls_wait_for_room_and_go_in_the_order_they_were_made(make_server):
    # Calls made while megabytes wait to be written are held back unencoded and sent as
    # replies come: every one still runs once, in call order; a cancelled one never runs,
    # one that cannot be encoded fails alone, and a time-out fails those held too.
    # (binary=False: the native transport's flow control is under test; calls with
    # attachments go on the Python transport's connection.)
    server, seen = recording_server(make_server)

    async def main() -> None:
        async with AsyncClient(port=server.port, timeout=20, binary=False) as client:
            calls = [client.record(BIG if n % 3 else b"x", n) for n in range(24)]
            mux = client._mux
            assert mux is not None and len(mux.held) > 10  # most were held, none encoded
            calls[22].cancel()  # held (the last ten are): never sent
            calls.append(client.record(object(), 24))  # cannot be encoded: fails alone
            calls.append(client.record(b"y", 25))
            outcomes = await asyncio.gather(*(c for n, c in enumerate(calls) if n != 22), return_exceptions=True)
            sent = [n for n in range(26) if n not in (22, 24)]
            assert [o.json for o in outcomes if isinstance(o, Response)] == [
                len(BIG if n % 3 else b"x") + n if n < 24 else 1 + n for n in sent
            ]
            assert [type(o) for o in outcomes if not isinstance(o, Response)] == [TypeError]
            assert seen == sent
            assert not mux.held and not mux.waiting

    asyncio.run(main())

    # A server that reads nothing: the socket fills, calls are held, and the time-out
    # fails the held ones with the rest, in time.
    with socket.create_server(("127.0.0.1", 0)) as deaf:
        accepted: list[socket.socket] = []
        threading.Thread(target=lambda: accepted.append(deaf.accept()[0]), daemon=True).start()

        async def unread() -> None:
            async with AsyncClient(port=deaf.getsockname()[1], timeout=1, binary=False) as client:
                started = time.monotonic()
                calls = [client.record(BIG, n) for n in range(40)]
                await asyncio.sleep(0.3)
                assert client._mux is not None and client._mux.held
                outcomes = await asyncio.gather(*calls, return_exceptions=True)
                assert all(isinstance(o, TimeoutError) for o in outcomes), outcomes
                assert time.monotonic() - started < 2.5

        asyncio.run(unread())
        for conn in accepted:
            conn.close()


def test_reconnects_after_the_server_closed(make_server):
    server = make_server(idle_timeout=0.2)
    server.route(lambda: "ok", name="ping")
    server.start()
    with Client(port=server.port) as client:
        assert client.ping().json == "ok"
        time.sleep(0.5)  # the server closes the idle connection
        assert client.ping().json == "ok"


class OneShotHttp:
    """A scripted HTTP/1.1 server on loopback: each connection runs `script(conn, self)`;
    `requests` counts the requests read, `connections` the connections accepted."""

    def __init__(self, script):
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.listener.settimeout(0.1)
        self.stopped = False
        self.port = self.listener.getsockname()[1]
        self.requests = self.connections = 0
        self.script = script
        self.notes: list[str] = []
        self.thread = threading.Thread(target=self.serve, daemon=True)
        self.thread.start()

    def serve(self):
        while not self.stopped:
            try:
                conn, _ = self.listener.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            self.connections += 1
            with conn:
                conn.settimeout(5)
                self.script(conn, self)

    def read_request(self, conn) -> bytes:
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = conn.recv(65536)
            if not chunk:
                return b""
            data += chunk
        head, _, body = data.partition(b"\r\n\r\n")
        length = int(next(line.split(b":")[1] for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")))
        while len(body) < length:
            body += conn.recv(65536)
        self.requests += 1
        return body

    @staticmethod
    def reply(conn, request: bytes, result) -> None:
        body = json.dumps({"jsonrpc": "2.0", "id": json.loads(request)["id"], "result": result}).encode()
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))

    def close(self):
        self.stopped = True
        self.thread.join(5)
        self.listener.close()


def test_a_call_the_server_may_have_run_is_not_sent_again():
    def script(conn, server):
        if server.connections > 1:
            server.read_request(conn)  # a second attempt: the bug this test is about
            return
        server.reply(conn, server.read_request(conn), "first")
        server.read_request(conn)  # read, maybe run, then the connection is lost

    server = OneShotHttp(script)
    try:
        with Client(port=server.port, timeout=5) as client:
            assert client.transfer(amount=1).json == "first"
            with pytest.raises(TransportError, match="may have run"):
                client.transfer(amount=2)
        time.sleep(0.2)
        assert (server.requests, server.connections) == (2, 1)
    finally:
        server.close()


def test_a_connection_the_server_closed_is_not_used_for_the_next_call():
    def script(conn, server):
        request = server.read_request(conn)
        server.reply(conn, request, server.connections)
        if server.connections == 1:
            conn.shutdown(socket.SHUT_WR)  # as an idle time-out does
            server.notes.append("sent into a closed connection" if conn.recv(65536) else "clean")

    server = OneShotHttp(script)
    try:
        with Client(port=server.port, timeout=5) as client:
            assert client.ping().json == 1
            time.sleep(0.2)  # the close reaches the client
            assert client.ping().json == 2
        time.sleep(0.2)
        assert server.notes == ["clean"]
        assert (server.requests, server.connections) == (2, 2)
    finally:
        server.close()


@pytest.mark.parametrize("use_http", [True, False])
def test_a_server_at_its_connection_limit_is_named_as_the_likely_cause(make_server, use_http):
    """A server at `max_connections` closes a new connection at once; the client says that
    this is the likely reason, rather than only that a connection was lost."""
    server = make_server(max_connections=1)
    server.route(lambda: "ok", name="ping")
    server.start()
    with Client(port=server.port, use_http=use_http, timeout=5) as first:
        assert first.ping().json == "ok"  # holds the one connection
        with Client(port=server.port, use_http=use_http, timeout=5) as second:
            with pytest.raises(TransportError, match=r"closed a new connection before replying .*max_connections"):
                second.ping()
        assert first.ping().json == "ok"


def test_errors_without_a_server():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with pytest.raises(ConnectError):
        Client(port=port).sum(1, 2)


def test_time_out(server):
    with Client(port=server.port, timeout=0.1) as client:
        with pytest.raises(TimeoutError):
            client.nap(1.0)
        client.timeout = 5
        assert client.sum(1, 2).json == 3


def test_protocol_errors_are_reported():
    with canned_server(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nnope!") as port:
        with pytest.raises(ProtocolError):
            Client(port=port).sum(1, 2)


def test_reply_reader_frames_every_way():
    reader = ReplyReader(http=True)
    chunked = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\n{\"a\r\n4;x=1\r\n\":1}\r\n0\r\n\r\n"
    plain = b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n[]"
    for byte in chunked + plain + b"HTTP/1.1 204 No Content\r\n\r\n":
        reader.feed(bytes([byte]))
    assert [r.body for r in iter(reader.next, None)] == [b'{"a":1}', b"[]", b""]
    reader = ReplyReader(http=True)
    reader.feed(b"HTTP/1.0 200 OK\r\n\r\n{\"x\":1}")
    assert reader.next() is None
    reader.feed(b"")
    assert reader.next().body == b'{"x":1}'
    reader = ReplyReader(http=False)
    reader.feed(b'{"s":"}\\"]"}\n[1,[2]] "str" 42\n')
    assert [r.body for r in iter(reader.next, None)] == [b'{"s":"}\\"]"}', b"[1,[2]]", b'"str"', b"42"]
    reader.feed(b'{"a":')
    assert reader.next() is None
    reader.feed(b"")
    with pytest.raises(ProtocolError):
        reader.next()


@pytest.mark.parametrize("use_http", [True, False])
def test_async_client(server, use_http):
    async def main() -> None:
        async with AsyncClient(port=server.port, use_http=use_http) as client:
            assert (await client.sum(1, 2)).json == 3
            started = time.monotonic()
            results = await asyncio.gather(*(client.anap(i) for i in range(50)))
            assert [r.json for r in results] == list(range(50))
            assert time.monotonic() - started < 2
            assert await client.notify("echo", 1) is None
            responses = await client.batch([("sum", [1, 2]), ("echo", ["y"])])
            assert [r.json for r in responses] == [3, "y"]
            async with client.batch() as batch:  # the same surface as Client's
                first, second = batch.sum(1, 2), batch.echo("z")
                batch.notify("echo", 0)
            assert (first.json, second.json) == (3, "z")
            piped = await client.pipeline([("sum", [i, 1]) for i in range(20)] + [("echo", ["end"])])
            assert [r.json for r in piped] == [*range(1, 21), "end"]
            assert (await client({"method": "sum", "params": {"a": 2, "b": 2}})).json == 4
            with pytest.raises(RPCError):
                (await client.fail()).json

    asyncio.run(main())


def test_a_websocket_close_frame_is_reported_with_its_code():
    reader = WebSocketReader("127.0.0.1", 8545, "/", secure=False)
    server = ServerProtocol()
    server.receive_data(reader.handshake())
    server.send_response(server.accept(server.events_received()[0]))
    server.send_close(1001, "going away")
    reader.feed(b"".join(server.data_to_send()))
    assert reader.opened and reader.ended and reader.next() is None
    assert reader.why == " (WebSocket close code 1001: going away)"


def test_a_websocket_reader_knows_what_a_large_frame_still_needs():
    """``WebSocketReader.wanted``: once a frame's header has come, the bytes its payload
    still needs, so that a large message comes in few reads (calls and streams read that
    many, not 64 KiB at a time); before, the header's rest; 0 between frames."""
    reader = WebSocketReader("127.0.0.1", 8545, "/", secure=False)
    server = ServerProtocol()
    server.receive_data(reader.handshake())
    server.send_response(server.accept(server.events_received()[0]))
    reader.feed(b"".join(server.data_to_send()))
    assert reader.opened and reader.wanted() == 0
    server.send_binary(bytes(1_000_000))
    frame = b"".join(server.data_to_send())
    reader.feed(frame[:1])
    assert reader.wanted() < 14, "only the header's rest is known"
    reader.feed(frame[1:5000])
    assert reader.wanted() == len(frame) - 5000
    reader.feed(frame[5000:])
    assert reader.next() is not None and reader.wanted() == 0


# ------------------------------------------------------------ client certificates (mutual TLS)


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    """The TLS suite's CAs and server certificate, and client certificates made at test
    time: ``client.pem`` signed by ``ca.pem``, ``stranger.pem`` by ``other-ca.pem`` (which
    the server does not trust), and ``encrypted.key``, the client's key under a password."""
    directory = make_certs(tmp_path_factory.mktemp("certs"))
    (directory / "client.ext").write_text(
        "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage=clientAuth\n"
    )
    for name, ca in (("client", "ca"), ("stranger", "other-ca")):
        key, csr, cert = (str(directory / f"{name}.{ext}") for ext in ("key", "csr", "pem"))
        openssl(
            "req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", key,
            "-out", csr, "-subj", f"/CN=ucall test {name}",
        )
        openssl(
            "x509", "-req", "-in", csr, "-CA", str(directory / f"{ca}.pem"), "-CAkey", str(directory / f"{ca}.key"),
            "-CAcreateserial", "-out", cert, "-days", "1", "-extfile", str(directory / "client.ext"),
        )
    openssl(
        "pkey", "-in", str(directory / "client.key"), "-aes256", "-passout", "pass:secret",
        "-out", str(directory / "encrypted.key"),
    )
    return directory


@pytest.fixture
def mtls_server(make_server, certs):
    """A server whose port speaks TLS and requires a client certificate signed by ca.pem."""
    pem = {name: str(certs / f"{file}.pem") for name, file in (("tls_cert", "cert"), ("tls_client_ca", "ca"))}
    return with_client_procedures(make_server(tls_key=str(certs / "key.pem"), **pem)).start()


def test_the_cli_presents_a_client_certificate(mtls_server, certs):
    from click.testing import CliRunner

    from ucall.cli import main

    def run(*args: object) -> tuple[int, str, str]:
        result = CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)
        return result.exit_code, result.stdout, result.stderr

    call = ("sum", "a=1", "b=2", "-p", mtls_server.port, "--cacert", certs / "ca.pem", "--format", "json")
    assert run(*call, "--cert", certs / "client.pem", "--key", certs / "client.key")[:2] == (0, "3\n")
    code, _, err = run(*call)
    assert code == 2 and "requires a client certificate it trusts" in err, err
    code, _, err = run(*call, "-E", certs / "client.pem", "--key", certs / "key.pem")
    assert code == 2 and "does not match the certificate" in err, err


def test_a_client_certificate_is_presented(mtls_server, certs):
    port, ca = mtls_server.port, certs / "ca.pem"
    mine = {"tls_cert": certs / "client.pem", "tls_key": str(certs / "client.key")}
    for use_http in (True, False):
        with Client(port=port, use_http=use_http, cacert=ca, **mine) as client:
            assert client.tls and client.sum(1, 2).json == 3
    with Client(f"wss://localhost:{port}", cacert=ca, **mine) as client:
        assert client.sum(2, 2).json == 4
    combined = certs / "combined.pem"  # the key in the certificate's file: tls_cert= alone
    combined.write_bytes((certs / "client.pem").read_bytes() + (certs / "client.key").read_bytes())
    with Client(port=port, cacert=ca, tls_cert=combined) as client:
        assert client.sum(3, 3).json == 6
    with ClientTLS(port=port, allow_self_signed=True, **mine) as client:
        assert client.sum(4, 4).json == 8

    async def asynchronous() -> None:
        async with AsyncClient(port=port, cacert=ca, **mine) as client:
            assert [r.json for r in await asyncio.gather(*(client.sum(i, 1) for i in range(10)))] == list(range(1, 11))
        async with AsyncClient(f"wss://localhost:{port}", cacert=ca, **mine) as client:
            assert (await client.sum(5, 5)).json == 10

    asyncio.run(asynchronous())


def test_a_handler_reads_the_client_certificates_subject(make_server, certs):
    pem = {name: str(certs / f"{file}.pem") for name, file in (("tls_cert", "cert"), ("tls_client_ca", "ca"))}
    server = make_server(tls_key=str(certs / "key.pem"), tls_port=0, **pem)

    @server
    def whoami(ctx: ucall.Context) -> Optional[str]:
        return ctx.tls_subject

    server.start()
    mine = {"tls_cert": certs / "client.pem", "tls_key": str(certs / "client.key"), "cacert": certs / "ca.pem"}
    for use_http in (True, False):
        with Client(port=server.tls_port, use_http=use_http, **mine) as client:
            assert client.whoami().json == "CN=ucall test client"
    with Client(f"wss://localhost:{server.tls_port}", **mine) as client:
        assert client.whoami().json == "CN=ucall test client"
    with Client(port=server.port) as plaintext:  # the plaintext port: no certificate
        assert plaintext.whoami().json is None


@pytest.mark.parametrize("given", ["none", "untrusted"])
def test_a_client_without_a_trusted_certificate_is_refused(mtls_server, certs, given):
    port, ca = mtls_server.port, certs / "ca.pem"
    mine = {"tls_cert": certs / "stranger.pem", "tls_key": certs / "stranger.key"} if given == "untrusted" else {}
    refused = rf"^127\.0\.0\.1:{port} requires a client certificate it trusts \(tls_cert=, tls_key=\): \w"
    for use_http in (True, False):  # TLS 1.3: the server's alert comes after the handshake
        with pytest.raises(ConnectError, match=refused):
            Client(port=port, use_http=use_http, cacert=ca, **mine).sum(1, 2)
    with pytest.raises(ConnectError, match=refused):
        Client(f"wss://127.0.0.1:{port}", cacert=ca, **mine).sum(1, 2)
    if given == "none":  # TLS 1.2: during the handshake
        context = ssl.create_default_context(cafile=str(ca))
        context.maximum_version = ssl.TLSVersion.TLSv1_2
        with pytest.raises(ConnectError, match=refused):
            Client(port=port, ssl_context=context).sum(1, 2)

    async def asynchronous() -> None:
        with pytest.raises(ConnectError, match=refused):
            await AsyncClient(port=port, cacert=ca, **mine).sum(1, 2)
        with pytest.raises(ConnectError, match=refused):
            await AsyncClient(f"wss://127.0.0.1:{port}", cacert=ca, **mine).sum(1, 2)

    asyncio.run(asynchronous())


def test_client_certificate_errors_name_the_file(certs, tmp_path):
    cert, key = certs / "client.pem", certs / "client.key"
    with pytest.raises(FileNotFoundError, match="client certificate file .*missing.pem: No such file"):
        Client(tls_cert=tmp_path / "missing.pem", tls_key=key)
    with pytest.raises(FileNotFoundError, match="client key file .*missing.key: No such file"):
        AsyncClient(tls_cert=cert, tls_key=tmp_path / "missing.key")
    junk = tmp_path / "junk.txt"
    junk.write_text("not PEM\n")
    with pytest.raises(ValueError, match="client certificate file .*junk.txt: no PEM certificate in it"):
        Client(tls_cert=junk, tls_key=key)
    with pytest.raises(ValueError, match="client key file .*junk.txt: no PEM private key in it"):
        Client(tls_cert=cert, tls_key=junk)
    with pytest.raises(ValueError, match=r"client certificate file .*client.pem \(and no tls_key=\): no PEM private key"):
        Client(tls_cert=cert)
    with pytest.raises(ValueError, match="client key file .*stranger.key does not match the certificate in .*client.pem"):
        ClientTLS(tls_cert=cert, tls_key=certs / "stranger.key")
    with pytest.raises(ValueError, match="client key file .*encrypted.key is encrypted"):  # rather than a prompt
        Client(tls_cert=cert, tls_key=certs / "encrypted.key")
    with pytest.raises(ValueError, match="tls_key= needs the certificate"):
        Client(tls_key=key)
    with pytest.raises(ValueError, match="ssl_context= is used as given"):
        Client(ssl_context=ssl.create_default_context(), tls_cert=cert, tls_key=key)
    with pytest.raises(ValueError, match="plaintext"):
        AsyncClient("ws://127.0.0.1:8545", tls_cert=cert, tls_key=key)
    with pytest.raises(ValueError, match="tls=False"):
        Client(tls=False, tls_cert=cert, tls_key=key)
    assert Client(tls_cert=cert, tls_key=key).tls  # tls_cert= turns TLS on, as cacert= does
