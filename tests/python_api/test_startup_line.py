# SPDX-License-Identifier: Apache-2.0
"""`server.run()` says where it listens, on which engine, and what it serves, as uvicorn
does, unless `quiet`; a `ready` callback announces the server its own way instead."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time

from conftest import REPO_ROOT, once, server_process

APP = """
from ucall import Server

server = Server(port={port}, quiet={quiet})

@server
def sum(a: int, b: int) -> int:
    return a + b

@server.method("text.shout")
def shout(text: str) -> str:
    return text.upper()

server.run(max_seconds=60)
"""


def start(tmp_path, engine: str, quiet: bool) -> tuple[subprocess.Popen[str], int]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    (tmp_path / "app.py").write_text(APP.format(port=port, quiet=quiet))
    env = dict(os.environ, UCALL_ENGINE=engine, PYTHONPATH=str(REPO_ROOT / "python"))
    proc = subprocess.Popen(
        [sys.executable, str(tmp_path / "app.py")], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    )
    return proc, port


def stop(proc: subprocess.Popen[str]) -> str:
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=15)
    assert proc.returncode == 0, err
    return err


def test_run_prints_address_engine_and_procedures(tmp_path, engine):
    proc, port = start(tmp_path, engine, quiet=False)
    try:
        lines = []
        while not any("listening on" in line for line in lines):
            line = proc.stderr.readline()
            assert line, "".join(lines)
            lines.append(line)
        expected = (
            rf"ucall: listening on http://127\.0\.0\.1:{port} \(engine {engine}, 1 thread; "
            r"2 procedures: sum, text\.shout; Ctrl-C stops\)"
        )
        assert re.fullmatch(expected, lines[-1].strip()), lines
        assert once(port, "sum", [1, 2]) == 3
    finally:
        err = stop(proc)
    assert "listening on" not in err  # said once


def test_quiet_says_nothing(tmp_path, engine):
    proc, port = start(tmp_path, engine, quiet=True)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                assert once(port, "sum", [1, 2]) == 3
                break
            except OSError:
                assert time.monotonic() < deadline and proc.poll() is None, "the server did not start"
                time.sleep(0.05)
    finally:
        err = stop(proc)
    assert err == ""


# One line, one format, on stderr, from every front end (docs/operations.md):
# "ucall: listening on http://HOST:PORT (engine E, N thread(s)[...][; ...])".
def said_on_stderr(command: list[str], tmp_path, engine: str) -> tuple[str, str]:
    """Start ``command`` (from ``tmp_path``, with APP as app.py), wait for its start-up line
    on stderr, call ``sum`` there, stop it with SIGINT; its line and its stdout."""
    (tmp_path / "app.py").write_text(APP.format(port=0, quiet=False).replace("server.run(max_seconds=60)", ""))
    env = dict(os.environ, UCALL_ENGINE=engine, PYTHONPATH=str(REPO_ROOT / "python"), PYTHONUNBUFFERED="1")
    with server_process(command, env=env, cwd=tmp_path) as (proc, port):
        line = proc.started.splitlines()[-1]
        assert f"http://127.0.0.1:{port} " in line, line
        assert once(port, "sum", [1, 2]) == 3
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
    assert "listening on" not in err, err  # said once
    return line, out


def test_ucall_serve_says_the_line_on_stderr(tmp_path, engine):
    line, out = said_on_stderr([sys.executable, "-m", "ucall", "serve", "app:server", "--port", "0"], tmp_path, engine)
    pattern = rf"ucall: listening on http://127\.0\.0\.1:\d+ \(engine {engine}, 1 thread; 2 procedures: sum, text\.shout; Ctrl-C stops\)"
    assert re.fullmatch(pattern, line), line
    assert out == ""


def test_ucall_serve_workers_says_one_line_for_all(tmp_path, engine):
    command = [sys.executable, "-m", "ucall", "serve", "app:server", "--port", "0", "--workers", "2"]
    line, out = said_on_stderr(command, tmp_path, engine)
    pattern = (
        rf"ucall: listening on http://127\.0\.0\.1:\d+ \(engine {engine}, 1 thread each; workers \d+, \d+; "
        r"2 procedures: sum, text\.shout; Ctrl-C stops\)"
    )
    assert re.fullmatch(pattern, line), line
    assert out == ""


def test_run_with_workers_says_one_line_for_all(tmp_path, engine):
    (tmp_path / "main.py").write_text("from app import server\nserver.run(workers=2)\n")
    line, out = said_on_stderr([sys.executable, "main.py"], tmp_path, engine)
    assert re.fullmatch(rf"ucall: listening on http://127\.0\.0\.1:\d+ \(engine {engine}, 1 thread each; workers \d+, \d+; .*\)", line)
    assert out == ""


def test_the_rust_server_says_the_line_on_stderr(tmp_path, engine):
    binary = REPO_ROOT / "target" / "debug" / "sum_server"
    assert binary.exists(), "build it first: cargo build -p ucall-examples --bin sum_server"
    line, out = said_on_stderr([str(binary), "--port", "0", "--threads", "2"], tmp_path, engine)
    assert re.fullmatch(rf"ucall: listening on http://127\.0\.0\.1:\d+ \(engine {engine}, 2 threads\)", line), line
    assert out == ""
