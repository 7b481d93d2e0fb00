# SPDX-License-Identifier: Apache-2.0
"""What a new user reaches for first: ucall.testing.TestClient, calling a server behind
ucall.auth (headers from Client, AsyncClient and `ucall call -H`), the same URIs as
@ucall/client (tcp://, tls://), `KEY:numpy=FILE.npy` on the command line, and the
submodules the docs name after `import ucall`."""

from __future__ import annotations

import asyncio
import socket
import subprocess
import sys
import threading
import urllib.request

import pytest
from click.testing import CliRunner
from conftest import REPO_ROOT, with_client_procedures

import ucall
from ucall import RPCError, Server
from ucall.cli import main
from ucall.client import AsyncClient, Client
from ucall.testing import TestClient


def guarded(make_server, **options):  # type: ignore[no-untyped-def]
    server = with_client_procedures(make_server(**options))
    server.middleware(ucall.auth.api_key("s3cret"))
    return server


# ------------------------------------------------------------------ import ucall


def test_the_submodules_the_docs_name_work_after_import_ucall() -> None:
    code = (
        "import ucall\n"
        "assert callable(ucall.auth.api_key) and callable(ucall.auth.bearer)\n"
        "assert ucall.client.Client and ucall.testing.TestClient and ucall.posix.Server\n"
        "try:\n"
        "    ucall.nothing_here\n"
        "except AttributeError as e:\n"
        "    assert 'nothing_here' in str(e)\n"
        "else:\n"
        "    raise AssertionError('no AttributeError')\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr


# ------------------------------------------------------------------ TestClient


def test_test_client_serves_on_a_free_port_and_stops(engine: str) -> None:
    server = Server(port=8545, engine=engine)

    @server
    def sum(a: int, b: int) -> int:
        return a + b

    with TestClient(server) as client:
        assert client.sum(a=1, b=2).json == 3
        assert server.running and server.port != 8545
        port = server.port
    assert not server.running
    with socket.socket() as probe:
        assert probe.connect_ex(("127.0.0.1", port)) != 0  # nothing listens there any more
    with TestClient(server) as client:  # again: the server started anew
        assert client.sum(1, 2).json == 3


@pytest.mark.parametrize("transport", ["http", "tcp", "ws"])
def test_test_client_speaks_each_transport(make_server, transport: str) -> None:
    server = with_client_procedures(make_server())
    with TestClient(server, transport=transport) as client:
        assert client.sum(a=2, b=3).json == 5
        assert client.url.split("://")[0] == transport


def test_test_client_leaves_a_running_server_running(make_server) -> None:
    server = with_client_procedures(make_server()).start()
    with TestClient(server) as client:
        assert client.sum(1, 2).json == 3
    assert server.running


def test_test_client_refuses_what_it_cannot_serve() -> None:
    with pytest.raises(TypeError, match="ucall.Server"):
        TestClient(object())  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="transport must be one of"):
        TestClient(Server(port=0), transport="udp")


def test_the_test_client_example_in_the_docs_runs(tmp_path) -> None:
    # docs/python.md's pytest example, as a user's test file, run by pytest.
    text = (REPO_ROOT / "docs" / "python.md").read_text()
    block = text.split("```python\n# test_app.py\n", 1)[1].split("```", 1)[0]
    (tmp_path / "test_app.py").write_text(block)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path / "test_app.py")],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert done.returncode == 0 and "2 passed" in done.stdout, done.stdout + done.stderr


# ------------------------------------------------------------------ headers


def test_a_client_with_the_key_calls_a_guarded_server(make_server) -> None:
    server = guarded(make_server).start()
    with Client(port=server.port) as anonymous:
        with pytest.raises(RPCError, match="an API key is required"):
            anonymous.sum(1, 2).json
    with Client(port=server.port, headers={"X-API-Key": "wrong"}) as wrong:
        with pytest.raises(RPCError, match="the API key is not valid"):
            wrong.sum(1, 2).json
    with Client(port=server.port, headers={"X-API-Key": "s3cret"}) as client:
        assert [client.sum(i, 1).json for i in range(3)] == [1, 2, 3]  # on every request
        assert client.pipeline([("sum", [1, 1])] * 3)[2].json == 2


