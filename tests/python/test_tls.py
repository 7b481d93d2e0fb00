# SPDX-License-Identifier: Apache-2.0
"""TLS interop with real clients: Python's ssl module, curl, openssl s_client, and the
websockets library over wss://. Certificates are made at test time with openssl (no key
is ever committed).
"""

from __future__ import annotations

import asyncio
import json
import socket
import ssl
import subprocess
from pathlib import Path

import pytest
from websockets.asyncio.client import connect

from conftest import ServerProcess
from wire import jsonrpc_post

SUBTRACT = b'{"jsonrpc":"2.0","method":"subtract","params":[42,23],"id":1}'


@pytest.fixture(scope="module")
def certs(tmp_path_factory) -> Path:
    directory = tmp_path_factory.mktemp("tls")
    subprocess.run(
        [
            "openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
            "-keyout", str(directory / "key.pem"), "-out", str(directory / "cert.pem"), "-days", "1", "-nodes",
            "-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1",
        ],
        check=True,
        capture_output=True,
    )
    return directory


@pytest.fixture(scope="module")
def tls_server(certs, engine):
    server = ServerProcess(
        engine, ("--tls-cert", str(certs / "cert.pem"), "--tls-key", str(certs / "key.pem"))
    ).start()
    try:
        yield server
    finally:
        server.stop()


def context(certs: Path) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(certs / "cert.pem"))
    ctx.set_alpn_protocols(["http/1.1"])
    return ctx


def https_call(ctx: ssl.SSLContext, address, session=None) -> tuple[dict, ssl.SSLSocket]:
    raw = socket.create_connection(address, timeout=5)
    sock = ctx.wrap_socket(raw, server_hostname="localhost", session=session)
    sock.sendall(jsonrpc_post(SUBTRACT))
    data = b""
    while b"\r\n\r\n" not in data:
        data += sock.recv(65536)
    head, _, body = data.partition(b"\r\n\r\n")
    length = int(next(line.split(b":")[1] for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")))
    while len(body) < length:
        body += sock.recv(65536)
    return json.loads(body), sock


def test_python_ssl_client_with_alpn_and_resumption(tls_server, certs):
    ctx = context(certs)
    reply, first = https_call(ctx, tls_server.address)
    assert reply == {"jsonrpc": "2.0", "id": 1, "result": 19}
    assert first.selected_alpn_protocol() == "http/1.1"
    assert first.version() == "TLSv1.3"
    # Let the client read the session ticket, then resume with it.
    first.sendall(jsonrpc_post(SUBTRACT))
    first.recv(65536)
    session = first.session
    first.close()
    reply, second = https_call(ctx, tls_server.address, session=session)
    assert reply["result"] == 19
    assert second.session_reused, "the session resumes"
    second.close()


def test_python_ssl_client_over_tls_1_2(tls_server, certs):
    ctx = context(certs)
    ctx.maximum_version = ssl.TLSVersion.TLSv1_2
    reply, sock = https_call(ctx, tls_server.address)
    assert reply["result"] == 19 and sock.version() == "TLSv1.2"
    sock.close()


def test_curl(tls_server, certs):
    host, port = tls_server.address
    out = subprocess.run(
        ["curl", "-s", "--max-time", "5", "--cacert", str(certs / "cert.pem"), f"https://localhost:{port}/", "-d",
         SUBTRACT.decode()],
        capture_output=True, text=True, check=True,
    ).stdout
    assert json.loads(out) == {"jsonrpc": "2.0", "id": 1, "result": 19}
    out = subprocess.run(
        ["curl", "-s", "--max-time", "5", "--cacert", str(certs / "cert.pem"),
         f"https://localhost:{port}/subtract?minuend=5&subtrahend=3"],
        capture_output=True, text=True, check=True,
    ).stdout
    assert out == "2"


def test_openssl_s_client(tls_server, certs):
    host, port = tls_server.address
    request = jsonrpc_post(SUBTRACT).replace(b"\r\n\r\n", b"\r\nConnection: close\r\n\r\n", 1)
    result = subprocess.run(
        ["openssl", "s_client", "-connect", f"{host}:{port}", "-alpn", "http/1.1", "-CAfile",
         str(certs / "cert.pem"), "-servername", "localhost", "-quiet", "-verify_return_error"],
        input=request, capture_output=True, timeout=10,
    )
    assert b'"result":19' in result.stdout, result.stderr.decode(errors="replace")


def test_plaintext_on_the_tls_port_is_refused_and_others_go_on(tls_server, certs):
    with socket.create_connection(tls_server.address, timeout=5) as plain:
        try:
            plain.sendall(jsonrpc_post(SUBTRACT))
            answer = plain.recv(65536)
        except OSError:
            answer = b""
        # A TLS alert record (content type 21), or nothing if the reset came first.
        assert answer == b"" or answer[:1] == b"\x15", answer[:16]
    reply, sock = https_call(context(certs), tls_server.address)
    assert reply["result"] == 19
    sock.close()


def test_websocket_over_tls(tls_server, certs):
    host, port = tls_server.address

    async def session():
        async with connect(f"wss://localhost:{port}/", ssl=context(certs)) as ws:
            await ws.send(SUBTRACT.decode())
            assert json.loads(await ws.recv()) == {"jsonrpc": "2.0", "id": 1, "result": 19}

    asyncio.run(asyncio.wait_for(session(), 20))


def test_node_ws_package_over_wss(tls_server, certs):
    from test_websocket import node_client

    host, port = tls_server.address
    seen = node_client(f"wss://localhost:{port}/", str(certs / "cert.pem"))
    assert seen["code"] == 1000 and len(seen["replies"]) == 3, seen
    assert seen["replies"][0]["reply"] == {"jsonrpc": "2.0", "id": 1, "result": 19}
