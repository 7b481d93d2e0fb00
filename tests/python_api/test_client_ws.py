# SPDX-License-Identifier: Apache-2.0
"""ucall.client and the `ucall` command over WebSocket (ws:// and wss://), against Python
Servers on loopback, and against a websockets server that fragments and pings."""

import asyncio
import json
import os
import queue
import socket
import threading
import time

import pytest
from click.testing import CliRunner
from conftest import ENGINES, canned_server, with_client_procedures
from test_client_tls import make_certs, tls_server
from websockets.frames import Frame, Opcode
from websockets.server import ServerProtocol
from websockets.sync.server import serve

from ucall import ConnectError, ProtocolError, RPCError
from ucall.cli import main
from ucall.client import AsyncClient, Client, Response

BIG = os.urandom(1_600_000)


@pytest.fixture
def server(make_server):
    return with_client_procedures(make_server()).start()


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    return make_certs(tmp_path_factory.mktemp("certs"))


@pytest.fixture(scope="module", params=ENGINES)
def secure(certs, request):
    server = tls_server(certs, request.param)
    try:
        yield server
    finally:
        server.stop()


def test_calls_over_ws(server):
    with Client(f"ws://127.0.0.1:{server.port}") as client:
        assert client.websocket and not client.tls and client.url == f"ws://127.0.0.1:{server.port}/"
        assert client.sum(a=1, b=2).json == 3
        assert client.sum(1, 2).json == 3
        response = client({"method": "sum", "params": [5, 6]})
        assert isinstance(response, Response) and response.json == 11
        assert client.echo(2**80).json == 2**80
        with pytest.raises(RPCError) as caught:
            client.fail().json
        assert caught.value.code == -32001 and caught.value.data == {"why": "asked"}
        assert client.nope().error.code == -32601
        assert client.notify("echo", 1) is None  # no reply comes, and none is waited for
        assert client.sum(1, 1).json == 2  # still in step after the notification
        assert len({client.sum(1, 1).id for _ in range(5)}) == 5
    with Client("ws://127.0.0.1/rpc", port=server.port) as client:  # the port argument when the URL has none
        assert client.path == "/rpc" and client.sum(2, 2).json == 4


def test_batches_and_pipelining_over_ws(server):
    with Client(f"ws://127.0.0.1:{server.port}/") as client:
        with client.batch() as batch:
            first = batch.sum(1, 2)
            batch.notify("echo", "ignored")
            second = batch.echo("x")
            third = batch.fail()
        assert first.json == 3 and second.json == "x"
        with pytest.raises(RPCError):
            third.json
        batch = client.batch()
        batch.notify("echo", 1)
        batch.notify("echo", 2)
        assert batch.send() == []  # a batch of notifications has no reply
        refused = client([])  # an empty batch is answered with one error
        assert len(refused) == 1 and refused[0].error.code == -32600
        responses = client.pipeline([("sum", [i, i]) for i in range(50)])
        assert [r.json for r in responses] == [2 * i for i in range(50)]


def test_large_echo_over_ws(server):
    with Client(f"ws://127.0.0.1:{server.port}") as client:
        assert client.echo(BIG).bytes == BIG
        assert client.sum(1, 2).json == 3


def test_reconnects_after_the_server_closed(make_server):
    server = make_server(idle_timeout=0.2)
    server.route(lambda: "ok", name="ping")
    server.start()
    with Client(f"ws://127.0.0.1:{server.port}") as client:
        assert client.ping().json == "ok"
        time.sleep(0.5)  # the server closes the idle connection
        assert client.ping().json == "ok"


