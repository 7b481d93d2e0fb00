# SPDX-License-Identifier: Apache-2.0
"""Tracing (docs/operations.md, "Tracing") with the real OpenTelemetry SDK and its
in-memory exporter: a SERVER span per call, child of the caller's W3C trace context on
every transport (the ``traceparent`` header field, the WebSocket upgrade request, a
request's ``"_meta"`` member), the handler's spans its children, a client call from a
handler continuing the trace to a second server, the JSON-RPC semantic conventions'
attributes, malformed values ignored, batches and streams shown as they ran."""

from __future__ import annotations

import asyncio
import http.client
import json
import socket
import subprocess
import sys
import time

import pytest
from conftest import tcp_exchange
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode
from websockets.sync.client import connect

from ucall import Context, RPCError
from ucall.client import AsyncClient, Client

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT_ID = "00f067aa0ba902b7"
TRACEPARENT = f"00-{TRACE_ID}-{PARENT_ID}-01"


@pytest.fixture
def exporter():
    """The SDK configured as its documentation says, spans kept in memory; OpenTelemetry's
    global provider is reset afterwards (as its own test utilities do), so that servers
    of other tests do not trace."""
    from opentelemetry.util._once import Once

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    yield exporter
    provider.shutdown()
    trace._TRACER_PROVIDER = None
    trace._TRACER_PROVIDER_SET_ONCE = Once()


def spans_named(exporter: InMemorySpanExporter, name: str, count: int = 1, timeout: float = 5) -> list:
    """The finished spans named `name`, once there are `count` (a span ends as its reply leaves)."""
    deadline = time.monotonic() + timeout
    while True:
        found = [s for s in exporter.get_finished_spans() if s.name == name]
        if len(found) >= count or time.monotonic() > deadline:
            assert len(found) == count, [(s.name, s.attributes) for s in exporter.get_finished_spans()]
            return found
        time.sleep(0.01)


def post(port: int, body: object, headers: dict[str, str] | None = None) -> tuple[int, object]:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        connection.request("POST", "/", json.dumps(body), {"Content-Type": "application/json", **(headers or {})})
        reply = connection.getresponse()
        return reply.status, json.loads(reply.read())
    finally:
        connection.close()


def request(method: str, params: object = None, id: int = 1, meta: object = None) -> dict:
    message: dict = {"jsonrpc": "2.0", "method": method, "id": id}
    if params is not None:
        message["params"] = params
    if meta is not None:
        message["_meta"] = meta
    return message


def traced_server(make_server):
    server = make_server()
    tracer = trace.get_tracer("test")

    @server
    def work(x: int) -> int:
        with tracer.start_as_current_span("inside"):
            return x + 1

    @server
    def fail() -> None:
        raise RPCError(-32001, "boom")

    return server.start()


def test_http_caller_context_is_the_parent_and_the_handler_span_a_child(exporter, make_server):
    server = traced_server(make_server)
    status, reply = post(server.port, request("work", [1], id=7), {"traceparent": TRACEPARENT, "tracestate": "k=v"})
    assert (status, reply["result"]) == (200, 2)
    (span,) = spans_named(exporter, "work")
    (inside,) = spans_named(exporter, "inside")
    assert span.kind == SpanKind.SERVER
    assert f"{span.context.trace_id:032x}" == TRACE_ID
    assert f"{span.parent.span_id:016x}" == PARENT_ID and span.parent.is_remote
    assert span.context.trace_state.get("k") == "v", "tracestate carried on"
    assert inside.parent.span_id == span.context.span_id and inside.context.trace_id == span.context.trace_id
    attributes = dict(span.attributes)
    peer = attributes.pop("network.peer.port")
    assert isinstance(peer, int) and peer > 0
    for timing in ("ucall.queued_ns", "ucall.handler_ns", "ucall.reply_ns"):
        value = attributes.pop(timing)
        assert isinstance(value, int) and 0 <= value < 5_000_000_000, (timing, value)
    assert attributes == {
        "rpc.system": "jsonrpc",
        "rpc.method": "work",
        "rpc.jsonrpc.version": "2.0",
        "rpc.jsonrpc.request_id": "7",
        "server.address": "127.0.0.1",
        "server.port": server.port,
        "network.transport": "tcp",
        "network.peer.address": "127.0.0.1",
        "network.protocol.name": "http",
        "ucall.transport": "http",
    }
    assert span.status.status_code == StatusCode.UNSET