def test_headers_go_with_the_websocket_upgrade(make_server) -> None:
    server = guarded(make_server).start()
    with Client(f"ws://127.0.0.1:{server.port}/", headers={"X-API-Key": "s3cret"}) as client:
        assert client.sum(1, 2).json == 3
        assert client.sum(2, 2).json == 4
    with Client(f"ws://127.0.0.1:{server.port}/") as anonymous:
        with pytest.raises(RPCError, match="an API key is required"):
            anonymous.sum(1, 2).json


def test_headers_on_pythons_own_transport_too(make_server) -> None:
    # A client given an ssl_context (or a stream, or an upload with progress) runs on Python's sockets.
    server = guarded(make_server).start()
    with Client(port=server.port, headers={"X-API-Key": "s3cret"}) as client:
        assert client.call_with_progress("sum", {"a": 1, "b": 2}, lambda sent, total: None).json == 3


def test_a_call_of_its_own_headers(make_server) -> None:
    server = guarded(make_server).start()
    with Client(port=server.port) as client:
        assert client.call_with_headers("sum", {"a": 1, "b": 2}, {"X-API-Key": "s3cret"}).json == 3
        with pytest.raises(RPCError, match="an API key is required"):
            client.sum(1, 2).json  # the next call has none
    with Client(f"ws://127.0.0.1:{server.port}/") as ws:
        with pytest.raises(ValueError, match="only HTTP sends headers with each call"):
            ws.call_with_headers("sum", [1, 2], {"X-API-Key": "s3cret"})


def test_async_client_headers(make_server) -> None:
    server = guarded(make_server).start()

    async def main() -> list[int]:
        async with AsyncClient(port=server.port, headers={"X-API-Key": "s3cret"}) as client:
            many = await asyncio.gather(*(client.sum(i, 1) for i in range(5)))
        async with AsyncClient(port=server.port) as bare:
            own = await bare.call_with_headers("sum", [2, 2], {"X-API-Key": "s3cret"})
            with pytest.raises(RPCError, match="an API key is required"):
                (await bare.sum(1, 2)).json
        return [r.json for r in many] + [own.json]

    assert asyncio.run(main()) == [1, 2, 3, 4, 5, 4]


@pytest.mark.parametrize(
    ("headers", "says"),
    [
        ({"X Key": "v"}, "not an HTTP header name"),
        ({"X-Key": "a\r\nHost: evil"}, "control character"),
        ({"Content-Length": "1"}, "writes the Content-Length header itself"),
    ],
)
def test_bad_headers_are_refused_before_anything_is_sent(headers, says: str) -> None:
    with pytest.raises(ValueError, match=says):
        Client(port=9, headers=headers)
    with pytest.raises(ValueError, match=says):
        AsyncClient(port=9, headers=headers)


def test_raw_tcp_carries_no_headers() -> None:
    with pytest.raises(ValueError, match="raw TCP carries no headers"):
        Client("tcp://127.0.0.1:9", headers={"X-API-Key": "s3cret"})


def test_the_command_line_sends_headers(make_server) -> None:
    server = guarded(make_server).start()
    result = CliRunner().invoke(main, ["call", "sum", "a=1", "b=2", "-p", str(server.port), "-H", "X-API-Key: s3cret", "--format", "json"])
    assert result.exit_code == 0 and result.stdout.strip().endswith("3"), result.output
    refused = CliRunner().invoke(main, ["call", "sum", "a=1", "b=2", "-p", str(server.port)])
    assert refused.exit_code != 0 and "an API key is required" in refused.output, refused.output
    bad = CliRunner().invoke(main, ["call", "sum", "-p", str(server.port), "-H", "no colon"])
    assert bad.exit_code == 2 and "NAME: VALUE" in bad.output, bad.output


# ------------------------------------------------------------------ URIs and the command line


