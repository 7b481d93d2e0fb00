# SPDX-License-Identifier: Apache-2.0
"""`GET /metrics` from a Python server: Python handlers (run off the I/O thread, their
replies deferred) are counted and timed to their completion; the path moves or turns off."""

from __future__ import annotations

import json
import logging
import os
import re
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector

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


def test_batch_sizes_and_queue_waits_are_histograms(make_server, wire):
    server = make_server()

    @server.batch(max_size=5, max_wait_ms=5)
    def square(x: list[int]) -> list[int]:
        if 0 in x:
            time.sleep(0.2)  # a slow batch, that the next calls queue behind
        return [v * v for v in x]

    @server
    def double(x: int) -> int:
        return 2 * x

    w, slow = wire(server), wire(server)
    with ThreadPoolExecutor(1) as pool:
        held = pool.submit(slow.result, "square", [0])
        time.sleep(0.05)
        calls = [{"jsonrpc": "2.0", "method": "square", "params": [i], "id": i} for i in range(1, 6)]
        status, body = w.post(json.dumps(calls))
        assert held.result(10) == 0
    assert status == 200
    assert [r["result"] for r in json.loads(body)] == [1, 4, 9, 16, 25]
    assert w.result("double", [4]) == 8
    status, samples = scrape(w)
    assert status == 200
    # A batch of 1, then the five queued behind it as one: buckets 1, 2, 4, max_size 5.
    sizes = [value(samples, "ucall_batch_size_bucket", method="square", le=le) for le in ("1", "2", "4", "5", "+Inf")]
    assert sizes == [1, 1, 1, 2, 2], samples
    assert value(samples, "ucall_batch_size_count", method="square") == 2
    assert value(samples, "ucall_batch_size_sum", method="square") == 6
    # Each call's wait: the five waited for the slow batch (about 150 ms), the first for none.
    assert value(samples, "ucall_batch_queue_wait_seconds_count", method="square") == 6
    assert value(samples, "ucall_batch_queue_wait_seconds_sum", method="square") >= 5 * 0.1
    assert value(samples, "ucall_batch_queue_wait_seconds_bucket", method="square", le="0.05") <= 1
    assert value(samples, "ucall_batch_queue_wait_seconds_bucket", method="square", le="+Inf") == 6
    # An ordinary procedure has no batch histograms.
    assert ("ucall_batch_size_count", frozenset({("method", "double")})) not in samples


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


def test_the_applications_own_metrics_follow_the_servers(make_server, wire, caplog):
    registry = CollectorRegistry()
    loaded = Gauge("app_models_loaded", "Models in memory.", registry=registry)
    tokens = Counter("app_tokens", "Tokens generated.", ["model"], registry=registry)
    server = make_server(metrics_registry=registry, metrics_buckets=[0.001, 0.05])

    @server
    def generate(n: int) -> int:
        tokens.labels(model="tiny").inc(n)
        return n

    loaded.set(2)
    w = wire(server)
    assert w.result("generate", [5]) == 5
    status, samples = scrape(w)
    assert status == 200
    assert value(samples, "app_models_loaded") == 2
    assert value(samples, "app_tokens_total", model="tiny") == 5
    assert value(samples, "ucall_calls_handled_total", method="generate", code="ok") == 1
    bounds = {
        dict(labels)["le"]
        for (name, labels), _ in samples.items()
        if name == "ucall_call_duration_seconds_bucket" and dict(labels)["method"] == "generate"
    }
    assert bounds == {"0.001", "0.05", "+Inf"}

    # A registry that fails is logged; the page still shows the server's metrics.
    class Broken(Collector):
        def collect(self):
            raise RuntimeError("collector down")

    registry.register(Broken())
    with caplog.at_level(logging.WARNING, logger="ucall"):
        status, samples = scrape(w)
    assert status == 200 and value(samples, "ucall_calls_handled_total", method="generate", code="ok") == 1
    assert "app_models_loaded" not in {name for name, _ in samples}
    assert any("collector down" in r.getMessage() for r in caplog.records), caplog.text


def test_buckets_and_registries_that_cannot_work_are_refused(make_server):
    for buckets, why in (([0.5, 0.001], "ascend"), ([0.1, 0.1], "ascend"), ([0], "above 0"), ([float("inf")], "finite")):
        with pytest.raises(ValueError, match=why):
            make_server(metrics_buckets=buckets).start()
    with pytest.raises(TypeError, match="metrics_registry must be a prometheus_client CollectorRegistry"):
        Server(metrics_registry="REGISTRY")


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
    serve = ["-m", "ucall", "serve", "app:server", "--port", "0", "--threads", "1"]
    serve += ["--workers", "2", "--metrics-port", "0"]
    with serving(serve, engine, cwd=tmp_path) as (proc, port):
        said = rf"ucall: listening on http://\S+:{port} \(.*; their metrics on port (\d+); Ctrl-C stops\)\n$"
        found = re.search(said, proc.started)
        assert found, proc.started
        metrics_port = int(found.group(1))
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


def test_pages_add_up_by_series():
    one = "# HELP a_total A.\n# TYPE a_total counter\na_total{m=\"x\"} 2\n# HELP g G.\n# TYPE g gauge\ng 1\n"
    two = "# HELP a_total A.\n# TYPE a_total counter\na_total{m=\"y\"} 1\na_total{m=\"x\"} 3\n# HELP g G.\n# TYPE g gauge\ng 1.5\n"
    assert add_pages([one, two, ""]) == (
        "# HELP a_total A.\n# TYPE a_total counter\na_total{m=\"x\"} 5\na_total{m=\"y\"} 1\n"
        "# HELP g G.\n# TYPE g gauge\ng 2.5\n"
    )