def test_async_client_over_ws(server):
    async def asynchronous() -> None:
        async with AsyncClient(f"ws://127.0.0.1:{server.port}") as client:
            assert (await client.sum(1, 2)).json == 3
            started = time.monotonic()
            responses = await asyncio.gather(*(client.anap(i) for i in range(200)))
            assert [r.json for r in responses] == list(range(200))
            assert time.monotonic() - started < 3  # in flight together: 200 x 50 ms one by one is 10 s
            mixed = await asyncio.gather(*(client.sum(i, 1) if i % 2 else client.echo(i) for i in range(100)))
            assert [r.json for r in mixed] == [i + 1 if i % 2 else i for i in range(100)]
            assert await client.notify("echo", 1) is None
            responses = await client.batch([("sum", [1, 2]), ("echo", ["y"])])
            assert [r.json for r in responses] == [3, "y"]
            assert (await client({"method": "sum", "params": {"a": 2, "b": 2}})).json == 4
            with pytest.raises(RPCError):
                (await client.fail()).json
            assert (await client.echo(BIG)).bytes == BIG

    asyncio.run(asynchronous())


def test_wss(secure, certs):
    url = f"wss://localhost:{secure.port}/"
    with Client(url, cacert=certs / "ca.pem") as client:
        assert client.tls and client.websocket
        assert client.sum(1, 2).json == 3
        assert client._native.tls_info()[0] == "http/1.1"
        assert client.notify("echo", 1) is None
        with client.batch() as batch:
            first, second = batch.sum(1, 2), batch.sum(3, 4)
        assert (first.json, second.json) == (3, 7)
        assert client.echo(BIG).bytes == BIG
        client.close()
        assert client.sum(2, 2).json == 4 and client._native.tls_info()[1]  # resumed
    with Client(f"wss://127.0.0.1:{secure.port}", insecure=True) as client:
        assert client.sum(2, 3).json == 5
    with pytest.raises(ConnectError, match="cannot verify the TLS certificate"):
        Client(url).sum(1, 2)

    async def asynchronous() -> None:
        async with AsyncClient(url, cacert=certs / "ca.pem") as client:
            responses = await asyncio.gather(*(client.anap(i) for i in range(100)))
            assert [r.json for r in responses] == list(range(100))
            assert (await client.echo(BIG)).bytes == BIG
        with pytest.raises(ConnectError, match="cannot verify the TLS certificate"):
            await AsyncClient(url).sum(1, 2)

    asyncio.run(asynchronous())


def test_ws_options_are_checked(certs):
    with pytest.raises(ValueError, match="plaintext"):
        Client("ws://127.0.0.1:8545", cacert=certs / "ca.pem")
    with pytest.raises(ValueError, match="contradicts"):
        Client("ws://127.0.0.1:8545", tls=True)
    with pytest.raises(ValueError, match="raw TCP"):
        AsyncClient("wss://127.0.0.1:8545", use_http=False)


def test_fragmented_replies_and_pings():
    """A server that pings before each reply and sends the reply in fragments: the client
    answers every ping and puts each message together."""
    pongs: queue.Queue[list[bool]] = queue.Queue()

    def handler(connection) -> None:  # type: ignore[no-untyped-def]
        waiting = []
        for message in connection:
            request = json.loads(message)
            waiting.append(connection.ping(f"ping {request['id']}".encode()))
            reply = json.dumps({"jsonrpc": "2.0", "id": request["id"], "result": request["params"]})
            connection.send(reply[i : i + 7] for i in range(0, len(reply), 7))
        pongs.put([event.wait(5) for event in waiting])  # the pongs came before the client's close

    with serve(handler, "127.0.0.1", 0) as ws_server:
        thread = threading.Thread(target=ws_server.serve_forever)
        thread.start()
        try:
            port = ws_server.socket.getsockname()[1]
            with Client(f"ws://127.0.0.1:{port}", timeout=10) as client:
                assert client.echo("a long enough text to need several fragments").json == [
                    "a long enough text to need several fragments"
                ]
                assert client.echo(1, 2).json == [1, 2]

            async def asynchronous() -> None:
                async with AsyncClient(f"ws://127.0.0.1:{port}", timeout=10) as client:
                    responses = await asyncio.gather(*(client.echo(i) for i in range(20)))
                    assert [r.json for r in responses] == [[i] for i in range(20)]

            asyncio.run(asynchronous())
            assert pongs.get(timeout=10) == [True] * 2
            assert pongs.get(timeout=10) == [True] * 20
        finally:
            ws_server.shutdown()
            thread.join(10)


