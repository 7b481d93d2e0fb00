# SPDX-License-Identifier: Apache-2.0
"""UCall's published Python surface keeps working unchanged."""

import http.client
import re
import ssl
import subprocess
import threading

import pytest
from conftest import once

import ucall.posix
import ucall.rich_posix
import ucall.rich_uring
import ucall.server
import ucall.uring
from ucall.client import ClientTLS


@pytest.mark.parametrize("module", [ucall.posix, ucall.uring, ucall.rich_posix, ucall.rich_uring])
def test_published_servers(module, engine, monkeypatch):
    monkeypatch.setenv("UCALL_ENGINE", engine)
    server = module.Server(
        hostname="127.0.0.1", port=0, queue_depth=64, max_callbacks=8, max_threads=4, count_threads=1, quiet=True
    )

    @server
    def sum(a: int, b: int) -> int:
        return a + b

    def echo(data):  # type: ignore[no-untyped-def]
        return data

    assert server.route(echo) is echo
    thread = threading.Thread(target=server.run, kwargs={"max_seconds": 10})
    thread.start()
    try:
        for _ in range(200):
            if server.running:
                break
            threading.Event().wait(0.01)
        assert once(server.port, "sum", {"a": 2, "b": 3, "extra": "ignored"}) == 5
        assert once(server.port, "echo", ["x", "ignored"]) == "x"
    finally:
        server.stop()
        thread.join(10)
    assert not thread.is_alive()


def test_run_with_max_cycles_returns(engine, monkeypatch):
    monkeypatch.setenv("UCALL_ENGINE", engine)
    server = ucall.posix.Server(port=0)
    server.route(lambda: 1, name="one")
    server.start()
    once(server.port, "one")
    server.run(max_cycles=1, max_seconds=5)  # already past one cycle: returns at once
    assert not server.running


def test_newer_readme_server_module(engine, monkeypatch):
    """UCall's newer README: ``from ucall.server import Server``, ``uring_if_possible`` and
    ``@server.get("/sum")``, answered over REST and JSON-RPC."""
    from ucall.server import Server

    assert ucall.server.__all__ == ["Server"]
    monkeypatch.delenv("UCALL_ENGINE", raising=False)
    portable = Server(uring_if_possible=False, epoll_if_possible=True, port=0, quiet=True)
    portable.route(lambda: 1, name="one")
    with portable:
        assert portable.engine == "poll"
    monkeypatch.setenv("UCALL_ENGINE", engine)
    server = Server(uring_if_possible=True, hostname="127.0.0.1", port=0, quiet=True)

    @server.get("/sum")
    def sum(a: int, b: int) -> int:
        return a + b

    assert sum(1, 2) == 3, "the function is returned unchanged"
    with pytest.raises(ValueError, match="one segment"):
        server.get("/a/b")
    with server:
        assert server.engine == engine
        assert once(server.port, "sum", {"a": 2, "b": 3}) == 5
        rest = http.client.HTTPConnection("127.0.0.1", server.port, timeout=5)
        try:
            rest.request("GET", "/sum?a=20&b=22")
            reply = rest.getresponse()
            assert (reply.status, reply.read()) == (200, b"42")
        finally:
            rest.close()


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    directory = tmp_path_factory.mktemp("certs")
    subprocess.run(
        [
            "openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
            "-keyout", str(directory / "key.pem"), "-out", str(directory / "cert.pem"), "-days", "1", "-nodes",
            "-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1",
        ],
        check=True, capture_output=True, timeout=60,
    )
    return directory


def test_published_tls_arguments(certs):
    server = ucall.posix.Server(port=0, ssl_pk=str(certs / "key.pem"), ssl_certs=[str(certs / "cert.pem")])
    server.route(lambda a, b: a + b, name="sum")
    with server:
        context = ssl.create_default_context(cafile=str(certs / "cert.pem"))
        with ClientTLS(uri="127.0.0.1", port=server.port, ssl_context=context) as client:
            assert client.sum(a=1, b=2).json == 3
            assert client.sum(3, 4).json == 7  # the same TLS connection, kept alive
        with ClientTLS(uri="127.0.0.1", port=server.port, allow_self_signed=True) as client:
            assert client.sum(1, 1).json == 2
    with pytest.raises(ValueError, match="TLS needs both"):
        ucall.posix.Server(port=0, ssl_pk=str(certs / "key.pem"))


def test_a_chain_of_several_files_is_checked_file_by_file(certs, tmp_path):
    """``ssl_certs`` may list the chain in several files, joined for the core: each must
    hold a certificate, and errors name the files given, not the joined one."""
    key, cert = str(certs / "key.pem"), str(certs / "cert.pem")
    (tmp_path / "garbage.pem").write_text("garbage\n")
    with pytest.raises(ValueError, match=r"TLS certificate .*garbage.pem: no PEM certificate in it"):
        ucall.posix.Server(port=0, ssl_pk=key, ssl_certs=[cert, str(tmp_path / "garbage.pem")])
    with pytest.raises(ValueError, match=r"TLS certificate .*missing.pem: No such file"):
        ucall.posix.Server(port=0, ssl_pk=key, ssl_certs=[cert, str(tmp_path / "missing.pem")])
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
         "-keyout", str(tmp_path / "other.key"), "-out", str(tmp_path / "other.pem"), "-days", "1",
         "-subj", "/CN=other"],
        check=True, capture_output=True, timeout=60,
    )
    mismatched = ucall.posix.Server(port=0, ssl_pk=str(tmp_path / "other.key"), ssl_certs=[cert, cert])
    with pytest.raises(Exception, match=r"the chain of ssl_certs \[") as caught:
        mismatched.start()
    assert "ucall-chain-" not in str(caught.value)


def test_tls_beside_plaintext(make_server, certs):
    server = make_server(tls_cert=certs / "cert.pem", tls_key=certs / "key.pem", tls_port=0, engine="auto")
    server.route(lambda: "hi", name="hello")
    with server:
        assert server.tls_port and server.tls_port != server.port
        assert once(server.port, "hello") == "hi"
        with ClientTLS(uri="127.0.0.1", port=server.tls_port, allow_self_signed=True) as client:
            assert client.hello().json == "hi"


def test_the_url_says_https_when_the_port_speaks_tls(make_server, certs):
    tls_only = make_server(tls_cert=certs / "cert.pem", tls_key=certs / "key.pem")
    beside = make_server(tls_cert=certs / "cert.pem", tls_key=certs / "key.pem", tls_port=0)
    with tls_only, beside:
        assert tls_only.tls_port == tls_only.port
        assert tls_only.url == f"https://127.0.0.1:{tls_only.port}"
        assert repr(tls_only).startswith(f"<ucall.Server running on https://127.0.0.1:{tls_only.port},")
        assert beside.url == f"http://127.0.0.1:{beside.port}"  # the port itself stays plaintext
        with ClientTLS(uri="127.0.0.1", port=tls_only.port, allow_self_signed=True) as client:
            assert client.url == tls_only.url + "/"


def test_quiet_silences_the_start_line(engine, capfd):
    for quiet in (False, True):
        server = ucall.posix.Server(port=0, quiet=quiet)
        server.route(lambda: "hi", name="hello")
        server.run(max_seconds=0.2)
        logged = capfd.readouterr().err
        said = re.search(r"^ucall: listening on http://127\.0\.0\.1:\d+ \(engine \w+, 1 thread; 1 procedure: hello;", logged, re.M)
        assert bool(said) is not quiet, logged
        assert logged.count("listening on") == (0 if quiet else 1), logged
