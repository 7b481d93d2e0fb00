# SPDX-License-Identifier: Apache-2.0
"""Server-side logs through `logging`, logger `ucall`: the start-up and shutdown lines,
handlers' exceptions with their tracebacks (never sent to the caller unless debug), the
core's records of limits hit; and `ucall serve --log-level`."""

from __future__ import annotations

import http.client
import logging
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from conftest import REPO_ROOT, Wire, once, serving, tcp_exchange

from ucall import RPCError


def ucall_records(caplog: pytest.LogCaptureFixture, level: int, needle: str) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "ucall" and r.levelno == level and needle in r.getMessage()]


def test_start_up_and_shutdown_lines(make_server, engine, caplog):
    caplog.set_level(logging.INFO, logger="ucall")
    server = make_server(threads=2)
    server.route(lambda: 1, name="one")
    server.start()
    url = server.url
    started = ucall_records(caplog, logging.INFO, "listening on")
    assert [r.getMessage() for r in started] == [f"listening on {url} (engine {engine}, 2 threads; 1 procedure: one)"]
    # The core's own start-up line is left out: one line says it.
    assert not ucall_records(caplog, logging.INFO, "serving on")
    server.stop()
    assert [r.getMessage() for r in ucall_records(caplog, logging.INFO, "stopped")] == [
        f"stopped serving on {url}: 0 call(s) answered during the drain, 0 left unanswered"
    ]


@pytest.mark.parametrize(("nap", "answered", "unanswered", "level"), [(0.3, 1, 0, logging.INFO), (0.8, 0, 1, logging.WARNING)])
def test_the_shutdown_line_counts_the_calls_the_drain_finished_and_cut_off(
    make_server, caplog, nap, answered, unanswered, level
):
    """A call in flight when the server stops is answered if it ends within
    shutdown_timeout (0.5 s here), else its connection is closed without an answer; the
    last line says how many of each, a warning when any was cut off."""
    caplog.set_level(logging.INFO, logger="ucall")
    server = make_server(shutdown_timeout=0.5)
    started = threading.Event()

    @server
    def slow() -> str:
        started.set()
        time.sleep(nap)
        return "done"

    server.start()
    url = server.url
    with ThreadPoolExecutor(1) as pool:
        call = pool.submit(once, server.port, "slow")
        assert started.wait(5)
        server.stop()
        if unanswered:
            # The connection closes with no reply: http.client says the server disconnected.
            with pytest.raises((ConnectionError, http.client.HTTPException)):
                call.result(5)
        else:
            assert call.result(5) == "done"
    lines = [r.getMessage() for r in ucall_records(caplog, level, "stopped serving on")]
    assert lines == [
        f"stopped serving on {url}: {answered} call(s) answered during the drain, {unanswered} left unanswered"
    ], caplog.text


@pytest.mark.parametrize("debug", [False, True])
def test_a_handler_exception_is_logged_with_its_traceback(make_server, caplog, debug):
    caplog.set_level(logging.ERROR, logger="ucall")
    server = make_server(debug=debug)

    @server
    def crash(n: int) -> int:
        raise ValueError(f"bad value {n}")

    @server
    async def acrash(n: int) -> int:
        raise KeyError(n)

    @server
    def refuse() -> None:
        raise RPCError(-32001, "refused on purpose")

    server.start()
    w = Wire(server.port)
    try:
        error = w.error("crash", [1])
        assert error["code"] == -32603 and "ValueError: bad value 1" in error["message"]
        # The traceback goes to the caller only in debug mode.
        assert ("data" in error) is debug
        assert w.error("acrash", [2])["code"] == -32603
        assert w.error("refuse")["code"] == -32001
    finally:
        w.close()
    [tcp] = tcp_exchange(server.port, b'{"jsonrpc":"2.0","id":1,"method":"crash","params":[3]}\n', 1)
    assert tcp["error"]["code"] == -32603

    failures = [r for r in caplog.records if r.name == "ucall" and r.levelno == logging.ERROR]
    assert [r.getMessage() for r in failures] == [
        "procedure 'crash' raised ValueError",
        "procedure 'acrash' raised KeyError",
        "procedure 'crash' raised ValueError",
    ]
    for record, value in zip(failures, ["bad value 1", "2", "bad value 3"]):
        assert record.exc_info is not None and str(record.exc_info[1]).strip("'") == value
        text = logging.Formatter().formatException(record.exc_info)
        assert text.startswith("Traceback") and "raise" in text, text
    # An RPCError is the handler's answer, not a failure.
    assert not [r for r in caplog.records if "refuse" in r.getMessage()]