def test_an_error_is_recorded_with_its_code(exporter, make_server):
    server = traced_server(make_server)
    _, reply = post(server.port, request("fail"))
    assert reply["error"]["code"] == -32001
    (span,) = spans_named(exporter, "fail")
    assert span.attributes["rpc.jsonrpc.error_code"] == -32001
    assert span.attributes["rpc.jsonrpc.error_message"] == "boom"
    assert span.status.status_code == StatusCode.ERROR
    assert span.parent is None, "no caller context: a new trace"


@pytest.mark.parametrize(
    "headers",
    [
        {"traceparent": f"00-{TRACE_ID}-{PARENT_ID}-1"},
        {"traceparent": f"00-{TRACE_ID.upper()}-{PARENT_ID}-01"},
        {"traceparent": f"ff-{TRACE_ID}-{PARENT_ID}-01"},
        {"traceparent": f"00-{'0' * 32}-{PARENT_ID}-01"},
        {"traceparent": "garbage", "tracestate": "k=v"},
    ],
)
def test_malformed_trace_context_is_ignored(exporter, make_server, headers):
    server = traced_server(make_server)
    status, reply = post(server.port, request("work", [1]), headers)
    assert (status, reply["result"]) == (200, 2), "never an error"
    (span,) = spans_named(exporter, "work")
    assert span.parent is None and f"{span.context.trace_id:032x}" != TRACE_ID


def test_raw_tcp_and_websocket_carry_it(exporter, make_server):
    server = traced_server(make_server)
    other = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    payload = json.dumps(request("work", [1], id=1, meta={"traceparent": TRACEPARENT})).encode() + b"\n"
    (reply,) = tcp_exchange(server.port, payload, 1)
    assert reply["result"] == 2
    with connect(f"ws://127.0.0.1:{server.port}/", additional_headers={"traceparent": other}) as ws:
        ws.send(json.dumps(request("work", [2], id=2)))
        assert json.loads(ws.recv())["result"] == 3
        ws.send(json.dumps(request("work", [3], id=3, meta={"traceparent": TRACEPARENT})))
        assert json.loads(ws.recv())["result"] == 4
    spans = {s.attributes["rpc.jsonrpc.request_id"]: s for s in spans_named(exporter, "work", 3)}
    assert spans["1"].attributes["ucall.transport"] == "tcp" and "network.protocol.name" not in spans["1"].attributes
    assert f"{spans['1'].parent.span_id:016x}" == PARENT_ID
    assert spans["2"].attributes["network.protocol.name"] == "websocket"
    assert f"{spans['2'].parent.span_id:016x}" == "b7ad6b7169203331", "the upgrade request's"
    assert f"{spans['3'].parent.span_id:016x}" == PARENT_ID, "the message's own, over the upgrade's"


def test_spans_say_how_long_a_call_was_queued_and_in_its_handler(exporter, make_server):
    """One thread runs the calls: in one batch, the quick call waits behind the slow one; each span
    reports the time from the server reading the request to the handler starting
    (``ucall.queued_ns``) and the handler's run (``ucall.handler_ns``)."""
    server = make_server(threads=1, max_threads=1)

    @server
    def slow_step() -> int:
        time.sleep(0.05)
        return 1

    @server
    def quick_step() -> int:
        return 2

    server.start()
    status, replies = post(server.port, [request("slow_step", id=1), request("quick_step", id=2)])
    assert status == 200 and [r["result"] for r in replies] == [1, 2]
    (slow,) = spans_named(exporter, "slow_step")
    (quick,) = spans_named(exporter, "quick_step")
    ms = 1_000_000
    assert slow.attributes["ucall.handler_ns"] >= 50 * ms
    assert slow.attributes["ucall.queued_ns"] < 50 * ms
    assert quick.attributes["ucall.queued_ns"] >= 50 * ms, "it waited behind slow_step"
    assert quick.attributes["ucall.handler_ns"] < 50 * ms


def test_the_span_shows_the_time_writing_the_reply(exporter, make_server):
    """A result of a million numbers takes the core a while to write: ``ucall.reply_ns``,
    inside the span, which ends after it."""
    server = make_server()

    @server
    def many() -> list:
        return list(range(1_000_000))

    server.start()
    status, reply = post(server.port, request("many"))
    assert status == 200 and len(reply["result"]) == 1_000_000
    (span,) = spans_named(exporter, "many")
    reply_ns, handler_ns = span.attributes["ucall.reply_ns"], span.attributes["ucall.handler_ns"]
    assert reply_ns >= 1_000_000, "writing a million numbers took a millisecond or more"
    assert span.end_time - span.start_time >= reply_ns + handler_ns


