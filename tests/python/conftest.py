# SPDX-License-Identifier: Apache-2.0
"""Starts the test server (tests/vectors/README.md, "The test server") for the suite.

Environment:
  UCALL_SPEC_SERVER  path of the server binary (default target/debug/spec_server,
                     relative to the repository root)
  UCALL_ENGINES      comma-separated engines to run every test against (default poll,
                     plus uring where the test server can run it here)
  UCALL_THREADS      --threads for the servers (default 2)
  UCALL_SERVER_EXITS a file that gets one line per server stopped: "PID STATUS HOW", HOW
                     being "exited" (on its own or after SIGTERM) or "killed" (SIGKILL after
                     STOP_TIMEOUT); `make test-c` reads it beside the sanitizer logs
"""

from __future__ import annotations

import os
import queue
import re
import select
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
THREADS = int(os.environ.get("UCALL_THREADS", "2"))
START_TIMEOUT = 15.0
STOP_TIMEOUT = 5.0
# The start-up line every UCall server says on stderr (docs/operations.md):
# "ucall: listening on http://HOST:PORT (engine E, N threads[, TLS on port P][; ...])".
LISTENING = re.compile(r"ucall: listening on [a-z]+://(\[[^\]]+\]|[^\s:/]+):(\d+)(?: .*)?")


def record_exit(proc: subprocess.Popen, how: str) -> None:
    """Note how a server ended in UCALL_SERVER_EXITS, when that is set."""
    ledger = os.environ.get("UCALL_SERVER_EXITS")
    if ledger and proc.returncode is not None:
        with open(ledger, "a", encoding="utf-8") as out:
            out.write(f"{proc.pid} {proc.returncode} {how}\n")


def server_binary() -> Path:
    path = Path(os.environ.get("UCALL_SPEC_SERVER", "target/debug/spec_server"))
    return path if path.is_absolute() else REPO_ROOT / path


def uring_problem() -> str | None:
    """Why the test server cannot run the uring engine here, or None when it can."""
    binary = server_binary()
    if not binary.is_file():
        return f"{binary} not found"
    proc = subprocess.Popen(
        [str(binary), "--host", "127.0.0.1", "--port", "0", "--threads", "1", "--engine", "uring"],
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=REPO_ROOT,
    )
    # The start-up line may follow log records (the C server logs to stderr before it).
    said: list[str] = []
    deadline = time.monotonic() + START_TIMEOUT
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([proc.stderr], [], [], max(0.0, deadline - time.monotonic()))
            line = proc.stderr.readline().decode("utf-8", "replace") if ready else ""
            if not line:
                break
            if LISTENING.fullmatch(line.strip()):
                return None
            said.append(line)
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=STOP_TIMEOUT)
        record_exit(proc, "exited")
    return ("".join(said) + err.decode("utf-8", "replace")).strip() or "the server did not start"


def default_engines() -> list[str]:
    problem = uring_problem()
    if problem is None:
        return ["poll", "uring"]
    print(f"tests/python: testing the poll engine only; uring cannot run here: {problem}", file=sys.stderr)
    return ["poll"]


ENGINES = [e.strip() for e in os.environ.get("UCALL_ENGINES", "").split(",") if e.strip()] or default_engines()


def pytest_report_header() -> str:
    return f"ucall engines under test: {', '.join(ENGINES)}"


