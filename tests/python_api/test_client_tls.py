# SPDX-License-Identifier: Apache-2.0
"""ucall.client and the `ucall` command over TLS, against a Python Server on loopback.

The certificates are made at test time with the openssl command: a throwaway CA, a
server certificate it signs (for localhost, 127.0.0.1 and ::1), and a second CA that
signed nothing. No key is ever committed.
"""

import asyncio
import json
import os
import ssl
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import ENGINES, REPO_ROOT, with_client_procedures

from ucall import ConnectError, Server
from ucall.cli import main
from ucall.client import AsyncClient, Client, ClientTLS

BIG = os.urandom(1_600_000)


def openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True, timeout=60)


def make_certs(directory: Path) -> Path:
    """``ca.pem``, ``cert.pem``/``key.pem`` signed by it, and an unrelated ``other-ca.pem``."""
    ec = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes")
    for name in ("ca", "other-ca"):
        openssl(
            "req", "-x509", *ec, "-keyout", str(directory / f"{name}.key"), "-out", str(directory / f"{name}.pem"),
            "-days", "1", "-subj", f"/CN=ucall test {name}", "-addext", "basicConstraints=critical,CA:TRUE",
            "-addext", "keyUsage=critical,keyCertSign,cRLSign",
        )
    openssl(
        "req", *ec, "-keyout", str(directory / "key.pem"), "-out", str(directory / "leaf.csr"), "-subj", "/CN=localhost"
    )
    (directory / "leaf.ext").write_text(
        "subjectAltName=DNS:localhost,IP:127.0.0.1,IP:::1\nbasicConstraints=CA:FALSE\n"
        "keyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth\n"
        "subjectKeyIdentifier=hash\nauthorityKeyIdentifier=keyid\n"
    )
    openssl(
        "x509", "-req", "-in", str(directory / "leaf.csr"), "-CA", str(directory / "ca.pem"),
        "-CAkey", str(directory / "ca.key"), "-CAcreateserial", "-out", str(directory / "cert.pem"), "-days", "1",
        "-extfile", str(directory / "leaf.ext"),
    )
    return directory


def tls_server(certs: Path, engine: str, **options: object) -> Server:
    """A started server whose port speaks TLS, with the client suites' procedures."""
    server = Server(port=0, engine=engine, tls_cert=str(certs / "cert.pem"), tls_key=str(certs / "key.pem"), **options)
    return with_client_procedures(server).start()


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_certs(tmp_path_factory.mktemp("certs"))


@pytest.fixture(scope="module", params=ENGINES)
def server(certs, request):
    server = tls_server(certs, request.param, tls_port=0)  # the port plaintext, TLS on server.tls_port
    try:
        yield server
    finally:
        server.stop()


def served_certificate(certs: Path) -> bytes:
    return ssl.PEM_cert_to_DER_cert((certs / "cert.pem").read_text())


def test_https_verified_against_the_ca(server, certs):
    with Client(port=server.tls_port, tls=True, cacert=certs / "ca.pem") as client:
        assert client.url == f"https://127.0.0.1:{server.tls_port}/"
        assert client.sum(a=1, b=2).json == 3
        assert client.sock is None  # the native transport (rustls) carries the calls
        alpn, resumed, peer = client._native.tls_info()
        assert (alpn, resumed, peer) == ("http/1.1", False, served_certificate(certs))
        assert client.notify("echo", 1) is None
        with client.batch() as batch:
            first = batch.sum(1, 2)
            batch.notify("echo", 0)
            second = batch.echo("x")
        assert (first.json, second.json) == (3, "x")
        assert [r.json for r in client.pipeline([("sum", [i, i]) for i in range(10)])] == [2 * i for i in range(10)]
    # A URL says TLS by its scheme; the name checked (and sent as SNI) is its host.
    with Client(f"https://localhost:{server.tls_port}", cacert=str(certs / "ca.pem")) as client:
        assert client.sum(2, 2).json == 4
    with Client(port=server.tls_port, cacert=certs / "ca.pem", server_hostname="localhost") as client:
        assert client.sum(3, 3).json == 6
    # An ssl_context= is Python's: the calls go through Python's ssl, on client.sock.
    context = ssl.create_default_context(cafile=str(certs / "ca.pem"))
    context.set_alpn_protocols(["http/1.1"])
    with Client(port=server.tls_port, ssl_context=context) as client:
        assert client.sum(4, 4).json == 8
        assert client.sock.selected_alpn_protocol() == "http/1.1"
        assert client.sock.getpeercert()["subject"] == ((("commonName", "localhost"),),)


