# SPDX-License-Identifier: Apache-2.0
"""OpenTelemetry spans for a server's calls, and the trace context a client sends.

A server traces when the application has configured a tracer provider (as OpenTelemetry
instrumentations do) and ``Server(tracing=False)`` did not turn it off: one SERVER span
per call, following the semantic conventions for JSON-RPC, child of the caller's W3C
trace context (which the core reads from the ``traceparent`` header field or the
request's ``"_meta"`` member), with the handler running inside it. Nothing here imports
OpenTelemetry unless the application has already: a provider can only be configured
through it (``"opentelemetry.trace" in sys.modules``).

Each span says where the call's time went: ``ucall.queued_ns``, from the server reading
the request to the handler starting (the core timestamps requests while tracing is on),
``ucall.handler_ns``, the handler's run (for a coroutine until it is done, for a stream
until its last item), and ``ucall.reply_ns``, the core writing a plain result into the
reply (the core calls ``replied`` then, and the span ends after it).

Batch procedures: each call has its span (from its admission into a batch until the
batch's result), linked to one INTERNAL span of the batch run that served it.
"""

from __future__ import annotations

import inspect
import sys
import threading
import time
from typing import Any, Callable, Generator

from ucall.exceptions import RPCError

__all__ = ["ServerTracing", "active", "current_meta", "trace_header_lines"]

#: The JSON-RPC code of an exception that is not an ``RPCError`` (Internal error).
_INTERNAL = -32603


def active() -> bool:
    """Whether the application configured a tracer provider (imported OpenTelemetry and
    set one other than the default proxy or the no-op one)."""
    if "opentelemetry.trace" not in sys.modules:
        return False
    from opentelemetry import trace

    provider = trace.get_tracer_provider()
    return not isinstance(provider, (trace.ProxyTracerProvider, trace.NoOpTracerProvider))


def current_meta() -> dict[str, str] | None:
    """The current span's context as a request's ``"_meta"`` member (``traceparent`` and,
    when it has entries, ``tracestate``), or ``None`` without a valid current span. Cheap
    when OpenTelemetry was never imported."""
    trace = sys.modules.get("opentelemetry.trace")
    if trace is None:
        return None
    context = trace.get_current_span().get_span_context()
    if not context.is_valid:
        return None
    meta = {"traceparent": f"00-{context.trace_id:032x}-{context.span_id:016x}-{int(context.trace_flags):02x}"}
    state = context.trace_state.to_header() if context.trace_state else ""
    if state:
        meta["tracestate"] = state
    return meta


def trace_header_lines(lines: str) -> str:
    """The current span's context as the HTTP header lines ``traceparent`` and
    ``tracestate`` (W3C Trace Context), added to a request's header ``lines``; none when
    there is no valid current span, or when ``lines`` carry a ``traceparent`` already (two
    would make the context invalid)."""
    meta = current_meta()
    if meta is None or "traceparent:" in lines.lower():
        return lines
    return lines + "".join(f"{name}: {value}\r\n" for name, value in meta.items())


def _ran(span: Any, started: int) -> None:
    """Record on ``span`` the handler's run since ``started`` (``time.monotonic_ns()``)."""
    span.set_attribute("ucall.handler_ns", time.monotonic_ns() - started)


class _StreamEnd:
    """Ends a streamed call's span with its stream (``with``): the items it counted, and
    whether the caller left (the server closed the stream) or what failed."""

    __slots__ = ("_tracing", "_span", "_started", "items")

    def __init__(self, tracing: ServerTracing, span: Any, started: int) -> None:
        self._tracing, self._span, self._started = tracing, span, started
        self.items = 0

    def __enter__(self) -> _StreamEnd:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, _traceback: Any) -> None:
        span = self._span
        if kind is not None and issubclass(kind, GeneratorExit):
            span.set_attribute("ucall.stream.cancelled", True)
        elif error is not None:
            self._tracing._failed(span, error)
        span.set_attribute("ucall.stream.items", self.items)
        _ran(span, self._started)
        span.end()


