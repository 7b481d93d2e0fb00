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

from conftest import REPO_ROOT, once

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