def test_each_call_of_a_batch_has_its_span_and_own_context(exporter, make_server):
    server = traced_server(make_server)
    other = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    batch = [request("work", [1], id=1, meta={"traceparent": other}), request("work", [2], id=2)]
    status, replies = post(server.port, batch, {"traceparent": TRACEPARENT})
    assert status == 200 and [r["result"] for r in replies] == [2, 3]
    spans = {s.attributes["rpc.jsonrpc.request_id"]: s for s in spans_named(exporter, "work", 2)}
    assert f"{spans['1'].context.trace_id:032x}" == "0af7651916cd43dd8448eb211c80319c"
    assert f"{spans['2'].context.trace_id:032x}" == TRACE_ID


def test_batch_procedure_calls_link_to_the_batch_that_ran_them(exporter, make_server):
    server = make_server()
    tracer = trace.get_tracer("test")

    @server.batch(max_size=4, max_wait_ms=200)
    def square(x: list[int]) -> list[int]:
        with tracer.start_as_current_span("inside batch"):
            return [v * v for v in x]

    server.start()
    batch = [request("square", [i], id=i, meta={"traceparent": TRACEPARENT}) for i in range(1, 4)]
    status, replies = post(server.port, batch)
    assert status == 200 and sorted(r["result"] for r in replies) == [1, 4, 9]
    calls = spans_named(exporter, "square", 3)
    runs = [s for s in exporter.get_finished_spans() if s.name == "batch square"]
    assert runs, "a span for the batch run"
    run_ids = {r.context.span_id for r in runs}
    for call in calls:
        assert call.kind == SpanKind.SERVER and f"{call.parent.span_id:016x}" == PARENT_ID
        assert len(call.links) == 1 and call.links[0].context.span_id in run_ids, call.links
        run = next(r for r in runs if r.context.span_id == call.links[0].context.span_id)
        assert call.context.span_id in {link.context.span_id for link in run.links}, "linked both ways"
        assert call.end_time >= run.end_time, "a call's span lasts until its batch's result"
    assert sum(r.attributes["ucall.batch.size"] for r in runs) == 3
    for inside in spans_named(exporter, "inside batch", len(runs)):
        assert inside.parent.span_id in run_ids, "the function runs inside the batch's span"


def test_a_streamed_call_has_one_span_for_the_whole_stream(exporter, make_server):
    server = make_server()
    tracer = trace.get_tracer("test")

    @server
    def count(n: int):
        for i in range(n):
            with tracer.start_as_current_span("item"):
                yield i
        return "done"

    server.start()
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
        sock.sendall(json.dumps(request("count", [3], id=5, meta={"traceparent": TRACEPARENT})).encode() + b"\n")
        reader = sock.makefile("rb")
        lines = [json.loads(reader.readline()) for _ in range(4)]
    assert lines[-1]["result"] == "done"
    (span,) = spans_named(exporter, "count")
    assert span.attributes["ucall.stream.items"] == 3 and f"{span.parent.span_id:016x}" == PARENT_ID
    items = spans_named(exporter, "item", 3)
    assert all(item.parent.span_id == span.context.span_id for item in items)
    assert span.end_time >= max(item.end_time for item in items)


@pytest.mark.parametrize("kind", ["generator", "async generator"])
def test_a_stream_that_fails_or_whose_caller_leaves_says_so_on_its_span(exporter, make_server, kind):
    server = make_server()

    if kind == "generator":

        def broken(n: int):
            yield from range(n)
            raise RPCError(-32050, "broke")

        def endless():
            while True:
                yield "tick"
                time.sleep(0.005)

    else:

        async def broken(n: int):
            for i in range(n):
                yield i
            raise RPCError(-32050, "broke")

        async def endless():
            while True:
                yield "tick"
                await asyncio.sleep(0.005)

    server.route(broken)
    server.route(endless)
    server.start()
    lines = tcp_exchange(server.port, json.dumps(request("broken", [2], id=5)).encode() + b"\n", 3)
    assert lines[-1]["error"]["code"] == -32050
    (span,) = spans_named(exporter, "broken")
    assert span.attributes["ucall.stream.items"] == 2
    assert span.attributes["rpc.jsonrpc.error_code"] == -32050
    assert "ucall.stream.cancelled" not in span.attributes
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
        sock.sendall(json.dumps(request("endless", id=6)).encode() + b"\n")
        assert json.loads(sock.makefile("rb").readline())["params"] == {"id": 6, "item": "tick"}
    (span,) = spans_named(exporter, "endless")
    assert span.attributes["ucall.stream.cancelled"] is True
    assert span.attributes["ucall.stream.items"] >= 1
    assert "rpc.jsonrpc.error_code" not in span.attributes


