# SPDX-License-Identifier: Apache-2.0
"""ucall.client after the server closed the connection between calls: a restarted server,
an idle time-out. The next call goes on a new connection; a call the server may have run
is not sent again."""

import asyncio
import socket
import time

import pytest
from test_client import OneShotHttp
from test_client_tls import make_certs

from ucall import TransportError
from ucall.client import AsyncClient, Client

SCHEMES = ["http", "tcp", "ws", "https", "wss"]


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    return make_certs(tmp_path_factory.mktemp("certs"))


class Restartable:
    """A ping server that can be stopped and started again on the same port."""

    def __init__(self, make_server, scheme, certs):
        tls = {"tls_cert": str(certs / "cert.pem"), "tls_key": str(certs / "key.pem")} if scheme in ("https", "wss") else {}
        self.make_server, self.options, self.scheme, self.certs = make_server, tls, scheme, certs
        self.server = self.start(0)
        self.port = self.server.port

    def start(self, port):
        server = self.make_server(port=port, **self.options)
        server.route(lambda: "ok", name="ping")
        return server.start()

    def restart(self):
        self.server.stop()
        self.server = self.start(self.port)

    def client_options(self):
        if self.scheme in ("ws", "wss"):
            options = {"uri": f"{self.scheme}://127.0.0.1:{self.port}"}
        else:
            options = {"port": self.port, "use_http": self.scheme != "tcp", "tls": self.scheme == "https"}
        if self.options:
            options["cacert"] = self.certs / "ca.pem"
        return {**options, "timeout": 10}


@pytest.mark.parametrize("scheme", SCHEMES)
def test_client_reconnects_after_a_restart(make_server, certs, scheme):
    server = Restartable(make_server, scheme, certs)
    with Client(**server.client_options()) as client:
        assert client.ping().json == "ok"
        server.restart()
        assert client.ping().json == "ok"


@pytest.mark.parametrize("scheme", SCHEMES)
def test_async_client_reconnects_after_a_restart(make_server, certs, scheme):
    """No await between the restart and the call: the loop has not seen the close."""
    server = Restartable(make_server, scheme, certs)

    async def main() -> None:
        async with AsyncClient(**server.client_options()) as client:
            assert (await client.ping()).json == "ok"
            server.restart()
            assert (await client.ping()).json == "ok"
            server.restart()
            responses = await asyncio.gather(*(client.ping() for _ in range(5)))  # in flight together
            assert [r.json for r in responses] == ["ok"] * 5

    asyncio.run(main())


def test_async_client_reconnects_after_an_idle_time_out(make_server):
    server = make_server(idle_timeout=0.2)
    server.route(lambda: "ok", name="ping")
    server.start()

    async def main() -> None:
        async with AsyncClient(port=server.port, timeout=10) as client:
            assert (await client.ping()).json == "ok"
            time.sleep(0.5)  # the server closes the idle connection; the loop does not run
            assert (await client.ping()).json == "ok"
            await asyncio.sleep(0.5)  # the loop runs and sees the close
            assert (await client.ping()).json == "ok"

    asyncio.run(main())


def test_async_client_does_not_send_into_a_connection_the_server_closed():
    def script(conn, server):
        server.reply(conn, server.read_request(conn), server.connections)
        if server.connections == 1:
            time.sleep(0.1)  # after the reply has reached the client's loop
            conn.shutdown(socket.SHUT_WR)  # as an idle time-out does
            server.notes.append("sent into a closed connection" if conn.recv(65536) else "clean")

    server = OneShotHttp(script)

    async def main() -> None:
        async with AsyncClient(port=server.port, timeout=5) as client:
            assert (await client.ping()).json == 1
            time.sleep(0.3)  # the close reaches the client; the loop does not run
            assert (await client.ping()).json == 2

    try:
        asyncio.run(main())
        time.sleep(0.2)
        assert server.notes == ["clean"]
        assert (server.requests, server.connections) == (2, 2)
    finally:
        server.close()


def test_async_client_does_not_send_again_a_call_the_server_may_have_run():
    def script(conn, server):
        if server.connections > 1:
            server.read_request(conn)  # a second attempt: what this test rules out
            return
        server.reply(conn, server.read_request(conn), "first")
        server.read_request(conn)  # read, maybe run, then the connection is lost

    server = OneShotHttp(script)

    async def main() -> None:
        async with AsyncClient(port=server.port, timeout=5) as client:
            assert (await client.transfer(amount=1)).json == "first"
            with pytest.raises(TransportError, match="closed"):
                await client.transfer(amount=2)

    try:
        asyncio.run(main())
        time.sleep(0.2)
        assert (server.requests, server.connections) == (2, 1)
    finally:
        server.close()


def test_a_late_reader_does_not_fail_the_next_connection_s_calls(make_server):
    """After a time-out drops the connection, its reader must not fail the calls made on the
    connection opened next."""
    server = make_server()
    server.route(lambda seconds: time.sleep(seconds) or seconds, name="nap")
    server.route(lambda: "ok", name="ping")
    server.start()

    async def main() -> None:
        async with AsyncClient(port=server.port, timeout=0.2) as client:
            with pytest.raises(TimeoutError):
                await client.nap(1.0)
            client.timeout = 10
            assert (await client.ping()).json == "ok"
            assert [r.json for r in await asyncio.gather(*(client.ping() for _ in range(5)))] == ["ok"] * 5

    asyncio.run(main())