def test_tcp_and_tls_uris(make_server, tmp_path) -> None:
    server = with_client_procedures(make_server()).start()
    with Client(f"tcp://127.0.0.1:{server.port}") as client:
        assert client.sum(1, 2).json == 3
        assert client.url == f"tcp://127.0.0.1:{server.port}" and not client.use_http

    async def call() -> int:
        async with AsyncClient(f"tcp://127.0.0.1:{server.port}") as client:
            return int((await client.sum(2, 3)).json)

    assert asyncio.run(call()) == 5
    assert Client("tls://example.com:9", insecure=True).url == "tls://example.com:9"
    with pytest.raises(ValueError, match="raw TCP has no path"):
        Client("tcp://127.0.0.1:9/rpc")
    with pytest.raises(ValueError, match="the scheme must be one of http, https, ws, wss, tcp, tls"):
        Client("udp://127.0.0.1:9")


def test_the_command_line_takes_a_npy_file(make_server, tmp_path) -> None:
    numpy = pytest.importorskip("numpy")
    server = make_server()

    @server
    def total(x: numpy.ndarray) -> float:
        return float(x.sum())

    server.start()
    numpy.save(tmp_path / "input.npy", numpy.arange(6, dtype=numpy.float32).reshape(2, 3))
    result = CliRunner().invoke(main, ["call", "total", f"x:numpy={tmp_path / 'input.npy'}", "-p", str(server.port), "--format", "json"])
    assert result.exit_code == 0 and result.stdout.strip().endswith("15.0"), result.output
    helped = CliRunner().invoke(main, ["call", "--help"])
    text = " ".join(helped.output.split())  # as wrapped to the terminal
    assert "numpy: a .npy file's array" in text and "bytes, binary or file: a file's bytes" in text, text


def test_test_client_with_headers_in_a_thread(make_server) -> None:
    # TestClient passes client options on; a test may call from other threads with its own clients.
    server = guarded(make_server)
    results: list[int] = []
    with TestClient(server, headers={"X-API-Key": "s3cret"}) as client:
        worker = threading.Thread(target=lambda: results.append(client.sum(1, 1).json))
        worker.start()
        worker.join(10)
    assert results == [2]


def test_streams_carry_the_clients_headers(make_server) -> None:
    server = make_server()
    server.middleware(ucall.auth.api_key("s3cret"))

    @server
    def count(n: int):  # type: ignore[no-untyped-def]
        yield from range(n)

    server.start()
    with Client(port=server.port, headers={"X-API-Key": "s3cret"}) as client:
        assert list(client.stream("count", n=3)) == [0, 1, 2]

    async def gathered() -> list[int]:
        async with AsyncClient(f"ws://127.0.0.1:{server.port}/", headers={"X-API-Key": "s3cret"}) as client:
            return [item async for item in client.stream("count", n=2)]

    assert asyncio.run(gathered()) == [0, 1]


def test_a_numpy_param_is_described_as_the_docs_page_describes_it(make_server) -> None:
    numpy = pytest.importorskip("numpy")
    server = make_server()

    @server
    def total(x: numpy.ndarray, blob: bytes) -> float:
        return float(x.sum()) + len(blob)

    server.start()
    helped = CliRunner().invoke(main, ["call", "total", "--help", "-p", str(server.port)])
    first = helped.output.splitlines()[0]
    # One wording (the core's type_text) for `ucall NAME --help` and the /docs page's data.
    assert "x: array<number | boolean | array> | base64 application/x-npy (plain JSON) or an ndarray attachment (binary message)" in first, first
    assert "blob: base64 bytes (plain JSON) or a bytes attachment (binary message)" in first, first
    with urllib.request.urlopen(f"http://127.0.0.1:{server.port}/docs", timeout=10) as reply:
        page = reply.read().decode()
    # The page's data escapes "<" (it sits in a <script> element).
    assert '"x":"array\\u003cnumber | boolean | array> | base64 application/x-npy (plain JSON) or an ndarray attachment (binary message)"' in page
    assert '"blob":"base64 bytes (plain JSON) or a bytes attachment (binary message)"' in page
