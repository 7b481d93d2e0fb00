# SPDX-License-Identifier: Apache-2.0
"""Worker processes (`ucall serve --workers N`, `server.run(workers=N)`), their supervisor
(restart on death, SIGHUP rolling restart, SIGTERM), `--reload`, and readiness
(`rpc.health`, `drain_delay`)."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable, Iterator

import pytest
from conftest import REPO_ROOT, Wire, once, once_error

from ucall import Server

APP = """
import os
from ucall import Server
server = Server(threads=1)

@server
def pid() -> int:
    return os.getpid()

@server
def version() -> str:
    return "one"
"""


#: The start-up line (docs/operations.md); a supervisor's lists its workers.
STARTED = re.compile(r"^ucall: listening on http://127\.0\.0\.1:(\d+) \(engine [^,]+, [^;]*(?:; workers ([\d, ]+))?;.*\)$", re.M)


class Supervised:
    """A supervisor process and what its start-up line said on stderr: the port and the
    worker pids (none listed by a server without workers)."""

    def __init__(self, proc: subprocess.Popen[str], log: Path) -> None:
        self.proc = proc
        self.log = log
        deadline = time.monotonic() + 60
        while not (found := STARTED.search(log.read_text())):
            assert time.monotonic() < deadline and proc.poll() is None, log.read_text()
            time.sleep(0.05)
        self.port = int(found.group(1))
        self.first = {int(p) for p in (found.group(2) or "").split(", ") if p}
        self.seen = set(self.first)

    def pids(self, calls: int = 60) -> set[int]:
        """The worker pids that answer ``calls`` calls, each on a new connection."""
        answered = {once(self.port, "pid") for _ in range(calls)}
        self.seen |= answered
        return answered

    def stop(self, signal_number: int = signal.SIGTERM) -> None:
        """Send the supervisor ``signal_number``: it exits 0 within 20 s, and no worker it
        was seen to run is left."""
        self.proc.send_signal(signal_number)
        assert self.proc.wait(20) == 0
        assert not any(alive(pid) for pid in self.seen)

    def wait_for(self, condition: Callable[[], bool], seconds: float = 20) -> None:
        """Until ``condition()`` holds; a connection reset meanwhile (a worker's listener
        closing with connections in its queue) counts as not yet."""
        deadline = time.monotonic() + seconds
        while True:
            try:
                if condition():
                    return
            except OSError:
                pass
            assert time.monotonic() < deadline, self.log.read_text()
            time.sleep(0.1)


@contextlib.contextmanager
def supervised(args: list[str], cwd: Path, engine: str = "poll") -> Iterator[Supervised]:
    """Run ``python ARGS`` (a supervisor) until its "listening on" line; at the end kill it
    and every worker pid seen, by pid."""
    env = dict(os.environ, UCALL_ENGINE=engine, PYTHONUNBUFFERED="1", PYTHONPATH=str(REPO_ROOT / "python"))
    log = cwd / "stderr.log"
    with open(log, "w") as stderr:
        proc = subprocess.Popen(
            [sys.executable, *args], cwd=cwd, stdout=subprocess.DEVNULL, stderr=stderr, text=True, env=env
        )
    running = None
    try:
        running = Supervised(proc, log)
        yield running
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(10)
        for pid in running.seen if running else ():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def serve_args(workers: int, *extra: str) -> list[str]:
    return ["-m", "ucall", "serve", "app:server", "--port", "0", "--workers", str(workers), *extra]


def health(port: int) -> dict:
    wire = Wire(port)
    try:
        return wire.call("rpc.health")
    finally:
        wire.close()


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_workers_share_the_port_and_one_that_dies_is_started_again(tmp_path, engine):
    (tmp_path / "app.py").write_text(APP)
    with supervised(serve_args(2), tmp_path, engine) as s:
        assert len(s.first) == 2 and s.proc.pid not in s.first
        # The kernel spreads new connections over both workers' listeners.
        assert s.pids() == s.first
        victim = min(s.first)
        os.kill(victim, signal.SIGKILL)
        s.wait_for(lambda: len(s.pids(20) - s.first) == 1)
        assert f"worker {victim} was killed by signal 9; starting another" in s.log.read_text()
        assert len(s.pids()) == 2 and victim not in s.pids()
        s.stop()


def test_sighup_replaces_the_workers_one_at_a_time(tmp_path):
    (tmp_path / "app.py").write_text(APP)
    with supervised(serve_args(2), tmp_path) as s:
        # The new code is served after the restart: each worker imports the module afresh.
        (tmp_path / "app.py").write_text(APP.replace('"one"', '"two"'))
        s.proc.send_signal(signal.SIGHUP)
        served = set()
        while "restarted: workers" not in s.log.read_text():
            # Served all along (no load balancer here: a call may meet a listener as it
            # closes, so only the end state is asserted).
            with contextlib.suppress(OSError):
                served.add(once(s.port, "version"))
            assert s.proc.poll() is None
            time.sleep(0.01)
        now = s.pids()
        assert len(now) == 2 and not now & s.first, (now, s.first)
        assert once(s.port, "version") == "two" and "two" in served | {"two"}
        assert s.proc.poll() is None
        s.stop()


def test_a_restart_whose_new_worker_fails_keeps_the_old_ones(tmp_path):
    (tmp_path / "app.py").write_text(APP)
    with supervised(serve_args(1), tmp_path) as s:
        (tmp_path / "app.py").write_text("raise SystemExit('broken')\n")
        s.proc.send_signal(signal.SIGHUP)
        s.wait_for(lambda: "did not start serving: the restart stops" in s.log.read_text())
        assert s.pids(5) == s.first  # the old worker still serves
        s.stop()


def test_reload_restarts_on_a_source_change(tmp_path):
    (tmp_path / "app.py").write_text(APP)
    with supervised(["-m", "ucall", "serve", "app:server", "--port", "0", "--reload"], tmp_path) as s:
        assert len(s.first) == 1 and once(s.port, "version") == "one"
        time.sleep(0.05)  # a later mtime, even on coarse clocks
        (tmp_path / "app.py").write_text(APP.replace('"one"', '"two"'))
        s.wait_for(lambda: "restarted: workers" in s.log.read_text())
        assert once(s.port, "version") == "two"
        assert "app.py changed: restarting the workers" in s.log.read_text()
        s.pids(5)
        s.stop(signal.SIGINT)


def test_run_workers_from_python(tmp_path):
    (tmp_path / "main.py").write_text(
        APP + "\nserver.run(workers=2)\n"
    )
    with supervised(["main.py"], tmp_path) as s:
        found = s.pids()
        assert len(found) == 2 and s.proc.pid not in found
        s.seen |= found
        s.stop()


def test_a_port_in_use_is_refused_with_workers(tmp_path):
    (tmp_path / "app.py").write_text(APP)
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        result = subprocess.run(
            [sys.executable, "-m", "ucall", "serve", "app:server", "--port", str(port), "--workers", "2"],
            cwd=tmp_path, capture_output=True, text=True, timeout=30,
            env=dict(os.environ, PYTHONPATH=str(REPO_ROOT / "python")),
        )
    assert result.returncode == 2 and "another server listens on that port" in result.stderr, result.stderr


# ---------------------------------------------------------------- readiness and drain


def test_rpc_health_and_readiness_checks(make_server):
    server = make_server()
    ready = {"model": False}

    @server.readiness_check
    def model_loaded() -> bool:
        return ready["model"]

    server.start()
    error = once_error(server.port, "rpc.health")
    assert error["data"] == {"status": "not ready", "check": "model_loaded"}
    ready["model"] = True
    assert once(server.port, "rpc.health") == {"status": "serving"}
    # Over HTTP, GET /rpc.health answers 200 when ready: what a load balancer checks.
    wire = Wire(server.port)
    wire.connection.request("GET", "/rpc.health")
    reply = wire.connection.getresponse()
    assert reply.status == 200 and b"serving" in reply.read()
    ready["model"] = False
    wire.connection.request("GET", "/rpc.health")
    reply = wire.connection.getresponse()
    assert reply.status >= 500 and b"not ready" in reply.read()
    # GET /readyz says the same, by the core's one rule: 503 with why, then 200.
    wire.connection.request("GET", "/readyz")
    reply = wire.connection.getresponse()
    assert (reply.status, json.loads(reply.read())) == (503, {"status": "not ready", "check": "model_loaded"})
    ready["model"] = True
    wire.connection.request("GET", "/readyz")
    reply = wire.connection.getresponse()
    assert (reply.status, json.loads(reply.read())) == (200, {"status": "serving"})
    server._draining = True
    wire.connection.request("GET", "/readyz")
    reply = wire.connection.getresponse()
    assert (reply.status, json.loads(reply.read())) == (503, {"status": "draining"})
    assert once_error(server.port, "rpc.health")["data"] == {"status": "draining"}
    wire.connection.request("GET", "/healthz")
    reply = wire.connection.getresponse()
    assert (reply.status, json.loads(reply.read())) == (200, {"status": "alive"})
    wire.close()
    assert "rpc.health" not in server.procedures


def test_probe_paths_move_turn_off_and_answer_404_when_asked(make_server):
    server = make_server(healthz_path=None, readyz_path="/ready", readyz_not_found=True)

    @server.readiness_check
    def broken() -> bool:
        raise RuntimeError("no database")

    server.start()
    wire = Wire(server.port)
    for path, status in (("/healthz", 404), ("/readyz", 404), ("/ready", 404)):
        wire.connection.request("GET", path)
        reply = wire.connection.getresponse()
        body = reply.read()
        assert reply.status == status, (path, body)
    assert json.loads(body) == {"status": "not ready", "check": "broken", "error": "no database"}
    wire.close()
    with pytest.raises(ValueError, match="readyz_path"):
        Server(readyz_path="ready")

    with pytest.raises(TypeError):
        server.readiness_check(1)  # type: ignore[arg-type]


def test_sigterm_drains_for_drain_delay_then_stops(tmp_path):
    (tmp_path / "main.py").write_text(
        APP.replace("Server(threads=1)", "Server(port=0, threads=1, drain_delay=1.5)")
        + "\nserver.run()\n"
    )
    with supervised(["main.py"], tmp_path) as s:
        assert once(s.port, "rpc.health") == {"status": "serving"}
        sent = time.monotonic()
        s.proc.send_signal(signal.SIGTERM)
        s.wait_for(lambda: health(s.port).get("error", {}).get("data") == {"status": "draining"}, 1)
        assert isinstance(once(s.port, "pid"), int)  # still serving calls while draining
        assert s.proc.wait(20) == 0
        assert time.monotonic() - sent >= 1.4