class ServerTracing:
    """The chain a server runs around each call (``run(ctx, func, args, kwargs)``, the
    middleware chain's shape), with a span around ``inner`` (the middleware chain, or
    ``None``); and ``runner(runner)``, the same for batch procedures."""

    def __init__(self, inner: Callable[..., Any] | None, host: str, port: int, version: str) -> None:
        from opentelemetry import context, trace

        from ucall import _batch
        from opentelemetry.trace import Link, NonRecordingSpan, SpanContext, SpanKind, TraceFlags, TraceState
        from opentelemetry.trace.status import StatusCode

        self._trace = trace
        self._admitted_marker = _batch._admitted
        self._context = context
        self._link = Link
        self._remote = (NonRecordingSpan, SpanContext, TraceFlags, TraceState)
        self._server = SpanKind.SERVER
        self._internal = SpanKind.INTERNAL
        self._error = StatusCode.ERROR
        self._tracer = trace.get_tracer("ucall", version)
        self._inner = inner
        self._host = host
        #: The port served (set once the server has bound, for an ephemeral one).
        self.port = port
        # Spans of the calls admitted into the batch about to run on this thread.
        self._admitted = threading.local()
        # Spans of calls whose plain result the core is writing, by their context: ended
        # by `replied`.
        self._replying: dict[Any, Any] = {}

    # ------------------------------------------------------------ one call

    def __call__(self, ctx: Any, func: Callable[..., Any] | None, args: Any, kwargs: dict[str, Any] | None) -> Any:
        batch = func is self._admitted_marker
        span = self._start(ctx, batch)
        started = time.monotonic_ns()
        received = ctx.received_ns
        if received is not None:
            span.set_attribute("ucall.queued_ns", max(started - received, 0))
        pending: list[Any] = []
        if batch:
            pending = getattr(self._admitted, "spans", None) or []
            self._admitted.spans = pending
            pending.append(span)
        token = self._context.attach(self._trace.set_span_in_context(span))
        try:
            if self._inner is not None:
                result = self._inner(ctx, func, args, kwargs)
            elif func is None:
                raise args
            else:
                result = func(*args, **kwargs) if kwargs else func(*args)
        except BaseException as error:
            self._failed(span, error)
            _ran(span, started)
            span.end()
            if batch:
                pending.remove(span)
            raise
        finally:
            self._context.detach(token)
        if batch:
            return result
        if inspect.isawaitable(result):
            return self._awaited(span, result, started)
        if inspect.isgenerator(result):
            return self._streamed(span, result, started)
        if inspect.isasyncgen(result):
            return self._streamed_async(span, result, started)
        _ran(span, started)
        self._replying[ctx] = span
        return result

    def replied(self, ctx: Any, reply_ns: int) -> None:
        """The core wrote the plain result of the call of ``ctx`` into its reply, in
        ``reply_ns``: its span ends."""
        span = self._replying.pop(ctx, None)
        if span is not None:
            span.set_attribute("ucall.reply_ns", reply_ns)
            span.end()

    def _start(self, ctx: Any, batch: bool) -> Any:
        parent = None
        traceparent = ctx.traceparent
        if traceparent is not None:
            # The core validated it (W3C Trace Context §3.2): version 00 as it writes it.
            span_cls, context_cls, flags_cls, state_cls = self._remote
            tracestate = ctx.tracestate
            remote = context_cls(
                trace_id=int(traceparent[3:35], 16),
                span_id=int(traceparent[36:52], 16),
                is_remote=True,
                trace_flags=flags_cls(int(traceparent[53:55], 16)),
                trace_state=state_cls.from_header([tracestate]) if tracestate else None,
            )
            parent = self._trace.set_span_in_context(span_cls(remote))
        attributes: dict[str, Any] = {
            "rpc.system": "jsonrpc",
            "rpc.method": ctx.method,
            "rpc.jsonrpc.version": "2.0",
            "server.address": self._host,
            "server.port": self.port,
            "ucall.transport": ctx.transport,
        }
        request_id = ctx.id
        if request_id is not None:
            attributes["rpc.jsonrpc.request_id"] = str(request_id)
        peer = ctx.peer
        if peer is not None:
            attributes["network.transport"] = "tcp"
            attributes["network.peer.address"] = peer[0]
            attributes["network.peer.port"] = peer[1]
        if ctx.transport != "tcp":
            attributes["network.protocol.name"] = ctx.transport
        if batch:
            attributes["ucall.batched"] = True
        return self._tracer.start_span(ctx.method, context=parent, kind=self._server, attributes=attributes)

    def _failed(self, span: Any, error: BaseException) -> None:
        code = error.code if isinstance(error, RPCError) else _INTERNAL
        span.set_attribute("rpc.jsonrpc.error_code", code)
        if isinstance(error, RPCError):
            span.set_attribute("rpc.jsonrpc.error_message", error.message)
        else:
            span.record_exception(error)
        span.set_status(self._error, type(error).__qualname__)

    async def _awaited(self, span: Any, awaitable: Any, started: int) -> Any:
        token = self._context.attach(self._trace.set_span_in_context(span))
        try:
            return await awaitable
        except BaseException as error:
            self._failed(span, error)
            raise
        finally:
            self._context.detach(token)
            _ran(span, started)
            span.end()

    def _streamed(self, span: Any, items: Generator[Any, Any, Any], started: int) -> Any:
        """The generator's items, each made inside the call's span; the span ends with the
        stream (exhausted, failed, or closed by the server when the caller left)."""
        with _StreamEnd(self, span, started) as stream:
            while True:
                token = self._context.attach(self._trace.set_span_in_context(span))
                try:
                    item = next(items)
                except StopIteration as stop:
                    return stop.value
                finally:
                    self._context.detach(token)
                stream.items += 1
                try:
                    yield item
                except GeneratorExit:
                    items.close()
                    raise

    async def _streamed_async(self, span: Any, items: Any, started: int) -> Any:
        with _StreamEnd(self, span, started) as stream:
            while True:
                token = self._context.attach(self._trace.set_span_in_context(span))
                try:
                    item = await items.__anext__()
                except StopAsyncIteration:
                    return
                finally:
                    self._context.detach(token)
                stream.items += 1
                try:
                    yield item
                except GeneratorExit:
                    await items.aclose()
                    raise

    # ------------------------------------------------------------ batches

    def admitting(self, admit: Callable[[list[Any]], Any]) -> Callable[[list[Any]], Any]:
        """``admit`` (a batch's gate), first ending the spans of calls a batch admitted
        but never ran (every call of it refused when its params were bound)."""

        def gate(contexts: list[Any]) -> Any:
            for span in getattr(self._admitted, "spans", None) or []:
                span.end()
            self._admitted.spans = []
            return admit(contexts)

        return gate

    def runner(self, name: str, runner: Callable[[list[Any]], Any]) -> Callable[[list[Any]], Any]:
        """``runner`` inside an INTERNAL span of the batch run, linked to the spans of the
        calls admitted into it (on this thread, just before), which end with it."""

        def run(rows: list[Any]) -> Any:
            calls = getattr(self._admitted, "spans", None) or []
            self._admitted.spans = []
            links = [self._link(span.get_span_context()) for span in calls]
            batch = self._tracer.start_span(
                f"batch {name}",
                kind=self._internal,
                links=links,
                attributes={"rpc.system": "jsonrpc", "rpc.method": name, "ucall.batch.size": len(rows)},
            )
            for span in calls:
                span.add_link(batch.get_span_context())
            token = self._context.attach(self._trace.set_span_in_context(batch))
            try:
                result = runner(rows)
            except BaseException as error:
                self._ended(batch, calls, error)
                raise
            finally:
                self._context.detach(token)
            if inspect.isawaitable(result):
                return self._batch_awaited(batch, calls, result)
            self._ended(batch, calls, None)
            return result

        return run

    async def _batch_awaited(self, batch: Any, calls: list[Any], awaitable: Any) -> Any:
        token = self._context.attach(self._trace.set_span_in_context(batch))
        try:
            result = await awaitable
        except BaseException as error:
            self._ended(batch, calls, error)
            raise
        finally:
            self._context.detach(token)
        self._ended(batch, calls, None)
        return result

    def _ended(self, batch: Any, calls: list[Any], error: BaseException | None) -> None:
        for span in [batch, *calls]:
            if error is not None:
                self._failed(span, error)
            span.end()