def test_a_close_frame_behind_a_reply():
    """The first connection's reply comes with the server's closing frame in one write:
    the next call opens a new connection instead of writing to the closed one."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    accepted = []

    def serve_connections() -> None:
        for closing in (True, False):
            conn, _ = listener.accept()
            conn.settimeout(10)
            accepted.append(conn)
            protocol = ServerProtocol()
            while True:
                data = conn.recv(65536)
                if not data:
                    break
                protocol.receive_data(data)
                for event in protocol.events_received():
                    if not isinstance(event, Frame):
                        protocol.send_response(protocol.accept(event))
                    elif event.opcode is Opcode.TEXT:
                        request = json.loads(event.data)
                        reply = {"jsonrpc": "2.0", "id": request["id"], "result": closing}
                        protocol.send_text(json.dumps(reply).encode())
                        if closing:
                            protocol.send_close(1001, "going away")
                conn.sendall(b"".join(protocol.data_to_send()))
                if protocol.close_expected() or closing and protocol.close_sent:
                    break
            conn.close()

    thread = threading.Thread(target=serve_connections)
    thread.start()
    try:
        with Client(f"ws://127.0.0.1:{listener.getsockname()[1]}", timeout=10) as client:
            assert client.first().json is True
            assert client.second().json is False
            assert client.third().json is False
    finally:
        thread.join(10)
        listener.close()
    assert len(accepted) == 2


def test_a_refused_upgrade_is_reported():
    with canned_server(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n") as port:
        with pytest.raises(ProtocolError, match="refused the WebSocket upgrade.*404"):
            Client(f"ws://127.0.0.1:{port}", timeout=10).sum(1, 2)


@pytest.mark.parametrize("sends", [b"", b"\x15\x03\x03\x00\x02\x02\x46"], ids=["nothing", "a TLS alert"])
def test_a_connection_closed_during_the_upgrade_is_reported(sends):
    """A server that closes before it answers the upgrade (a TLS port sends an alert,
    then closes): both clients report it at once, rather than reading the end forever."""

    async def call_async(port: int) -> None:
        async with AsyncClient(f"ws://127.0.0.1:{port}", timeout=10) as client:
            await client.sum(1, 2)

    with canned_server(sends, connections=2) as port:
        started = time.monotonic()
        with pytest.raises(ProtocolError, match="closed during the WebSocket handshake.*wss://"):
            Client(f"ws://127.0.0.1:{port}", timeout=10).sum(1, 2)
        with pytest.raises(ProtocolError, match="closed during the WebSocket handshake"):
            asyncio.run(call_async(port))
        assert time.monotonic() - started < 5


def run(*args: object) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)
    return result.exit_code, result.stdout, result.stderr


def test_cli_over_ws(server, secure, certs):
    code, out, err = run("sum", "a=1", "b=2", "--uri", f"ws://127.0.0.1:{server.port}")
    assert code == 0 and json.loads(out) == {"jsonrpc": "2.0", "id": 1, "result": 3}, err
    by_position = ("sum", "--positional", "40", "2", "--format", "json")
    code, out, err = run(*by_position, "--uri", "ws://127.0.0.1", "-p", server.port)  # the port from -p
    assert (code, out.strip()) == (0, "42"), err
    code, out, err = run("fail", "--uri", f"ws://127.0.0.1:{server.port}")
    assert code == 1 and "-32001" in err
    code, out, err = run("sum", "a=2", "b=2", "--uri", f"wss://localhost:{secure.port}", "--cacert", certs / "ca.pem")
    assert code == 0 and json.loads(out)["result"] == 4, err
    code, out, err = run("sum", "a=2", "b=2", "--uri", f"wss://127.0.0.1:{secure.port}", "--insecure")
    assert code == 0 and json.loads(out)["result"] == 4, err
    code, _, err = run("sum", "a=2", "b=2", "--uri", f"wss://127.0.0.1:{secure.port}")
    assert code == 2 and "cannot verify the TLS certificate" in err and "--cacert" in err
    code, _, err = run("sum", "a=1", "--uri", f"ws://127.0.0.1:{server.port}", "--tcp")
    assert code == 2 and "raw TCP" in err