class ServerProcess:
    """One running test server. `address` is its (host, port)."""

    def __init__(self, engine: str, args: tuple[str, ...] = (), threads: int = THREADS):
        self.engine = engine
        self.args = tuple(str(a) for a in args)
        self.command = [
            str(server_binary()), "--host", "127.0.0.1", "--port", "0",
            "--threads", str(threads), "--engine", engine, *self.args,
        ]
        self.proc: subprocess.Popen | None = None
        self.address: tuple[str, int] | None = None
        self.stderr_lines: list[str] = []
        self._lines: queue.Queue = queue.Queue()
        self._stdout = tempfile.TemporaryFile()
        self._reader: threading.Thread | None = None

    def start(self) -> "ServerProcess":
        binary = server_binary()
        if not binary.is_file():
            raise RuntimeError(
                f"test server {binary} not found: build it (cargo build) or set UCALL_SPEC_SERVER"
            )
        self.proc = subprocess.Popen(
            self.command, stdin=subprocess.DEVNULL, stdout=self._stdout, stderr=subprocess.PIPE,
            cwd=REPO_ROOT,
        )
        self._reader = threading.Thread(target=self._read_stderr, daemon=True)
        self._reader.start()
        deadline = time.monotonic() + START_TIMEOUT
        try:
            while self.address is None:
                try:
                    line = self._lines.get(timeout=max(deadline - time.monotonic(), 0.01))
                except queue.Empty:
                    raise RuntimeError(
                        f"no 'listening on HOST:PORT' line within {START_TIMEOUT} s\n{self.diagnostics()}"
                    ) from None
                if line is None:
                    raise RuntimeError(f"server exited before listening\n{self.diagnostics()}")
                match = LISTENING.fullmatch(line.strip())
                if match:
                    self.address = (match.group(1).strip("[]"), int(match.group(2)))
        except BaseException:
            self.stop()
            raise
        return self

    def _read_stderr(self) -> None:
        assert self.proc is not None and self.proc.stderr is not None
        for raw in self.proc.stderr:
            line = raw.decode("utf-8", "replace").rstrip("\r\n")
            self.stderr_lines.append(line)
            self._lines.put(line)
        self._lines.put(None)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stderr_text(self) -> str:
        """What the server wrote to stderr so far (all of it once stopped)."""
        return "".join(line + "\n" for line in self.stderr_lines)

    def diagnostics(self) -> str:
        err = self.stderr_text()
        code = None if self.proc is None else self.proc.poll()
        out = b""
        if not self._stdout.closed:
            self._stdout.seek(0)
            out = self._stdout.read()
        return (
            f"command: {' '.join(self.command)}\nexit status: {code}\n"
            f"stdout (end): {out[-2000:].decode('utf-8', 'replace')}\nstderr (end): {err[-4000:]}"
        )

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(STOP_TIMEOUT)
                record_exit(self.proc, "exited")
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(STOP_TIMEOUT)
                record_exit(self.proc, "killed")
        elif self.proc is not None and not self._stdout.closed:
            record_exit(self.proc, "exited")
        if self._reader is not None:
            self._reader.join(STOP_TIMEOUT)
        if self.proc is not None and self.proc.stderr is not None:
            self.proc.stderr.close()
        self._stdout.close()


@pytest.fixture(scope="session", params=ENGINES)
def engine(request) -> str:
    """The I/O engine under test; every test runs once per engine of UCALL_ENGINES."""
    return request.param


@pytest.fixture(scope="session")
def server_process(engine):
    """The shared test server, without limit flags."""
    server = ServerProcess(engine).start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def server(server_process) -> tuple[str, int]:
    """(host, port) of the shared test server."""
    return server_process.address


@pytest.fixture(autouse=True)
def _shared_server_stays_up(request):
    """Fail a test during which the shared server exited (crash, abort, SIGPIPE...)."""
    if "server_process" not in request.fixturenames:
        yield
        return
    proc: ServerProcess = request.getfixturevalue("server_process")
    if not proc.alive():
        pytest.fail(f"the shared test server is no longer running\n{proc.diagnostics()}")
    yield
    if not proc.alive():
        pytest.fail(f"the shared test server exited during this test\n{proc.diagnostics()}")


@pytest.fixture
def spawn_server(engine):
    """Factory: spawn_server("--max-body-bytes", "1024") starts a dedicated server.

    Every server started this way is stopped after the test; one that exited on its own
    before that fails the test.
    """
    started: list[ServerProcess] = []

    def spawn(*args, threads: int = THREADS) -> ServerProcess:
        server = ServerProcess(engine, args, threads)
        started.append(server)
        return server.start()

    yield spawn
    crashed = [s for s in started if s.proc is not None and s.address is not None and not s.alive()]
    reports = [s.diagnostics() for s in crashed]
    for s in started:
        s.stop()
    if reports:
        pytest.fail("a dedicated test server exited during the test\n" + "\n\n".join(reports))
