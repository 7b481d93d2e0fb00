# SPDX-License-Identifier: Apache-2.0
"""UCall's published Python surface keeps working unchanged."""

import threading

import pytest
from conftest import once

import ucall.posix
import ucall.rich_posix
import ucall.rich_uring
import ucall.uring


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


def test_tls_arguments_are_refused_clearly():
    with pytest.raises(NotImplementedError, match="TLS"):
        ucall.posix.Server(port=0, ssl_pk="key.pem", ssl_certs=["cert.pem"])