def test_verification_is_on_by_default_and_fails_clearly(server, certs):
    with pytest.raises(ConnectError, match="cannot verify the TLS certificate of 127.0.0.1:") as caught:
        Client(port=server.tls_port, tls=True).sum(1, 2)
    assert isinstance(caught.value.__cause__, ssl.SSLCertVerificationError)
    assert "unknown issuer" in caught.value.__cause__.verify_message
    context = ssl.create_default_context()  # Python's ssl: its own error is the cause
    with pytest.raises(ConnectError, match="cannot verify the TLS certificate of 127.0.0.1:") as caught:
        Client(port=server.tls_port, ssl_context=context).sum(1, 2)
    assert isinstance(caught.value.__cause__, ssl.SSLCertVerificationError)
    with pytest.raises(ConnectError, match="cannot verify the TLS certificate"):
        Client(f"https://127.0.0.1:{server.tls_port}", cacert=certs / "other-ca.pem").sum(1, 2)
    with pytest.raises(ConnectError, match="(?i)hostname mismatch"):
        Client(port=server.tls_port, cacert=certs / "ca.pem", server_hostname="example.com").sum(1, 2)

    async def asynchronous() -> None:
        with pytest.raises(ConnectError, match="cannot verify the TLS certificate"):
            await AsyncClient(port=server.tls_port, tls=True).sum(1, 2)

    asyncio.run(asynchronous())


def test_insecure_accepts_any_certificate(server):
    with Client(port=server.tls_port, insecure=True) as client:  # insecure= alone turns TLS on
        assert client.tls and client.sum(1, 2).json == 3
    with Client(f"https://127.0.0.1:{server.tls_port}", insecure=True, use_http=True) as client:
        assert client.sum(2, 3).json == 5


def test_contradictory_options_are_refused(certs):
    with pytest.raises(ValueError, match="contradict"):
        Client(tls=True, cacert=certs / "ca.pem", insecure=True)
    with pytest.raises(ValueError, match="plaintext"):
        Client("http://127.0.0.1:8545", cacert=certs / "ca.pem")
    with pytest.raises(ValueError, match="tls=False"):
        Client(tls=False, insecure=True)
    with pytest.raises(ValueError, match="scheme"):
        Client("ftp://127.0.0.1")
    with pytest.raises(FileNotFoundError, match="CA file .*missing.pem"):
        Client(tls=True, cacert=certs / "missing.pem")
    (certs / "not-pem.txt").write_text("not a certificate\n")
    with pytest.raises(ValueError, match="CA file .*not-pem.txt: no PEM certificate in it"):
        Client(tls=True, cacert=certs / "not-pem.txt")


def test_tls_against_a_plaintext_port_fails_clearly(server):
    with pytest.raises(ConnectError, match=f"TLS handshake with 127.0.0.1:{server.port} failed"):
        Client(port=server.port, insecure=True).sum(1, 2)


@pytest.mark.parametrize("use_http", [True, False], ids=["http", "tcp"])
def test_plaintext_to_a_tls_port_says_the_port_speaks_tls(server, use_http):
    """The server's TLS alert is named, where the client said only that the reply was cut."""
    with pytest.raises(Exception, match="the port speaks TLS"):
        Client(port=server.tls_port, use_http=use_http, timeout=5).sum(1, 2).json


def test_raw_tcp_over_tls(server, certs):
    with Client(port=server.tls_port, use_http=False, tls=True, cacert=certs / "ca.pem") as client:
        assert client.url == f"tls://127.0.0.1:{server.tls_port}"
        assert client.sum(1, 2).json == 3
        assert client.notify("echo", 1) is None
        assert [r.json for r in client.pipeline([("sum", [i, 1]) for i in range(10)])] == list(range(1, 11))
        assert client.echo(BIG).bytes == BIG


def resumed(client: Client) -> bool:
    info = client._native.tls_info()
    assert info is not None, "no TLS connection open"
    return info[1]


