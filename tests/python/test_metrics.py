# SPDX-License-Identifier: Apache-2.0
"""`GET /metrics`: the page parses with Prometheus's own text-format parser, and its counts
match the calls made over HTTP, raw TCP and WebSocket (each engine, each server)."""

from __future__ import annotations

import asyncio
import json
import time

from prometheus_client.parser import text_string_to_metric_families
from websockets.asyncio.client import connect

from wire import HttpConn, TcpConn, http_request


def scrape(address) -> tuple[dict[tuple[str, frozenset], float], str]:
    """The page's samples, {(sample name, labels): value}, and its Content-Type."""
    with HttpConn(address) as conn:
        response = conn.roundtrip(http_request("GET", "/metrics"), request_method="GET")
    assert response.status == 200, response
    samples = {}
    for family in text_string_to_metric_families(response.body.decode("utf-8")):
        for sample in family.samples:
            key = (sample.name, frozenset(sample.labels.items()))
            assert key not in samples, f"sample repeated: {key}"
            samples[key] = sample.value
    return samples, response.header("Content-Type") or ""


def value(samples, name: str, **labels) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


def call(method: str, params, id) -> bytes:
    return json.dumps({"jsonrpc": "2.0", "method": method, "params": params, "id": id}).encode()


def test_counts_match_the_calls_made_on_every_transport(spawn_server, engine):
    server = spawn_server()
    before, content_type = scrape(server.address)
    assert content_type.startswith("text/plain; version=0.0.4")

    # HTTP: 5 sums, a batch of 3 (two sums and an unknown method), a failing call, a call
    # with bad params, a notification, and a body that is not JSON.
    with HttpConn(server.address) as conn:
        for i in range(5):
            assert conn.call(call("sum", [i, 1], i))["result"] == i + 1
        batch = b"[" + call("sum", [1], 1) + b"," + call("sum", [2], 2) + b"," + call("foobar", [], 3) + b"]"
        assert len(conn.call(batch)) == 3
        assert conn.call(call("fail", [], "f"))["error"]["code"] == -32001
        response = conn.roundtrip(http_request("POST", "/", call("subtract", [1], "s")))
        assert response.json()["error"]["code"] == -32602
        response = conn.roundtrip(http_request("POST", "/", b'{"jsonrpc":"2.0","method":"update","params":[1]}'))
        assert response.status == 204
        response = conn.roundtrip(http_request("POST", "/", b"{oops"))
        assert response.json()["error"]["code"] == -32700

    # Raw TCP: 7 sums; every byte either way is counted.
    tcp_in = tcp_out = 0
    with TcpConn(server.address) as conn:
        for i in range(7):
            text = call("sum", [i, 2], i)
            conn.send(text + b"\n")
            tcp_in += len(text) + 1
            line = conn.read_line()
            assert json.loads(line)["result"] == i + 2
            tcp_out += len(line) + 1

    # WebSocket: 4 sums.
    async def websocket():
        host, port = server.address
        async with connect(f"ws://{host}:{port}/") as ws:
            for i in range(4):
                await ws.send(call("sum", [i, 3], i).decode())
                assert json.loads(await ws.recv())["result"] == i + 3

    asyncio.run(asyncio.wait_for(websocket(), 20))

    # Closes are seen by the server a moment after the client's.
    deadline = time.monotonic() + 5
    while True:
        after, _ = scrape(server.address)
        open_now = {t: value(after, "ucall_connections_open", transport=t) for t in ("tcp", "websocket")}
        if open_now == {"tcp": 0, "websocket": 0} or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert open_now == {"tcp": 0, "websocket": 0}

    def delta(name: str, **labels) -> float:
        return value(after, name, **labels) - value(before, name, **labels)

    sums = 5 + 2 + 7 + 4
    assert delta("ucall_calls_handled_total", method="sum", code="ok") == sums
    assert delta("ucall_calls_started_total", method="sum") == sums
    assert delta("ucall_call_duration_seconds_count", method="sum") == sums
    assert delta("ucall_call_duration_seconds_bucket", method="sum", le="+Inf") == sums
    assert delta("ucall_call_duration_seconds_sum", method="sum") > 0
    assert value(after, "ucall_calls_in_flight", method="sum") == 0
    assert delta("ucall_calls_handled_total", method="fail", code="server_error") == 1
    assert delta("ucall_calls_handled_total", method="subtract", code="invalid_params") == 1
    assert delta("ucall_calls_handled_total", method="update", code="ok") == 1
    # Names the server does not know share one label.
    assert delta("ucall_calls_handled_total", method="other", code="method_not_found") == 1
    assert not any(dict(labels).get("method") == "foobar" for _, labels in after)
    assert delta("ucall_requests_refused_total", reason="parse_error") == 1

    # Connections: the 3 above (the scrapes are HTTP connections too), bytes over TCP exactly.
    assert delta("ucall_connections_opened_total", transport="tcp") == 1
    assert delta("ucall_connections_opened_total", transport="websocket") == 1
    assert delta("ucall_connections_opened_total", transport="http") >= 3
    assert delta("ucall_connections_accepted_total") >= 3
    assert delta("ucall_received_bytes_total", transport="tcp") == tcp_in
    assert delta("ucall_sent_bytes_total", transport="tcp") == tcp_out
    assert delta("ucall_received_bytes_total", transport="websocket") > 0
    assert delta("ucall_sent_bytes_total", transport="http") > 0
    assert value(after, "ucall_engine_info", engine=engine, threads=server.command[server.command.index("--threads") + 1]) == 1


def test_buckets_are_cumulative_and_end_with_inf(spawn_server):
    server = spawn_server()
    with TcpConn(server.address) as conn:
        for i in range(3):
            conn.call(call("sum", [i], i))
    samples, _ = scrape(server.address)
    buckets = sorted(
        (float(dict(labels)["le"]), v)
        for (name, labels), v in samples.items()
        if name == "ucall_call_duration_seconds_bucket" and dict(labels)["method"] == "sum"
    )
    assert buckets[-1] == (float("inf"), 3)
    assert len(buckets) >= 10
    assert all(a[1] <= b[1] for a, b in zip(buckets, buckets[1:]))