@pytest.mark.parametrize("transport", ["http", "tcp", "ws", "async"])
def test_a_client_call_in_a_handler_continues_the_trace(exporter, make_server, transport):
    leaf_server = make_server()

    @leaf_server
    def leaf(x: int) -> int:
        return x * 10

    leaf_server.start()
    front = make_server()

    @front
    def hop(x: int) -> int:
        if transport == "async":

            async def go() -> int:
                async with AsyncClient(port=leaf_server.port) as client:
                    return (await client.leaf(x)).json

            return asyncio.run(go())
        options = {"http": {}, "tcp": {"use_http": False}, "ws": {}}[transport]
        uri = "ws://127.0.0.1" if transport == "ws" else "127.0.0.1"
        with Client(uri, leaf_server.port, **options) as client:
            return client.leaf(x).json

    front.start()
    _, reply = post(front.port, request("hop", [2]), {"traceparent": TRACEPARENT})
    assert reply["result"] == 20
    (hop_span,) = spans_named(exporter, "hop")
    (leaf_span,) = spans_named(exporter, "leaf")
    assert f"{leaf_span.context.trace_id:032x}" == TRACE_ID, "one trace across both services"
    assert leaf_span.parent.span_id == hop_span.context.span_id


def test_tracing_false_makes_no_span(exporter, make_server):
    server = make_server(tracing=False)

    @server
    def work(x: int) -> int:
        return x

    server.start()
    post(server.port, request("work", [1]), {"traceparent": TRACEPARENT})
    time.sleep(0.1)
    assert exporter.get_finished_spans() == ()


def test_nothing_is_imported_without_opentelemetry_in_use():
    code = (
        "import sys, json, urllib.request\n"
        "from ucall import Server\n"
        "from ucall.client import Client\n"
        "server = Server(port=0)\n"
        "@server\n"
        "def work(x: int) -> int:\n"
        "    return x\n"
        "server.start()\n"
        "assert Client(port=server.port).work(1).json == 1\n"
        "server.stop()\n"
        "print(sorted(m for m in sys.modules if m.startswith('opentelemetry')))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


@pytest.mark.parametrize("kind", ["call", "async", "stream", "own header"])
def test_http_clients_send_the_context_as_header_fields_too(exporter, make_server, kind):
    """Over HTTP the client also sends the current context as the ``traceparent`` and
    ``tracestate`` header fields (W3C Trace Context's place on HTTP), so that proxies and
    servers that read no ``"_meta"`` continue the trace; once, and not over a header the
    caller gave itself."""
    from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags, TraceState

    seen: list[tuple[str | None, str | None]] = []
    server = make_server()

    @server
    def leaf(x: int, ctx: Context) -> int:
        seen.append((ctx.headers.get("traceparent"), ctx.headers.get("tracestate")))
        return x

    @server
    def items(n: int, ctx: Context):
        seen.append((ctx.headers.get("traceparent"), ctx.headers.get("tracestate")))
        yield from range(n)

    server.start()
    parent = SpanContext(
        int(TRACE_ID, 16),
        int(PARENT_ID, 16),
        is_remote=True,
        trace_flags=TraceFlags(1),
        trace_state=TraceState([("vendor", "v1")]),
    )
    own = f"00-{'1' * 32}-{'2' * 16}-01"
    with trace.use_span(NonRecordingSpan(parent)):
        if kind == "async":

            async def go() -> int:
                async with AsyncClient(port=server.port) as client:
                    return (await client.leaf(1)).json

            assert asyncio.run(go()) == 1
        else:
            with Client(port=server.port) as client:
                if kind == "call":
                    assert client.leaf(1).json == 1
                elif kind == "stream":
                    assert list(client.stream("items", 2)) == [0, 1]
                else:
                    assert client.call_with_headers("leaf", [1], {"traceparent": own}).json == 1
    expected = own if kind == "own header" else TRACEPARENT
    assert seen == [(expected, None if kind == "own header" else "vendor=v1")]
