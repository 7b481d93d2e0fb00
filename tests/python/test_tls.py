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


# ---------------------------------------------------------------- certificates as UCall made them

LEGACY_CA_CONFIG = """\
[ca]
default_ca = local
[local]
database = {dir}/index.txt
new_certs_dir = {dir}
serial = {dir}/serial
default_md = sha256
policy = any_name
[any_name]
commonName = supplied
"""


def legacy_certificate(directory: Path, name: str, start: str, end: str) -> tuple[Path, Path]:
    """A self-signed X.509 v1 certificate (no extensions) and its RSA key, valid from
    `start` to `end` (YYYYMMDDHHMMSSZ): what UCall 0.5.4's examples/login/certs/gen.sh makes
    with `openssl x509 -req -signkey`, but with chosen dates. Returns (cert, key)."""
    where = directory / name
    where.mkdir()
    (where / "index.txt").touch()
    (where / "serial").write_text("01\n")
    (where / "ca.cnf").write_text(LEGACY_CA_CONFIG.format(dir=where))
    key, request, cert = where / "key.pem", where / "request.csr", where / "cert.pem"
    for command in (
        ["openssl", "genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048", "-out", str(key)],
        ["openssl", "req", "-new", "-key", str(key), "-subj", "/CN=localhost", "-out", str(request)],
        ["openssl", "ca", "-batch", "-config", str(where / "ca.cnf"), "-selfsign", "-keyfile", str(key),
         "-in", str(request), "-startdate", start, "-enddate", end, "-notext", "-out", str(cert)],
    ):
        subprocess.run(command, check=True, capture_output=True)
    return cert, key


@pytest.fixture(scope="module")
def legacy_certs(tmp_path_factory) -> dict[str, tuple[Path, Path]]:
    directory = tmp_path_factory.mktemp("legacy-tls")
    return {
        # The dates of UCall's own example certificate: a year that ended in 2024.
        "expired": legacy_certificate(directory, "expired", "20230403134517Z", "20240402134517Z"),
        "not valid yet": legacy_certificate(directory, "future", "20990101000000Z", "21000101000000Z"),
    }


def der_of(pem: Path) -> bytes:
    return ssl.PEM_cert_to_DER_cert(pem.read_text())


@pytest.mark.parametrize("validity", ["expired", "not valid yet"])
def test_a_v1_certificate_out_of_its_dates_is_served_with_warnings(legacy_certs, engine, validity):
    cert, key = legacy_certs[validity]
    version = subprocess.run(["openssl", "x509", "-in", str(cert), "-noout", "-text"], capture_output=True,
                             text=True, check=True).stdout
    assert "Version: 1 (0x0)" in version, "the fixture is an X.509 v1 certificate"
    server = ServerProcess(engine, ("--tls-cert", str(cert), "--tls-key", str(key))).start()
    try:
        # Whom to trust is the client's choice: this one checks nothing.
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        reply, sock = https_call(ctx, server.address)
        assert reply == {"jsonrpc": "2.0", "id": 1, "result": 19}
        assert sock.getpeercert(binary_form=True) == der_of(cert), "the server serves that certificate"
        sock.close()
    finally:
        server.stop()
    stderr = server.stderr_text()
    assert "is X.509 v1" in stderr, stderr
    expected = "has expired: not after Apr  2 13:45:17 2024" if validity == "expired" else "is not valid yet"
    assert expected in stderr, stderr


def test_a_key_that_is_not_the_certificates_is_refused(legacy_certs, engine):
    cert, _ = legacy_certs["expired"]
    _, other_key = legacy_certs["not valid yet"]
    server = ServerProcess(engine, ("--tls-cert", str(cert), "--tls-key", str(other_key)))
    with pytest.raises(RuntimeError, match="server exited before listening") as refused:
        server.start()
    assert "do not make a usable pair: the private key is not the certificate's" in str(refused.value)
