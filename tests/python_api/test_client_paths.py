# SPDX-License-Identifier: Apache-2.0
"""Which connection each of ``Client``'s and ``AsyncClient``'s ways to call takes, and what
it sends for a numpy array or bytes param: the native connection its other calls share
(the server sees one peer port) or a Python socket of its own, and a binary message
(docs/wire.md) or base64 in the JSON text. A relay (``Recorder``) keeps what each
connection carried."""

from __future__ import annotations

import asyncio
import base64
import time
from typing import Any

import pytest
from conftest import Recorder

from ucall.client import AsyncClient, Client
from ucall.exceptions import TimeoutError as CallTimeout

np = pytest.importorskip("numpy")

TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


def _server(make_server: Any, **options: Any) -> tuple[Any, list[tuple[int, str | None, str | None]]]:
    """Procedures noting, per call, the peer port of its connection and its ``X-Key`` and
    ``traceparent`` header fields (``attached``: whether each array came as an attachment,
    viewed read-only where it lies)."""
    from ucall import Context

    server = make_server(**options)
    seen: list[tuple[int, str | None, str | None]] = []

    def note(ctx: Context) -> None:
        assert ctx.peer is not None
        seen.append((ctx.peer[1], ctx.headers.get("x-key"), ctx.headers.get("traceparent")))

    @server
    def echo(x: np.ndarray, ctx: Context) -> np.ndarray:
        note(ctx)
        server.attached.append(not x.flags.writeable)  # type: ignore[attr-defined]
        return x

    @server
    def reverse(data: bytes, ctx: Context) -> bytes:
        note(ctx)
        return data[::-1]

    @server
    def plain(x: Any, ctx: Context) -> Any:
        note(ctx)
        return x

    @server
    def slow(data: bytes) -> bytes:
        time.sleep(1.0)
        return data

    @server
    def sizes(data: bytes, ctx: Context):  # (streams its items)
        note(ctx)
        yield len(data)

    server.attached = []
    server.start()
    return server, seen


def _array() -> Any:
    return np.random.default_rng(3).standard_normal((1000, 50)).astype(np.float32)


def _one_binary_message(relay: Any, seen: list[tuple[int, str | None, str | None]], array: Any) -> bytes:
    """What ``relay`` saw of the calls ``seen`` by the server: all on one connection, one
    binary message answered by one, the array in it once as an attachment (no base64)."""
    assert len({port for port, _, _ in seen}) == 1 and len(relay.sent) == 1, "every call on one connection"
    sent = bytes(relay.sent[0])
    assert relay.binary_messages("http") == 1 and relay.binary_messages("http", replies=True) == 1
    assert sent.count(array.tobytes()) == 1 and b"AAAA" not in sent, "the array as an attachment, once"
    return sent


def test_call_with_headers_goes_on_the_native_connection_as_binary_messages(make_server):
    server, seen = _server(make_server)
    relay = Recorder(server.port)
    array = _array()
    try:
        with Client(port=relay.port, timeout=30) as client:
            assert client.plain(1).json == 1
            back = client.call_with_headers("echo", [array], {"X-Key": "a"}).numpy
            assert np.array_equal(back, array) and not back.flags.writeable, "a view of the binary reply"
            assert client.call_with_headers("reverse", {"data": b"abc"}, {"X-Key": "b"}).bytes == b"cba"
            assert client.call_with_headers("plain", [2], {"X-Key": "c"}).json == 2
            assert client.plain(3).json == 3
            with pytest.raises(ValueError, match="Host"):
                client.call_with_headers("echo", [array], {"Host": "elsewhere"})
            assert client.call_with_headers("plain", [4], {}).json == 4
        assert [key for _, key, _ in seen] == [None, "a", "b", "c", None, None], "headers with their call only"
        sent = _one_binary_message(relay, seen, array)
        assert sent.lower().count(b"x-key:") == 3
    finally:
        relay.close()


def test_call_with_headers_keeps_its_errors_and_timeout(make_server):
    server, _ = _server(make_server)
    with Client(port=server.port, binary=True, timeout=0.3) as client:
        with pytest.raises(CallTimeout, match="within 0.3 s"):
            client.call_with_headers("slow", [b"x" * 100_000], {"X-Key": "a"})
        time.sleep(1.0)
        assert client.call_with_headers("reverse", [b"xy"], {"X-Key": "b"}).bytes == b"yx"
        assert client.call_with_headers("nothing", [b"xy"], {"X-Key": "c"}).error.code == -32601
    with Client(f"tcp://127.0.0.1:{server.port}") as client:
        with pytest.raises(ValueError, match="only HTTP sends headers with each call"):
            client.call_with_headers("plain", [1], {"X-Key": "a"})


