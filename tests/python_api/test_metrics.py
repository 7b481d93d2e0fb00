# SPDX-License-Identifier: Apache-2.0
"""`GET /metrics` from a Python server: Python handlers (run off the I/O thread, their
replies deferred) are counted and timed to their completion; the path moves or turns off."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time

import pytest
from prometheus_client.parser import text_string_to_metric_families

from conftest import REPO_ROOT, Wire, serving
from ucall import RPCError, Server
from ucall._workers import add_pages


def scrape(wire: Wire, path: str = "/metrics") -> tuple[int, dict[tuple[str, frozenset], float]]:
    wire.connection.request("GET", path)
    reply = wire.connection.getresponse()
    body = reply.read().decode()
    if reply.status != 200:
        return reply.status, {}
    samples = {}
    for family in text_string_to_metric_families(body):
        for sample in family.samples:
            samples[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return reply.status, samples


def value(samples, name: str, **labels) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


def test_python_handlers_are_counted_and_timed(make_server, wire):
    server = make_server()

    @server
    def nap(seconds: float) -> float:
        time.sleep(seconds)
        return seconds

    @server
    def refuse() -> None:
        raise RPCError(-32010, "no")

    @server
    def crash() -> None:
        raise ValueError("bug")

    w = wire(server)
    for _ in range(3):
        assert w.result("nap", {"seconds": 0.02}) == 0.02
    assert w.error("refuse")["code"] == -32010
    assert w.error("crash")["code"] == -32603
    assert w.error("nap", {"seconds": "x"})["code"] == -32602
    status, samples = scrape(w)
    assert status == 200
    assert value(samples, "ucall_calls_handled_total", method="nap", code="ok") == 3
    assert value(samples, "ucall_calls_handled_total", method="nap", code="invalid_params") == 1
    assert value(samples, "ucall_calls_handled_total", method="refuse", code="server_error") == 1
    assert value(samples, "ucall_calls_handled_total", method="crash", code="internal_error") == 1
    assert value(samples, "ucall_calls_in_flight", method="nap") == 0
    # Three naps of 20 ms: timed until their replies, not until they were handed over.
    assert value(samples, "ucall_call_duration_seconds_sum", method="nap") >= 0.06
    assert value(samples, "ucall_call_duration_seconds_bucket", method="nap", le="0.01") <= 1


def test_the_path_moves_or_turns_off(make_server, wire):
    server = make_server(metrics_path=None)
    w = wire(server)
    assert scrape(w)[0] == 404
    moved = make_server(metrics_path="/stats")
    w = wire(moved)
    assert scrape(w)[0] == 404
    assert scrape(w, "/stats")[0] == 200
    with pytest.raises(ValueError, match="metrics_path"):
        Server(metrics_path="stats")


def test_ucall_serve_moves_the_path(tmp_path, engine):
    (tmp_path / "app.py").write_text("from ucall import Server\nserver = Server()\n")
    serve = ["-m", "ucall", "serve", "app:server", "--port", "0", "--threads", "1", "--metrics-path", "/stats"]
    with serving(serve, engine, cwd=tmp_path) as (proc, port):
        w = Wire(port)
        assert (scrape(w)[0], scrape(w, "/stats")[0]) == (404, 200)
        w.close()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(10) == 0
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT / "python"))
    result = subprocess.run(
        [sys.executable, "-m", "ucall", "serve", "app:server", "--metrics-path", "stats"],
        cwd=tmp_path, capture_output=True, text=True, env=env, timeout=30,
    )
    assert result.returncode == 2 and "--metrics-path must start with '/'" in result.stderr, result.stderr


def test_worker_processes_totals_on_the_supervisors_port(tmp_path, engine):
    (tmp_path / "app.py").write_text(
        "from ucall import Server\nserver = Server()\n\n@server\ndef hello(name: str) -> str:\n    return name\n"
    )
    env = dict(os.environ, UCALL_ENGINE=engine, PYTHONUNBUFFERED="1", PYTHONPATH=str(REPO_ROOT / "python"))
    command = [sys.executable, "-m", "ucall", "serve", "app:server", "--port", "0", "--threads", "1"]
    command += ["--workers", "2", "--metrics-port", "0"]
    proc = subprocess.Popen(command, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        line = proc.stdout.readline()
        found = re.fullmatch(r"listening on \S+:(\d+) \(.*; their metrics on port (\d+)\)\n", line)
        assert found, line + proc.stderr.read()
        port, metrics_port = int(found.group(1)), int(found.group(2))
        # Fresh connections, which the kernel spreads between the two workers.
        for i in range(20):
            w = Wire(port)
            assert w.result("hello", [str(i)]) == str(i)
            w.close()
        w = Wire(metrics_port)
        status, totals = scrape(w)
        w.close()
        assert status == 200
        assert value(totals, "ucall_calls_handled_total", method="hello", code="ok") == 20
        assert value(totals, "ucall_call_duration_seconds_count", method="hello") == 20
        # Both workers' pages were added: one engine_info each.
        assert sum(v for (name, _), v in totals.items() if name == "ucall_engine_info") == 2
        # The shared port answers one worker's own page, whichever the kernel picked.
        w = Wire(port)
        status, one = scrape(w)
        w.close()
        assert sum(v for (name, _), v in one.items() if name == "ucall_engine_info") == 1
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(20) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stdout.close()
        proc.stderr.close()


def test_pages_add_up_by_series():
    one = "# HELP a_total A.\n# TYPE a_total counter\na_total{m=\"x\"} 2\n# HELP g G.\n# TYPE g gauge\ng 1\n"
    two = "# HELP a_total A.\n# TYPE a_total counter\na_total{m=\"y\"} 1\na_total{m=\"x\"} 3\n# HELP g G.\n# TYPE g gauge\ng 1.5\n"
    assert add_pages([one, two, ""]) == (
        "# HELP a_total A.\n# TYPE a_total counter\na_total{m=\"x\"} 5\na_total{m=\"y\"} 1\n"
        "# HELP g G.\n# TYPE g gauge\ng 2.5\n"
    )