def test_session_resumption(server, certs):
    with Client(port=server.tls_port, cacert=certs / "ca.pem") as client:
        assert client.sum(1, 2).json == 3
        assert not resumed(client)
        client.close()
        assert client.sum(1, 2).json == 3  # a new connection, the session resumed
        assert resumed(client)
    with Client(port=server.tls_port, cacert=certs / "ca.pem", session_resumption=False) as client:
        client.sum(1, 2)
        client.close()
        client.sum(1, 2)
        assert not resumed(client)
    # With an ssl_context=, Python's ssl keeps the session (client.session) and resumes it.
    context = ssl.create_default_context(cafile=str(certs / "ca.pem"))
    with Client(port=server.tls_port, ssl_context=context) as client:
        assert client.sum(1, 2).json == 3
        assert not client.sock.session_reused
        client.close()
        assert client.session is not None
        assert client.sum(1, 2).json == 3 and client.sock.session_reused
    with Client(port=server.tls_port, ssl_context=context, session_resumption=False) as client:
        client.sum(1, 2)
        client.close()
        client.sum(1, 2)
        assert not client.sock.session_reused and client.session is None


def test_published_client_tls(server, certs):
    with ClientTLS(uri="127.0.0.1", port=server.tls_port, allow_self_signed=True) as client:
        assert client.sum(a=1, b=2).json == 3
        assert client.sum(3, 4).json == 7
        client.close()
        assert client.sum(1, 1).json == 2 and resumed(client)
    with ClientTLS("127.0.0.1", server.tls_port, None, True, False) as client:
        assert client.sum(1, 2).json == 3
        client.close()
        assert client.sum(1, 2).json == 3 and not resumed(client)
    context = ssl.create_default_context(cafile=str(certs / "ca.pem"))
    with ClientTLS("127.0.0.1", server.tls_port, context, False, False) as client:
        assert client.ssl_context is context and client.sum(1, 2).json == 3
        client.close()
        assert client.sum(1, 2).json == 3 and not client.sock.session_reused
    with pytest.raises(ConnectError, match="cannot verify"):
        ClientTLS(port=server.tls_port).sum(1, 2)


@pytest.mark.parametrize("key", [("-newkey", "rsa:2048"), ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1")])
def test_allow_self_signed_accepts_an_x509_v1_certificate(tmp_path, key):
    """UCall 0.5.4's examples/test.py: `ClientTLS(allow_self_signed=True)` against its own
    example certificate, an X.509 v1 one (`openssl x509 -req` without extensions), which
    the server serves with a warning. Since the client moved to rustls it failed with
    "UnsupportedCertVersion": webpki parsed the certificate that any was to be accepted."""
    openssl("req", *key, "-nodes", "-keyout", str(tmp_path / "key.pem"), "-out", str(tmp_path / "csr.pem"),
            "-subj", "/CN=localhost")
    openssl("x509", "-req", "-in", str(tmp_path / "csr.pem"), "-signkey", str(tmp_path / "key.pem"),
            "-out", str(tmp_path / "cert.pem"), "-days", "1")
    der = ssl.PEM_cert_to_DER_cert((tmp_path / "cert.pem").read_text())
    assert der[4:7] != b"\xa0\x03\x02", "a v1 certificate has no explicit version field"
    server = tls_server(tmp_path, ENGINES[0])
    try:
        with ClientTLS(uri="127.0.0.1", port=server.port, allow_self_signed=True) as client:
            assert client.sum(a=1, b=2).json == 3
        with Client(port=server.port, insecure=True) as client:
            assert client.sum(2, 2).json == 4
        with pytest.raises(ConnectError, match="cannot verify"):
            Client(port=server.port, tls=True).sum(1, 2)  # verifying still refuses it
    finally:
        server.stop()


def test_large_echo_over_tls(server, certs):
    with Client(port=server.tls_port, cacert=certs / "ca.pem") as client:
        assert client.echo(BIG).bytes == BIG
        assert client.sum(1, 2).json == 3

    async def asynchronous() -> None:
        async with AsyncClient(port=server.tls_port, cacert=certs / "ca.pem") as client:
            assert (await client.echo(BIG)).bytes == BIG

    asyncio.run(asynchronous())


def test_async_client_over_tls(server, certs):
    async def asynchronous() -> None:
        async with AsyncClient(port=server.tls_port, tls=True, cacert=certs / "ca.pem") as client:
            responses = await asyncio.gather(*(client.anap(i) for i in range(100)))
            assert [r.json for r in responses] == list(range(100))
            assert [r.json for r in await client.batch([("sum", [1, 2]), ("echo", ["y"])])] == [3, "y"]
        async with AsyncClient(port=server.tls_port, use_http=False, insecure=True) as client:
            responses = await asyncio.gather(*(client.sum(i, 1) for i in range(50)))
            assert [r.json for r in responses] == list(range(1, 51))

    asyncio.run(asynchronous())


def run(*args: object) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)
    return result.exit_code, result.stdout, result.stderr


def test_cli_tls(server, certs):
    port, ca = server.tls_port, certs / "ca.pem"
    code, out, err = run("sum", "a=1", "b=2", "-p", port, "--tls", "--cacert", ca, "--format", "json")
    assert (code, out.strip()) == (0, "3"), err
    code, out, err = run("sum", "a=1", "b=2", "-p", port, "--cacert", ca)  # --cacert implies --tls
    assert code == 0 and json.loads(out)["result"] == 3, err
    code, out, err = run("sum", "--positional", "2", "3", "-p", port, "--tls", "--tcp", "--cacert", ca)
    assert code == 0 and json.loads(out)["result"] == 5, err
    code, out, err = run("sum", "a=1", "b=2", "--uri", f"https://localhost:{port}", "--cacert", ca, "--format", "json")
    assert (code, out.strip()) == (0, "3"), err
    code, out, err = run("sum", "a=1", "b=2", "-p", port, "--tls", "--insecure", "--format", "json")
    assert (code, out.strip()) == (0, "3"), err
    code, out, err = run("sum", "a=1", "b=2", "-p", port, "-k", "--format", "json")
    assert (code, out.strip()) == (0, "3"), err


def test_cli_tls_failures(server, certs):
    code, out, err = run("sum", "a=1", "b=2", "-p", server.tls_port, "--tls", "--cacert", certs / "other-ca.pem")
    assert code == 2 and out == ""
    assert "cannot verify the TLS certificate" in err and "--cacert" in err and "--insecure" in err
    code, _, err = run("sum", "a=1", "-p", server.tls_port, "--cacert", certs / "missing.pem")
    assert code == 2 and "missing.pem" in err
    code, _, err = run("sum", "a=1", "-p", server.tls_port, "--cacert", certs / "ca.pem", "--insecure")
    assert code == 2 and "contradict" in err
    code, _, err = run("sum", "a=1", "--uri", f"http://127.0.0.1:{server.port}", "--tls")
    assert code == 2 and "contradicts http://" in err
    # The real command, as a user runs it: the exit status and message of a failed check.
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT / "python"))
    result = subprocess.run(
        [sys.executable, "-m", "ucall", "sum", "a=1", "b=2", "-p", str(server.tls_port), "--tls"],
        capture_output=True, text=True, timeout=30, env=env,
    )
    assert result.returncode == 2 and result.stdout == ""
    assert f"ucall: cannot verify the TLS certificate of 127.0.0.1:{server.tls_port}" in result.stderr