def test_calls_in_a_trace_over_http_go_on_the_native_connection_with_the_context(make_server):
    from opentelemetry import trace
    from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags

    server, seen = _server(make_server)
    relay = Recorder(server.port)
    array = _array()
    parent = SpanContext(int(TRACEPARENT[3:35], 16), int(TRACEPARENT[36:52], 16), True, TraceFlags(1))
    try:
        with Client(port=relay.port, timeout=30) as client:
            assert client.plain(1).json == 1
            assert client.reverse(b"ab").bytes == b"ba"  # (the server's description asked, untraced)
            with trace.use_span(NonRecordingSpan(parent)):
                back = client.echo(array).numpy
                assert np.array_equal(back, array) and not back.flags.writeable
                assert client.plain(2).json == 2
                assert client.reverse(b"abc").bytes == b"cba"
                assert client.call_with_headers("plain", [3], {"X-Key": "k"}).json == 3
                with client.batch() as batch:
                    batched = batch.reverse(b"de")
                assert batched.bytes == b"ed"
            assert client.plain(4).json == 4
        assert [parent for _, _, parent in seen] == [None] * 2 + [TRACEPARENT] * 5 + [None]
        assert len({port for port, _, _ in seen}) == 1 and len(relay.sent) == 1, "every call on one connection"
        sent = bytes(relay.sent[0])
        assert relay.binary_messages("http") == 1 and sent.count(array.tobytes()) == 1
        assert sent.lower().count(b"traceparent:") == 5, "the context as a header field of each traced request"
    finally:
        relay.close()


def _traced() -> Any:
    """A span whose context is ``TRACEPARENT``, to use as the current one."""
    from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags

    return NonRecordingSpan(SpanContext(int(TRACEPARENT[3:35], 16), int(TRACEPARENT[36:52], 16), True, TraceFlags(1)))


def test_a_pipeline_in_a_trace_over_http_goes_on_the_native_connection_with_the_context(make_server):
    from opentelemetry import trace

    server, seen = _server(make_server)
    relay = Recorder(server.port)
    array = _array()
    try:
        with Client(port=relay.port, timeout=30) as client:
            assert client.plain(1).json == 1
            assert client.reverse(b"ab").bytes == b"ba"  # (the server's description asked, untraced)
            with trace.use_span(_traced()):
                echoed, plain, reversed_ = client.pipeline([("echo", [array]), ("plain", [2]), ("reverse", [b"abc"])])
            assert np.array_equal(echoed.numpy, array) and not echoed.numpy.flags.writeable
            assert (plain.json, reversed_.bytes) == (2, b"cba")
            assert client.plain(3).json == 3
        assert [parent for _, _, parent in seen] == [None] * 2 + [TRACEPARENT] * 3 + [None]
        assert len({port for port, _, _ in seen}) == 1 and len(relay.sent) == 1, "every call on one connection"
        sent = bytes(relay.sent[0])
        assert relay.binary_messages("http") == 1 and sent.count(array.tobytes()) == 1 and b"AAAA" not in sent
        assert sent.lower().count(b"traceparent:") == 3, "the context as a header field of each traced request"
    finally:
        relay.close()


def test_a_pipeline_in_a_trace_over_raw_tcp_carries_the_context_in_each_call(make_server):
    from opentelemetry import trace

    server, seen = _server(make_server)
    relay = Recorder(server.port)
    try:
        with Client(f"tcp://127.0.0.1:{relay.port}", timeout=30) as client:
            assert client.plain(1).json == 1
            with trace.use_span(_traced()):
                assert [r.json for r in client.pipeline([("plain", [2]), ("plain", [3])])] == [2, 3]
        assert len({port for port, _, _ in seen}) == 1 and len(relay.sent) == 1, "every call on one connection"
        assert bytes(relay.sent[0]).count(TRACEPARENT.encode()) == 2, "each traced call's _meta"
    finally:
        relay.close()


def test_async_call_with_headers_goes_on_the_native_connection_as_binary_messages(make_server):
    server, seen = _server(make_server)
    relay = Recorder(server.port)
    array = _array()

    async def main() -> None:
        async with AsyncClient(port=relay.port, timeout=30) as client:
            assert (await client.plain(1)).json == 1
            back = (await client.call_with_headers("echo", [array], {"X-Key": "a"})).numpy
            assert np.array_equal(back, array) and not back.flags.writeable, "a view of the binary reply"
            assert (await client.call_with_headers("reverse", {"data": b"abc"}, {"X-Key": "b"})).bytes == b"cba"
            assert (await client.call_with_headers("plain", [2], {"X-Key": "c"})).json == 2
            assert (await client.plain(3)).json == 3
            with pytest.raises(ValueError, match="Host"):
                await client.call_with_headers("echo", [array], {"Host": "elsewhere"})
            assert (await client.call_with_headers("plain", [4], {})).json == 4
            together = [client.plain(5), client.call_with_headers("reverse", [b"de"], {"X-Key": "d"}), client.plain(6)]
            first, second, third = await asyncio.gather(*together)
            assert (first.json, second.bytes, third.json) == (5, b"ed", 6), "each its own reply, in order"

    try:
        asyncio.run(main())
        assert [key for _, key, _ in seen][:6] == [None, "a", "b", "c", None, None], "headers with their call only"
        assert sorted(seen[6:], key=lambda one: one[1] or "") == [(seen[0][0], None, None)] * 2 + [(seen[0][0], "d", None)]
        sent = _one_binary_message(relay, seen, array)
        assert sent.lower().count(b"x-key:") == 4
    finally:
        relay.close()