def test_limits_hit_are_logged_by_the_core(make_server, caplog):
    caplog.set_level(logging.DEBUG, logger="ucall")
    server = make_server(max_body_bytes=200, max_batch=2)
    server.route(lambda: 1, name="one")
    server.start()
    # The core logs a kind of record once a second at most: start a fresh second.
    time.sleep(1.1)
    w = Wire(server.port)
    try:
        assert w.post(b" " * 300)[0] == 413
    finally:
        w.close()
    batch = ",".join(f'{{"jsonrpc":"2.0","id":{i},"method":"one"}}' for i in range(3))
    assert tcp_exchange(server.port, f"[{batch}]\n".encode(), 1)[0]["error"]["code"] == -32600
    deadline = time.monotonic() + 5
    while not ucall_records(caplog, logging.WARNING, "max_batch = 2") and time.monotonic() < deadline:
        time.sleep(0.05)
    assert ucall_records(caplog, logging.WARNING, "request refused: 413: request body too large: more than max_body_bytes = 200 bytes"), caplog.records
    assert ucall_records(caplog, logging.WARNING, "batch refused: 3 requests, more than max_batch = 2"), caplog.records
    # Over raw TCP too, a second later.
    time.sleep(1.1)
    reply = tcp_exchange(server.port, b"[" + b" " * 300 + b"]\n", 1)[0]
    assert reply["error"]["code"] == -32600
    assert len(ucall_records(caplog, logging.WARNING, "max_body_bytes = 200")) == 2, caplog.records
    assert once(server.port, "one") == 1


APP = textwrap.dedent("""
    from ucall import Server
    server = Server()

    @server
    def crash() -> None:
        raise ZeroDivisionError("on purpose")
""")


@pytest.mark.parametrize("level", ["info", "warning", "critical"])
def test_serve_log_level(tmp_path, engine, level):
    (tmp_path / "app.py").write_text(APP)
    serve = ["-m", "ucall", "serve", "app:server", "--host", "127.0.0.1", "--port", "0", "--log-level", level]
    with serving(serve, engine, cwd=tmp_path) as (proc, port):
        assert once(port, "rpc.health") == {"status": "serving"}
        w = Wire(port)
        try:
            assert w.error("crash")["code"] == -32603
        finally:
            w.close()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(10) == 0
        err = proc.started + proc.stderr.read()
    assert ("INFO ucall: listening on http://127.0.0.1:" in err) is (level == "info"), err
    assert ("INFO ucall: stopped serving on" in err) is (level == "info"), err
    logged = "ERROR ucall: procedure 'crash' raised ZeroDivisionError" in err
    assert logged is (level != "critical"), err
    assert ('raise ZeroDivisionError("on purpose")' in err) is logged, err


def test_serve_refuses_an_unknown_log_level(tmp_path):
    (tmp_path / "app.py").write_text(APP)
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT / "python"))
    result = subprocess.run(
        [sys.executable, "-m", "ucall", "serve", "app:server", "--log-level", "loud"],
        cwd=tmp_path, capture_output=True, text=True, env=env, timeout=30,
    )
    assert result.returncode == 2 and "Invalid value for '--log-level'" in result.stderr, result.stderr