def test_hsts_max_age_is_said_over_tls(certs):
    """HSTS (RFC 6797): an option, off by default, said over TLS only."""
    import http.client

    with pytest.raises(ValueError, match="over TLS only"):
        Server(port=0, hsts_max_age=60)
    server = tls_server(certs, ENGINES[0], tls_port=0, hsts_max_age=86400)
    try:
        context = ssl.create_default_context(cafile=str(certs / "ca.pem"))
        secure = http.client.HTTPSConnection("localhost", server.tls_port, context=context, timeout=10)
        secure.request("GET", "/healthz")
        assert secure.getresponse().getheader("Strict-Transport-Security") == "max-age=86400"
        secure.close()
        plain = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
        plain.request("GET", "/healthz")
        assert plain.getresponse().getheader("Strict-Transport-Security") is None
        plain.close()
    finally:
        server.stop()


def test_binary_messages_over_tls(server, certs):
    """Calls, batches and pipelines with attachments over TLS: on the native connection
    (no Python socket is opened), and with an ``ssl_context=`` on Python's ssl."""
    context = ssl.create_default_context(cafile=str(certs / "ca.pem"))
    context.set_alpn_protocols(["http/1.1"])
    for options in ({"cacert": certs / "ca.pem"}, {"ssl_context": context}):
        with Client(port=server.tls_port, timeout=30, **options) as client:  # type: ignore[arg-type]
            assert client.size(BIG).json == len(BIG)
            piped = client.pipeline([("size", [b"ab"]), ("sum", [1, 2]), ("size", {"data": BIG[:5]})])
            assert [r.json for r in piped] == [2, 3, 5]
            with client.batch() as batch:
                first, second = batch.size(b"abc"), batch.sum(2, 2)
            assert (first.json, second.json) == (3, 4)
            assert (client.sock is None) == ("cacert" in options), "native unless given an ssl_context"