def test_async_call_with_headers_keeps_its_errors_and_timeout(make_server):
    server, seen = _server(make_server)

    async def main() -> None:
        async with AsyncClient(port=server.port, binary=True, timeout=0.3) as client:
            with pytest.raises(CallTimeout, match="within 0.3 s"):
                await client.call_with_headers("slow", [b"x" * 100_000], {"X-Key": "a"})
            await asyncio.sleep(1.0)
            assert (await client.call_with_headers("reverse", [b"xy"], {"X-Key": "b"})).bytes == b"yx"
            assert (await client.call_with_headers("nothing", [b"xy"], {"X-Key": "c"})).error.code == -32601
            with pytest.raises(CallTimeout, match="within 0.3 s"):
                await client.call_with_headers("slow", {"data": "eHk="}, {"X-Key": "d"})  # (a JSON text)
            await asyncio.sleep(1.0)
            assert (await client.call_with_headers("plain", [1], {"X-Key": "e"})).json == 1
        async with AsyncClient(f"tcp://127.0.0.1:{server.port}") as client:
            with pytest.raises(ValueError, match="only HTTP sends headers with each call"):
                await client.call_with_headers("plain", [1], {"X-Key": "a"})

    asyncio.run(main())
    assert [key for _, key, _ in seen] == ["b", "e"]


def test_async_calls_in_a_trace_over_http_go_on_the_native_connection_with_the_context(make_server):
    from opentelemetry import trace

    server, seen = _server(make_server)
    relay = Recorder(server.port)
    array = _array()

    async def main() -> None:
        async with AsyncClient(port=relay.port, timeout=30) as client:
            assert (await client.plain(1)).json == 1
            assert (await client.reverse(b"ab")).bytes == b"ba"  # (the server's description asked, untraced)
            with trace.use_span(_traced()):
                back = (await client.echo(array)).numpy
                assert np.array_equal(back, array) and not back.flags.writeable
                assert (await client.plain(2)).json == 2
                assert (await client.reverse(b"abc")).bytes == b"cba"
                assert (await client.call_with_headers("plain", [3], {"X-Key": "k"})).json == 3
                async with client.batch() as batch:
                    batched = batch.reverse(b"de")
                assert batched.bytes == b"ed"
                piped = await client.pipeline([("plain", [4]), ("reverse", [b"fg"])])
                assert (piped[0].json, piped[1].bytes) == (4, b"gf")
            assert (await client.plain(5)).json == 5

    try:
        asyncio.run(main())
        assert [parent for _, _, parent in seen] == [None] * 2 + [TRACEPARENT] * 7 + [None]
        assert [key for _, key, _ in seen].count("k") == 1
        assert len({port for port, _, _ in seen}) == 1 and len(relay.sent) == 1, "every call on one connection"
        sent = bytes(relay.sent[0])
        assert relay.binary_messages("http") == 1 and sent.count(array.tobytes()) == 1 and b"AAAA" not in sent
        assert sent.lower().count(b"traceparent:") == 7, "the context as a header field of each traced request"
    finally:
        relay.close()


def test_call_with_progress_goes_on_the_native_connection_as_binary_messages(make_server):
    """Progress reports come from the native connection as it writes the request: at
    each MiB and once at the end, ``sent`` up to ``total`` (the request's bytes)."""
    server, seen = _server(make_server)
    relay = Recorder(server.port)
    array = np.ones((3, 1 << 20), dtype=np.uint8)
    reports: list[tuple[int, int]] = []
    try:
        with Client(port=relay.port, timeout=30) as client:
            assert client.plain(1).json == 1
            back = client.call_with_progress("echo", [array], lambda sent, total: reports.append((sent, total)))
            assert np.array_equal(back.numpy, array) and not back.numpy.flags.writeable
            small: list[tuple[int, int]] = []
            assert client.call_with_progress("plain", [2], lambda sent, total: small.append((sent, total))).json == 2
            assert client.plain(3).json == 3
        assert reports and reports[-1][0] == reports[-1][1] > array.nbytes
        assert all(total == reports[-1][1] for _, total in reports)
        sent = [one for one, _ in reports]
        assert sent == sorted(set(sent)), "growing"
        assert all(b - a >= 1 << 20 for a, b in zip([0, *sent[:-2]], sent[:-1])), "at each MiB"
        assert len(small) == 1 and small[0][0] == small[0][1] > 0
        _one_binary_message(relay, seen, array)
    finally:
        relay.close()


def test_what_the_progress_callback_raises_ends_the_call(make_server):
    server, _ = _server(make_server)
    array = np.ones(4 << 20, dtype=np.uint8)

    class Stop(Exception):
        pass

    def stop(sent: int, total: int) -> None:
        raise Stop(f"{sent} of {total}")

    with Client(port=server.port, timeout=30) as client:
        with pytest.raises(Stop, match=" of "):
            client.call_with_progress("echo", [array], stop)
        with pytest.raises(Stop):
            client.call_with_progress("plain", [1], stop)
        assert np.array_equal(client.echo(array[:10]).numpy, array[:10]), "the next call on a new connection"


@pytest.mark.parametrize("binary", [None, False])
def test_a_stream_sends_its_binary_params_as_attachments_on_a_connection_of_its_own(make_server, binary):
    """A streamed call's request is a binary message (base64 with ``binary=False``), from
    ``Client`` and ``AsyncClient``, on a connection of its own."""
    server, seen = _server(make_server)
    relay = Recorder(server.port)
    data = bytes(range(256)) * 8
    try:
        with Client(port=relay.port, timeout=30, binary=binary) as client:
            assert client.plain(1).json == 1
            assert list(client.stream("sizes", data)) == [len(data)]

        async def session() -> None:
            async with AsyncClient(port=relay.port, timeout=30, binary=binary) as client:
                assert (await client.plain(2)).json == 2
                assert [item async for item in client.stream("sizes", data=data)] == [len(data)]

        asyncio.run(asyncio.wait_for(session(), 30))
        assert len({port for port, _, _ in seen}) == 4 and len(relay.sent) == 4
        assert relay.binary_messages("http") == (0 if binary is False else 2)
        assert any(base64.b64encode(data) in bytes(sent) for sent in relay.sent) == (binary is False)
    finally:
        relay.close()


def test_a_client_given_an_ssl_context_sends_binary_messages_on_pythons_ssl(make_server, tmp_path):
    """rustls cannot take an ``ssl.SSLContext``: such a client's calls go on Python's ssl,
    its arrays as attachments all the same (the server views them in place)."""
    import ssl

    from opentelemetry import trace

    from test_client_tls import make_certs

    certs = make_certs(tmp_path)
    server, seen = _server(make_server, tls_cert=str(certs / "cert.pem"), tls_key=str(certs / "key.pem"))
    context = ssl.create_default_context(cafile=str(certs / "ca.pem"))
    array = _array()
    with Client(port=server.port, ssl_context=context, timeout=30) as client:
        assert np.array_equal(client.echo(array).numpy, array)
        assert np.array_equal(client.call_with_headers("echo", [array], {"X-Key": "a"}).numpy, array)
        assert np.array_equal(client.pipeline([("echo", [array])])[0].numpy, array)
        with trace.use_span(_traced()):
            assert np.array_equal(client.echo(array).numpy, array)
        assert client.sock is not None and client._native is None, "Python's ssl"
    assert server.attached == [True] * 4, "each array came as an attachment"
    assert len({port for port, _, _ in seen}) == 1
    assert [(key, parent) for _, key, parent in seen] == [(None, None), ("a", None), (None, None), (None, TRACEPARENT)]


def test_an_async_client_given_an_ssl_context_sends_binary_messages_on_asyncios_ssl(make_server, tmp_path):
    import ssl

    from opentelemetry import trace

    from test_client_tls import make_certs

    certs = make_certs(tmp_path)
    server, seen = _server(make_server, tls_cert=str(certs / "cert.pem"), tls_key=str(certs / "key.pem"))
    context = ssl.create_default_context(cafile=str(certs / "ca.pem"))
    array = _array()

    async def main() -> None:
        async with AsyncClient(port=server.port, ssl_context=context, timeout=30) as client:
            assert np.array_equal((await client.echo(array)).numpy, array)
            assert np.array_equal((await client.call_with_headers("echo", [array], {"X-Key": "a"})).numpy, array)
            with trace.use_span(_traced()):
                assert np.array_equal((await client.echo(array)).numpy, array)
            assert client._mux is None, "asyncio's ssl"

    asyncio.run(main())
    assert server.attached == [True] * 3, "each array came as an attachment"
    assert len({port for port, _, _ in seen}) == 1
    assert [(key, parent) for _, key, parent in seen] == [(None, None), ("a", None), (None, TRACEPARENT)]
