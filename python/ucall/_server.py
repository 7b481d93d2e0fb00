# SPDX-License-Identifier: Apache-2.0
"""The decorator server: plain Python functions as JSON-RPC procedures."""

from __future__ import annotations

import asyncio
import atexit
import inspect
import json
import logging
import os
import signal
import struct
import sys
import threading
import time
import traceback
import types
import warnings
import weakref
from typing import IO, Any, Callable, Sequence, TypeVar, overload

from ucall import _batch, _codec, _middleware, _schema, _signature, _tracing, _ucall
from ucall.exceptions import HTTPError, RPCError

F = TypeVar("F", bound=Callable[..., Any])

__all__ = ["Server"]

_running: weakref.WeakSet[Server] = weakref.WeakSet()

#: The server's log: start-up and shutdown lines (info), handlers' exceptions with their
#: tracebacks (error), and the core's records (limits hit, failed TLS sessions: warning and info).
_log = logging.getLogger("ucall")

#: The readiness method every server answers, by the rule of ``GET /readyz``.
HEALTH = "rpc.health"


#: What ``@server(...)`` and ``@server.method(...)`` say of a procedure besides its name,
#: passed on to ``Server.route`` (their overloads list them with their types).
_DESCRIBING = frozenset({"summary", "description", "examples", "errors", "timeout", "rate_limit"})


def _check_describing(caller: str, describe: dict[str, Any]) -> None:
    """Refuse a keyword that is not one of ``_DESCRIBING``, as Python refuses an unknown one."""
    for keyword in describe:
        if keyword not in _DESCRIBING:
            raise TypeError(f"{caller}() got an unexpected keyword argument {keyword!r}")


@atexit.register
def _stop_all() -> None:
    for server in list(_running):
        server.stop()


def _describe(error: BaseException, trace: types.TracebackType | None) -> str:
    return "".join(traceback.format_exception(type(error), error, trace or error.__traceback__))


def _log_failure(method: str, error: BaseException, trace: types.TracebackType | None) -> None:
    """Log a handler's exception with its traceback (the caller gets -32603 without it)."""
    _log.error("procedure '%s' raised %s", method, type(error).__name__, exc_info=(type(error), error, trace))


class _Procedure:
    __slots__ = ("batch", "description", "func", "ignore_extra_params", "localns", "name", "rate_limit", "timeout")

    def __init__(
        self,
        name: str,
        func: Callable[..., Any],
        ignore_extra_params: bool | None,
        localns: dict[str, Any] | None,
        description: dict[str, Any],
        batch: _BatchPlan | None = None,
        timeout: float | None = None,
        rate_limit: str | None = None,
    ) -> None:
        self.name = name
        self.timeout = timeout
        self.rate_limit = rate_limit
        self.func = func
        self.ignore_extra_params = ignore_extra_params
        self.localns = localns
        self.description = description
        self.batch = batch


class _BatchPlan:
    """A batch procedure's per-item signature, its columns and how batches form."""

    __slots__ = ("columns", "options", "view")

    def __init__(self, view: Callable[..., Any], columns: list[str], options: dict[str, Any]) -> None:
        self.view = view
        self.columns = columns
        self.options = options


def _user_frame() -> tuple[types.FrameType | None, int]:
    """The first frame outside this module up the stack, and the ``stacklevel`` that names
    it to a warning raised where this function is called."""
    frame: types.FrameType | None = sys._getframe(1)
    level = 1
    while frame is not None and frame.f_globals.get("__name__") == __name__:
        frame, level = frame.f_back, level + 1
    return frame, level


def _caller_locals() -> dict[str, Any] | None:
    """The local names where the decorator was applied (outside this module)."""
    frame, _ = _user_frame()
    if frame is None or frame.f_locals is frame.f_globals:
        return None
    return dict(frame.f_locals)


async def _bounded(coroutine: Any, seconds: float) -> Any:
    """``coroutine``, cancelled past its deadline: the caller gets "deadline exceeded"."""
    try:
        return await asyncio.wait_for(coroutine, max(seconds, 0.0))
    except asyncio.TimeoutError:
        raise HTTPError(*_ucall.DEADLINE_EXCEEDED) from None


class _EventLoop:
    """An asyncio loop on a thread of its own, for ``async def`` handlers."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self._run, name="ucall-asyncio", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    def submit(self, items: list[tuple[Any, Any, float | None]]) -> None:
        """Start ``(coroutine, reply, seconds)`` on the loop, each cancelled ``seconds`` from
        now when not ``None``; called by the worker threads."""
        self.loop.call_soon_threadsafe(self._start, items)

    def _start(self, items: list[tuple[Any, Any, float | None]]) -> None:
        for coroutine, reply, seconds in items:
            task = coroutine if seconds is None else _bounded(coroutine, seconds)
            self.loop.create_task(task).add_done_callback(reply.settle)

    def close(self) -> None:
        async def cancel_the_rest() -> None:
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        try:
            asyncio.run_coroutine_threadsafe(cancel_the_rest(), self.loop).result(timeout=5)
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join()
            self.loop.close()


class Server:
    """A JSON-RPC 2.0 server over HTTP/1.1 and raw TCP on one port.

    >>> server = Server(port=0)
    >>> @server
    ... def sum(a: int, b: int) -> int:
    ...     return a + b
    >>> with server:                    # or server.run() to serve until Ctrl-C / SIGTERM
    ...     port = server.port

    Parameters:
        port: TCP port; ``0`` picks a free one (see ``port`` once started).
        host: address to listen on; ``"0.0.0.0"`` or ``"::"`` to serve other machines.
        threads: worker threads moving bytes (parsing and I/O run without the GIL).
        max_threads: most threads per worker while handlers block (a call running for
            more than a moment hands the worker's event loop to a fresh thread).
        engine: ``"auto"``, ``"poll"`` or ``"uring"`` (``UCALL_ENGINE`` overrides it).
        ignore_extra_params: drop params the function does not take instead of
            answering ``-32602``.
        debug: add the traceback of a failed handler to its error's ``data``.
        max_body_bytes, max_head_bytes, max_batch, max_connections: limits
            (safe defaults from the core).
        max_pending_calls: most calls waiting for (or running in) a handler per thread;
            past it a call is answered at once with ``-32000`` (HTTP 503 with
            ``Retry-After``) and ``data: {"executed": false}``, so that clients and load
            balancers may retry it elsewhere. ``None`` (default): calls are not refused;
            past 16,384 the server reads no new requests until some complete.
        header_timeout, idle_timeout, shutdown_timeout: seconds.
        tls_cert, tls_key: PEM files (chain, key): the port speaks TLS (HTTPS, TLS over
            raw TCP); with ``tls_port`` the port stays plaintext and TLS listens there too
            (``0`` picks one; see ``tls_port`` once started). ``tls_client_ca``: require
            client certificates from these CAs.
        quiet: do not log the start-up lines on stderr (the engine in force; and, from
            ``run()`` without a ``ready`` callback, the address and the procedures).
        docs: describe the server: the method ``rpc.discover`` and ``GET openrpc_path``
            answer the OpenRPC document, ``GET openapi_path`` the OpenAPI 3.1 document of
            the REST routes, ``GET docs_path`` a page that lists and calls the methods.
            ``False`` turns all of it off; a path of ``None`` turns that one off.
        title, version, description: the documents' ``info``.
        cors_origins: let pages from these origins call from a browser (CORS; off by
            default): ``["https://app.example.com"]``, or ``["*"]`` for any. Preflight
            ``OPTIONS`` requests are answered and replies carry the CORS headers.
        cors_methods, cors_headers: what a preflight allows (default ``GET, POST`` and
            ``Content-Type``; ``"*"`` for any). cors_max_age: seconds a browser may cache it.
        hsts_max_age: over TLS, every HTTP reply says ``Strict-Transport-Security:
            max-age=<seconds>`` (RFC 6797): browsers then use HTTPS only for this host.
            Off by default (a promise about the whole host); needs ``tls_cert``.
        drain_delay: seconds ``run()`` keeps serving after SIGTERM with ``GET /readyz``
            and ``rpc.health`` answering "draining", so that load balancers stop sending
            new calls before the server stops accepting them.
        healthz_path, readyz_path: where the liveness and readiness probes are served
            (``None`` turns one off). readyz_not_found: answer 404 rather than 503 when
            not ready (HAProxy's ``http-check disable-on-404``).
        metrics_path: where ``GET`` serves Prometheus metrics (calls by method and outcome,
            latency, connections and bytes by transport; docs/operations.md); ``None``
            turns metrics off, and nothing is counted.
        metrics_buckets: the latency histogram's bucket bounds in seconds, ascending
            (default gRPC's, 100 µs to 10 s).
        metrics_registry: a ``prometheus_client.CollectorRegistry`` (or its default
            ``REGISTRY``) whose metrics the page shows after the server's own.
        request_log: log one line per call (time, peer, transport, method, id, code, HTTP
            status, duration, bytes in and out; docs/operations.md, "Request log"): a path,
            appended to (worker processes may share it), ``"-"`` for stdout, a file object
            or a file descriptor (the server writes to a duplicate of it). Off by default.
        request_log_format: ``"text"`` (logfmt) or ``"json"`` (JSON lines).
        unix_socket: also listen on this Unix domain socket path, beside the port: HTTP,
            raw TCP and WebSocket over it, in plaintext (TLS stays on the port). A socket
            file left by a server that died is replaced; a path where a server answers,
            or that is not a socket, is refused. The file is removed at stop. Calls over
            it have no peer address. One process only: not with ``run(workers=N)``.
        unix_socket_mode: the socket file's permission bits (``0o660``: owner and group
            may connect); ``None`` (default): as the umask leaves them.
        mcp: also serve the procedures as Model Context Protocol tools at ``mcp_path``
            (Streamable HTTP, on the same port; docs/mcp.md): an agent pointed at
            ``http://host:port/mcp`` lists them with their schemas and descriptions (from
            type hints and docstrings) and calls them. Browser pages may call it from
            loopback origins and from ``cors_origins``; any other ``Origin`` gets 403.
        mcp_path: where the MCP endpoint is (``"/mcp"``).
        mcp_sessions: mint an ``Mcp-Session-Id`` at each ``initialize`` (session-era MCP
            clients): later requests must carry it, ``DELETE`` ends it, and a
            ``notifications/cancelled`` posted in it cancels the call it names (and only
            it: no response is sent for it). Sessions
            live in one process (docs/mcp.md, "Sessions").
        tracing: make an OpenTelemetry span per call, child of the caller's W3C trace
            context, with the handler inside it (docs/operations.md, "Tracing"). On when
            the application has configured a tracer provider when the server starts
            (``pip install 'ucall[otel]'``); ``False`` turns it off.
        rate_limit: calls each client may make over all procedures, as ``"100/s"`` or
            ``"6000/min"`` (bursts of up to the count); ``@server(rate_limit=...)`` limits
            one procedure besides. A call past it is refused before it runs: HTTP 429
            with ``Retry-After``, or JSON-RPC error ``-32029`` whose ``data`` has
            ``retry_after_ms`` and ``"executed": false`` (docs/reliability.md). Counted
            per process: ``run(workers=N)`` gives each worker its own buckets.
        rate_limit_key: what tells clients apart: ``"peer"`` (the address, default),
            ``"bearer"`` (the ``Authorization: Bearer`` token) or ``"header:X-API-Key"``
            (a header's value); a call without the header is keyed by its address; or
            ``"middleware"``: a middleware names each call's client with
            ``ctx.limit_by(key)`` (one without is keyed by its address), and the core
            does not check the call as it arrives, so none is counted twice.
        trusted_proxies: addresses or networks (``"10.0.0.0/8"``) of proxies whose
            ``X-Forwarded-For`` names the client, for the rate limits.
        max_connections_per_peer: most connections open at once from one IP address;
            more are closed on accept.

    Every server answers ``GET /healthz`` (200 ``{"status": "alive"}`` while the process
    answers) and ``GET /readyz``: 200 ``{"status": "serving"}`` while it serves and every
    check added with ``@server.readiness_check`` passes, else 503 with why
    (``{"status": "draining"}``, ``{"status": "not ready", "check": "model_loaded"}``).
    The JSON-RPC method ``rpc.health``, for raw TCP and WebSocket checks, answers by the
    same rule: that object as its result, or an error whose ``data`` is it.
    """

    def __init__(
        self,
        port: int = 8545,
        host: str = "127.0.0.1",
        *,
        threads: int = 1,
        max_threads: int = 64,
        engine: str = "auto",
        ignore_extra_params: bool = False,
        debug: bool = False,
        max_body_bytes: int | None = None,
        max_head_bytes: int | None = None,
        max_batch: int | None = None,
        max_connections: int | None = None,
        max_pending_calls: int | None = None,
        header_timeout: float | None = None,
        idle_timeout: float | None = None,
        shutdown_timeout: float | None = None,
        tls_cert: str | None = None,
        tls_key: str | None = None,
        tls_client_ca: str | None = None,
        tls_port: int | None = None,
        quiet: bool = False,
        docs: bool = True,
        title: str = "UCall server",
        version: str = "1.0.0",
        description: str | None = None,
        openrpc_path: str | None = "/openrpc.json",
        openapi_path: str | None = "/openapi.json",
        docs_path: str | None = "/docs",
        cors_origins: Sequence[str] | None = None,
        cors_methods: Sequence[str] | None = None,
        cors_headers: Sequence[str] | None = None,
        cors_max_age: int | None = None,
        hsts_max_age: int | None = None,
        drain_delay: float = 0.0,
        healthz_path: str | None = "/healthz",
        readyz_path: str | None = "/readyz",
        readyz_not_found: bool = False,
        metrics_path: str | None = "/metrics",
        metrics_buckets: Sequence[float] | None = None,
        metrics_registry: Any = None,
        request_log: str | os.PathLike[str] | int | IO[Any] | None = None,
        request_log_format: str = "text",
        unix_socket: str | os.PathLike[str] | None = None,
        unix_socket_mode: int | None = None,
        mcp: bool = False,
        mcp_path: str = "/mcp",
        mcp_sessions: bool = False,
        tracing: bool = True,
        rate_limit: str | None = None,
        rate_limit_key: str = "peer",
        trusted_proxies: Sequence[str] | None = None,
        max_connections_per_peer: int | None = None,
    ) -> None:
        if isinstance(trusted_proxies, str):
            raise TypeError("trusted_proxies takes a list of strings, not one string")
        proxies = None if trusted_proxies is None else [str(p) for p in trusted_proxies]
        _ucall.check_rate_limit(rate_limit, rate_limit_key, proxies)
        _check_options(
            port=port,
            threads=threads,
            max_threads=max_threads,
            max_body_bytes=max_body_bytes,
            max_head_bytes=max_head_bytes,
            max_batch=max_batch,
            max_connections=max_connections,
            max_pending_calls=max_pending_calls,
            max_connections_per_peer=max_connections_per_peer,
            tls_cert=tls_cert,
            tls_key=tls_key,
            tls_client_ca=tls_client_ca,
            tls_port=tls_port,
        )
        self.host = host
        self.threads = threads
        self.max_threads = max_threads
        self.engine_name = engine
        self.ignore_extra_params = ignore_extra_params
        self.debug = debug
        self.tracing = tracing
        self._requested_port = port
        if drain_delay < 0:
            raise ValueError(f"drain_delay must be at least 0, got {drain_delay}")
        self.drain_delay = drain_delay
        #: Where the supervisor of ``run(workers=N, metrics_port=...)`` serves the workers'
        #: metrics totals, once running.
        self.metrics_port: int | None = None
        self._drain = False
        self._checks: list[Callable[[], Any]] = []
        self._middleware: list[_middleware.Middleware] = []
        # Set in a worker process: the port is shared with the other workers, and the
        # worker stops when its supervisor (this pid) is gone.
        self._supervisor: int | None = None
        self._limits: dict[str, Any] = {
            "max_body_bytes": max_body_bytes,
            "max_head_bytes": max_head_bytes,
            "max_batch": max_batch,
            "max_connections": max_connections,
            "max_pending_calls": max_pending_calls,
            "max_connections_per_peer": max_connections_per_peer,
            "rate_limit": rate_limit,
            "rate_limit_key": rate_limit_key,
            "trusted_proxies": proxies,
            "header_timeout": header_timeout,
            "idle_timeout": idle_timeout,
            "shutdown_timeout": shutdown_timeout,
            "tls_cert": None if tls_cert is None else str(tls_cert),
            "tls_key": None if tls_key is None else str(tls_key),
            "tls_client_ca": None if tls_client_ca is None else str(tls_client_ca),
            "tls_port": tls_port,
            "hsts_max_age": hsts_max_age,
            "quiet": quiet,
            "healthz_path": healthz_path,
            "readyz_path": readyz_path,
            "readyz_not_found": bool(readyz_not_found),
            "metrics_path": metrics_path,
            "metrics_buckets": None if metrics_buckets is None else [float(b) for b in metrics_buckets],
            "metrics_extra": None if metrics_registry is None else _registry_page(metrics_registry),
        }
        self._set_unix_socket(unix_socket, unix_socket_mode)
        self._set_request_log(request_log, request_log_format)
        for option in ("healthz_path", "readyz_path", "metrics_path"):
            path = self._limits[option]
            if path is not None and (not isinstance(path, str) or not path.startswith("/")):
                raise ValueError(f"{option} must be a path starting with '/', or None, got {path!r}")
        self._discovery: dict[str, Any] = {
            "title": title,
            "version": version,
            "description": description,
            "rpc_discover": bool(docs),
            "openrpc_path": openrpc_path if docs else None,
            "openapi_path": openapi_path if docs else None,
            "docs_path": docs_path if docs else None,
        }
        for option in ("openrpc_path", "openapi_path", "docs_path"):
            path = self._discovery[option]
            if path is not None and (not isinstance(path, str) or not path.startswith("/")):
                raise ValueError(f"{option} must be a path starting with '/', or None, got {path!r}")
        if not isinstance(mcp_path, str) or not mcp_path.startswith("/"):
            raise ValueError(f"mcp_path must be a path starting with '/', got {mcp_path!r}")
        self._mcp: dict[str, Any] | None = None
        if mcp:
            self._mcp = {"path": mcp_path, "sessions": True} if mcp_sessions else {"path": mcp_path}
        cors = {"cors_origins": cors_origins, "cors_methods": cors_methods, "cors_headers": cors_headers}
        for name, values in cors.items():
            if isinstance(values, str):
                raise TypeError(f"{name} takes a list of strings, not one string")
            if values is not None:
                self._limits[name] = [str(v) for v in values]
        if cors_origins is None and (cors_methods is not None or cors_headers is not None or cors_max_age is not None):
            raise ValueError("CORS settings need cors_origins, the origins allowed")
        if cors_max_age is not None:
            if not 0 <= cors_max_age <= 0xFFFFFFFF:
                raise ValueError(f"cors_max_age must be from 0 to 4294967295, got {cors_max_age}")
            self._limits["cors_max_age"] = cors_max_age
        if hsts_max_age is not None:
            if tls_cert is None:
                raise ValueError("hsts_max_age is said over TLS only: give tls_cert and tls_key")
            if isinstance(hsts_max_age, bool) or not 0 <= hsts_max_age <= 2**63:
                raise ValueError(f"hsts_max_age is a number of seconds from 0, got {hsts_max_age!r}")
        # Quick calls in a row before a procedure runs on a pinned worker's own thread; None
        # leaves the extension's default. Tests lower it, so that a busy host, which breaks
        # streaks, still lets one finish.
        self._trust_after: int | None = None
        self._procedures: dict[str, _Procedure] = {}
        self._native: _ucall.NativeServer | None = None
        self._loop: _EventLoop | None = None
        self._lock = threading.Lock()

    # ------------------------------------------------------------ registration

    @overload
    def __call__(self, func: F, /) -> F: ...

    @overload
    def __call__(
        self,
        func: None = None,
        /,
        *,
        name: str | None = None,
        summary: str | None = None,
        description: str | None = None,
        examples: list[dict[str, Any]] | None = None,
        errors: list[Any] | None = None,
        timeout: float | None = None,
        rate_limit: str | None = None,
    ) -> Callable[[F], F]: ...

    def __call__(self, func: F | None = None, /, *, name: str | None = None, **describe: Any) -> F | Callable[[F], F]:
        """``@server`` registers a function under its own name and returns it unchanged;
        ``@server(examples=[...], errors=[...], timeout=2.0, rate_limit="10/s")`` says more
        (see ``route``)."""
        _check_describing("__call__", describe)
        if func is None:
            return lambda f: self.route(f, name=name, **describe)
        return self.route(func, name=name, **describe)

    @overload
    def method(self, name: F, /) -> F: ...

    @overload
    def method(
        self,
        name: str,
        *,
        ignore_extra_params: bool | None = None,
        summary: str | None = None,
        description: str | None = None,
        examples: list[dict[str, Any]] | None = None,
        errors: list[Any] | None = None,
        timeout: float | None = None,
        rate_limit: str | None = None,
    ) -> Callable[[F], F]: ...

    def method(
        self, name: str | F, *, ignore_extra_params: bool | None = None, **describe: Any
    ) -> F | Callable[[F], F]:
        """``@server.method("ns.name")`` registers a function under another name;
        ``@server.method`` alone, as ``@server``, under its own."""
        _check_describing("method", describe)
        if callable(name):  # used without parentheses: the function came as the name
            return self.route(name, ignore_extra_params=ignore_extra_params, **describe)

        def register(func: F) -> F:
            return self.route(func, name=name, ignore_extra_params=ignore_extra_params, **describe)

        return register

    def batch(
        self,
        func: F | None = None,
        /,
        *,
        max_size: int = 32,
        max_wait_ms: float = 5.0,
        max_concurrent: int = 1,
        max_queue: int = 4096,
        name: str | None = None,
        summary: str | None = None,
        description: str | None = None,
        examples: list[dict[str, Any]] | None = None,
        errors: list[Any] | None = None,
    ) -> Any:
        """``@server.batch(max_size=32, max_wait_ms=5)`` registers a batch procedure: a
        function whose parameters are lists (or numpy arrays, the batch on axis 0) and
        whose result is a list (or an array split on axis 0), one item per call.

        >>> server = Server(port=0)
        >>> @server.batch(max_size=32, max_wait_ms=5)
        ... def square(x: list[float]) -> list[float]:
        ...     return [v * v for v in x]

        Callers call it one item at a time (``square(x=3.0)``), over any transport and
        inside JSON-RPC batches; its description is per item. The server groups calls from
        every connection into batches, without the GIL, and calls the function once per
        batch: at once when ``max_size`` calls wait, at most ``max_wait_ms`` after the first,
        and at once when calls do not arrive fast enough to fill it in time (a lone caller
        waits for nobody). ``max_concurrent`` batches run at a time, each on a thread of its
        own; ``async def`` functions run on the server's event loop.

        An exception raised by the function answers every call of the batch; an exception
        instance in the returned list answers that call only; a result of another length
        answers ``-32603`` to all (and is logged). A call whose caller disconnected while it
        waited is dropped. When ``max_queue`` calls wait, new ones are answered at once
        with an overload error (``-32000``, HTTP 503) whose ``data`` says ``"executed":
        false``. ``batch_stats()`` counts batches, their sizes and the calls' waits.
        Middleware runs for each call as its batch starts: a call it refuses gets its
        error and is left out, the others go on; there ``call_next()`` returns ``None``.
        """
        for option, value, low in (("max_size", max_size, 1), ("max_concurrent", max_concurrent, 1), ("max_queue", max_queue, 1)):
            if not isinstance(value, int) or isinstance(value, bool) or value < low:
                raise ValueError(f"{option} must be an integer of at least {low}, got {value!r}")
        if not isinstance(max_wait_ms, (int, float)) or isinstance(max_wait_ms, bool) or not 0 <= max_wait_ms <= 3_600_000:
            raise ValueError(f"max_wait_ms must be a number of milliseconds from 0 to 3600000, got {max_wait_ms!r}")
        options = {
            "max_size": max_size,
            "max_wait": max_wait_ms / 1000.0,
            "max_concurrent": max_concurrent,
            "max_queue": max_queue,
        }
        describe: dict[str, Any] = {"summary": summary, "description": description, "examples": examples, "errors": errors}

        def register(f: F) -> F:
            return self.route(f, name=name, **describe, _batch_options=options)

        return register if func is None else register(func)

    def batch_stats(self) -> dict[str, dict[str, Any]]:
        """What each batch procedure has done since the server started, by name:
        ``batches`` run and ``calls`` in them, ``sizes`` (``{bound: batches}``: a batch of
        n calls counts under the first bound of at least n), ``queue_wait_us`` (all calls'
        waits added up) and ``max_queue_wait_us``, ``rejected`` (queue full), ``abandoned``
        (caller gone), ``expired`` (deadline passed while queued), and ``queued`` now. Empty before ``start()``."""
        native = self._native
        return {} if native is None else native.batch_stats()

    def route(
        self,
        func: F,
        name: str | None = None,
        *,
        ignore_extra_params: bool | None = None,
        summary: str | None = None,
        description: str | None = None,
        examples: list[dict[str, Any]] | None = None,
        errors: list[Any] | None = None,
        timeout: float | None = None,
        rate_limit: str | None = None,
        _batch_options: dict[str, Any] | None = None,
    ) -> F:
        """Register ``func`` (under ``name``, default its ``__name__``) and return it unchanged.

        ``timeout`` (seconds) bounds each call: past it the caller gets "deadline exceeded"
        at once (HTTP 504), an ``async def`` handler is cancelled, and a plain one's late
        result is dropped. A caller may ask for less (see docs/context-and-middleware.md).

        ``rate_limit`` (``"10/s"``, ``"600/min"``) limits each client's calls of this
        procedure, besides the server's ``rate_limit``: past it a call is refused before
        it runs (HTTP 429 with ``Retry-After``; JSON-RPC ``-32029``, ``"executed": false``).

        Its description (``rpc.discover``, ``/openrpc.json``, ``/openapi.json``, ``/docs``)
        comes from its type hints and docstring; ``summary`` and ``description`` replace
        the docstring's, ``examples`` are ``{"params": {...} or [...], "result": ...}``
        dicts (also ``"name"``, ``"summary"``), ``errors`` are ``RPCError`` instances or
        ``(code, message)`` pairs it may answer with.
        """
        if not callable(func):
            raise TypeError(f"a procedure must be callable, got {func!r}")
        if timeout is not None and (isinstance(timeout, bool) or not timeout > 0):
            raise ValueError(f"timeout must be a positive number of seconds, got {timeout!r}")
        if rate_limit is not None:
            if _batch_options is not None:
                raise ValueError("rate_limit is not taken by batch procedures: give the server one")
            _ucall.check_rate_limit(rate_limit)
        name = name if name is not None else getattr(func, "__name__", None)
        if not name:
            raise ValueError("the procedure needs a name: use @server.method('name')")
        localns = _caller_locals()
        batch: _BatchPlan | None = None
        described: Callable[..., Any] = func
        if _batch_options is not None:
            view, columns = _batch.item_view(func, localns)
            batch = _BatchPlan(view, columns, _batch_options)
            described = view
        _signature.plan(described, localns)  # fail now, at the decorator, on hints that cannot be honoured
        description_ = _schema.describe(
            name, described, localns, summary=summary, description=description, examples=examples, errors=errors
        )
        with self._lock:
            if self._native is not None:
                raise RuntimeError("register procedures before the server starts")
            earlier = self._procedures.get(name)
            if earlier is not None and _origin(earlier.func) != _origin(func):
                # Two different functions under one name is likely a mistake; the same one
                # defined again (a notebook cell run twice) replaces the first quietly.
                warnings.warn(
                    f"procedure {name!r} registered again: {_origin(func)} replaces {_origin(earlier.func)}",
                    stacklevel=_user_frame()[1],
                )
            self._procedures[name] = _Procedure(
                name, func, ignore_extra_params, localns, description_, batch, timeout, rate_limit
            )
        return func

    @property
    def procedures(self) -> dict[str, Callable[..., Any]]:
        """Registered functions by method name."""
        return {name: p.func for name, p in self._procedures.items()}

    def middleware(self, func: F) -> F:
        """Register ``func(ctx, call_next)`` to run around every call (inside those
        registered before it), and return it. ``ctx`` is the call's ``ucall.Context``, with
        its ``method`` and ``params``; ``call_next()`` runs the call and returns its result.
        Raise to reject the call (``ucall.HTTPError(401, ...)`` answers HTTP with 401); an
        ``async def`` middleware awaits ``call_next()``. With an async middleware every
        call runs on the server's asyncio loop, plain handlers included. Around a batch
        procedure it runs for each call as its batch starts, and ``call_next()`` only lets
        the call go on (it returns ``None``: the results come from the batch)."""
        if not callable(func):
            raise TypeError(f"a middleware must be callable, got {func!r}")
        with self._lock:
            if self._native is not None:
                raise RuntimeError("register middleware before the server starts")
            self._middleware.append(func)
        return func

    def readiness_check(self, func: F) -> F:
        """Register ``func()`` as a readiness check (a model loaded, a database reachable):
        ``GET /readyz`` and ``rpc.health`` answer "serving" only while every check returns
        a true value. A check that returns false or raises makes them answer "not ready"
        naming the check. Checks run on each probe, so keep them quick. Returns ``func``."""
        if not callable(func):
            raise TypeError(f"a readiness check must be callable, got {func!r}")
        self._checks.append(func)
        return func

    @property
    def _draining(self) -> bool:
        """Draining (``drain_delay`` after SIGTERM): ``GET /readyz`` answers 503."""
        return self._drain

    @_draining.setter
    def _draining(self, on: bool) -> None:
        self._drain = on
        native = self._native
        if native is not None:
            native.set_draining(on)

    def _failed_check(self) -> tuple[str, str | None] | None:
        """The first readiness check that fails, with what it raised; the core asks this
        on every readiness probe."""
        for check in self._checks:
            name = getattr(check, "__name__", repr(check))
            try:
                passed = check()
            except Exception as error:  # noqa: BLE001 - a failed check is an answer, not a crash
                return name, str(error)
            if not passed:
                return name, None
        return None

    def _health(self) -> dict[str, str]:
        """``rpc.health``: what ``GET /readyz`` says (the core's rule), as a result or an error."""
        native = self._native
        if native is None:
            raise RPCError("stopping", data={"status": "stopping"})
        ready, body = native.ready_state()
        state: dict[str, str] = json.loads(body)
        if not ready:
            raise RPCError(state["status"], data=state)
        return state

    def _set_request_log(self, target: Any, log_format: str) -> None:
        """Where the request log goes (``request_log``), as the extension takes it."""
        if log_format not in ("text", "json"):
            raise ValueError(f"request_log_format must be 'text' or 'json', got {log_format!r}")
        path: str | None = None
        fd: int | None = None
        if target is None:
            pass
        elif isinstance(target, str) and target == "-":
            fd = sys.stdout.fileno()
        elif isinstance(target, (str, os.PathLike)):
            path = os.fspath(target)
        elif isinstance(target, int) and not isinstance(target, bool):
            fd = target
        elif hasattr(target, "fileno"):
            if hasattr(target, "flush"):
                target.flush()  # what Python buffered goes before the server's lines
            fd = target.fileno()
        else:
            raise TypeError(
                f"request_log takes a path, '-', a file object or a file descriptor, not {type(target).__name__}"
            )
        # A file object stays referenced (and so open) while the server may start.
        self._request_log = target
        self._limits.update(request_log_path=path, request_log_fd=fd, request_log_format=log_format)

    def _set_unix_socket(self, path: str | os.PathLike[str] | None, mode: int | None) -> None:
        """The Unix domain socket to listen on too (``unix_socket``), checked."""
        if path is not None:
            path = os.fspath(path)
            if not isinstance(path, str) or not path:
                raise ValueError(f"unix_socket must be a path, got {path!r}")
        if mode is not None:
            if path is None:
                raise ValueError("unix_socket_mode needs unix_socket, the socket's path")
            if isinstance(mode, bool) or not isinstance(mode, int) or not 0 <= mode <= 0o7777:
                raise ValueError(f"unix_socket_mode takes permission bits (0o660), got {mode!r}")
        self._limits.update(unix_socket=path, unix_socket_mode=mode)

    @property
    def unix_socket(self) -> str | None:
        """The Unix domain socket's path the server listens on too, or ``None``."""
        path: str | None = self._limits["unix_socket"]
        return path

    def _native_options(self) -> dict[str, Any]:
        """The extension server's keyword options: the limits, and what tests set."""
        options = dict(self._limits)
        # run() says the start-up line itself, with the procedures the core does not know.
        options["quiet"] = True
        if self._supervisor is not None:
            options["share_port"] = True
        if self._trust_after is not None:
            options["trust_after"] = self._trust_after
        return options

    # ------------------------------------------------------------ lifecycle

    def start(self) -> Server:
        """Bind and serve on background threads; returns at once. ``stop()`` ends it."""
        with self._lock:
            if self._native is not None:
                raise RuntimeError("the server is already running")
            async_middleware = any(_middleware.is_async(m) for m in self._middleware)
            needs_loop = async_middleware or any(
                _is_async(p.func) or inspect.isasyncgenfunction(p.func) for p in self._procedures.values()
            )
            loop = _EventLoop() if needs_loop else None
            keyed = self._limits["rate_limit_key"].strip().lower() == "middleware"
            if keyed and not self._middleware:
                raise ValueError('rate_limit_key="middleware" needs a middleware that calls ctx.limit_by(key)')
            chain = _middleware.chain(self._middleware, keyed)
            # Outside the middleware: a call it refuses has its span too.
            tracing = None
            if self.tracing and _tracing.active():
                tracing = _tracing.ServerTracing(chain, self.host, self._requested_port, _ucall.__version__)
                chain = tracing
            # Around a batch procedure the middleware runs for each call as its batch starts.
            gate = None if chain is None else _batch.gate(chain, loop.loop if loop is not None else None)
            if tracing is not None and gate is not None:
                gate = tracing.admitting(gate)
            native = _ucall.NativeServer(
                self.host,
                self._requested_port,
                self.threads,
                self.engine_name,
                _codec.encode,
                RPCError,
                _describe if self.debug else None,
                loop.submit if loop is not None else None,
                log_failure=_log_failure,
                middleware=chain,
                max_threads=self.max_threads,
                time_calls=tracing is not None,
                replied=None if tracing is None else tracing.replied,
                **self._native_options(),
            )
            try:
                native.discovery(json.dumps(self._discovery))
                if self._mcp is not None:
                    native.mcp(json.dumps(self._mcp))
                for procedure in self._procedures.values():
                    native.describe(json.dumps(procedure.description))
                    func = procedure.func
                    ignore = procedure.ignore_extra_params
                    ignore = self.ignore_extra_params if ignore is None else ignore
                    batch = procedure.batch
                    if batch is not None:
                        runner = _batch.Runner(func, batch.columns, _is_async(func))
                        native.add_batch(
                            procedure.name,
                            runner if tracing is None else tracing.runner(procedure.name, runner),
                            _signature.plan(batch.view, None),
                            ignore,
                            gate=gate,
                            **batch.options,
                        )
                        continue
                    # A generator streams its items, then its return value (docs/streaming.md).
                    streams = inspect.isgeneratorfunction(func) or inspect.isasyncgenfunction(func)
                    native.add(
                        procedure.name,
                        func,
                        _signature.plan(func, procedure.localns),
                        ignore,
                        async_middleware or _is_async(func) or inspect.isasyncgenfunction(func),
                        _signature.context_param(func, procedure.localns),
                        procedure.timeout,
                        streams=streams,
                        rate_limit=procedure.rate_limit,
                    )
                if HEALTH not in self._procedures:
                    native.add(HEALTH, self._health, _signature.plan(self._health, None), True, async_middleware)
                native.set_readiness_check(self._failed_check)
                native.set_draining(self._drain)
                native.start()
                if tracing is not None:
                    tracing.port = native.port or self._requested_port
            except BaseException:
                if loop is not None:
                    loop.close()
                raise
            self._native = native
            self._loop = loop
            _running.add(self)
        _log.info("%s", self._serving_line())
        return self

    def stop(self) -> None:
        """Stop gracefully and wait for the workers. Idempotent.

        Calls in flight get ``shutdown_timeout`` (5 s by default) and a second more to
        finish; a handler still running then is left to finish on its own thread, with a
        ``RuntimeWarning``, rather than keep the process alive. A second Ctrl-C meanwhile
        ends the wait with ``KeyboardInterrupt``.
        """
        with self._lock:
            url = self.url
            native, self._native = self._native, None
            loop, self._loop = self._loop, None
        try:
            if native is not None:
                counts = native.stop()
                if counts is None:
                    _log.info("stopped serving on %s", url)
                else:
                    answered, unanswered = counts
                    # Calls cut off are the operator's business: say so above info.
                    level = logging.WARNING if unanswered else logging.INFO
                    _log.log(
                        level,
                        "stopped serving on %s: %d call(s) answered during the drain, %d left unanswered",
                        url,
                        answered,
                        unanswered,
                    )
        finally:
            if loop is not None:
                loop.close()
            _running.discard(self)

    def run(
        self,
        max_cycles: int = -1,
        max_seconds: float = -1,
        *,
        ready: Callable[[Server], None] | None = None,
        workers: int | None = None,
        metrics_port: int | None = None,
    ) -> None:
        """Serve until Ctrl-C or SIGTERM (or ``max_seconds``, or ``max_cycles``, when
        positive), then stop gracefully. Starts the server if needed.

        ``max_cycles`` counts the turns of the workers' event loops, all workers together,
        since the server started; a turn handles what one wait for I/O found ready. An idle
        server's loops sleep without turning, so only traffic brings ``max_cycles`` nearer:
        give ``max_seconds`` too for a bound in time.

        On SIGTERM with ``drain_delay``, ``rpc.health`` answers "draining" at once and the
        server goes on serving for ``drain_delay`` seconds before it stops.

        ``ready(server)`` is called once serving, with the signal handlers in place: the
        moment to announce the port. Without it, and unless ``quiet``, a line on stderr
        says where the server listens, on which engine, and its procedures.

        ``workers=N`` serves from N processes (forked from this one) that share the port,
        under a supervisor that starts a worker again when one dies; SIGHUP restarts them
        one at a time, each old one stopped once its replacement serves; SIGTERM or Ctrl-C
        stops them all. It needs the main thread; ``max_cycles`` and ``max_seconds`` do
        not apply. Each worker counts its own metrics; with ``metrics_port`` the
        supervisor serves their totals at ``GET /metrics`` on that port of ``host`` (0
        picks one: ``metrics_port`` says which once running).
        """
        if workers is not None:
            self._run_workers(workers, ready, metrics_port)
            return
        if metrics_port is not None:
            raise ValueError("metrics_port is the supervisor's: it needs workers=N")
        deadline = time.monotonic() + max_seconds if max_seconds is not None and max_seconds > 0 else None
        terminated = threading.Event()
        restore = None
        if threading.current_thread() is threading.main_thread():
            restore = signal.signal(signal.SIGTERM, lambda *_: terminated.set())
        drained_at: float | None = None
        try:
            if self._native is None:
                self.start()
            native = self._native
            assert native is not None
            if ready is not None:
                ready(self)
            elif not self._limits["quiet"] and not (_log.isEnabledFor(logging.INFO) and _log.hasHandlers()):
                # Where logging shows info records, the start-up record says it already.
                print(self._listening_line(), file=sys.stderr, flush=True)
            while True:
                if terminated.is_set():
                    if drained_at is None:
                        self._draining = True
                        drained_at = time.monotonic() + self.drain_delay
                    if time.monotonic() >= drained_at:
                        break
                timeout = 0.1 if deadline is None else min(0.1, max(deadline - time.monotonic(), 0))
                if native.wait(timeout):
                    break
                if deadline is not None and time.monotonic() >= deadline:
                    break
                if max_cycles is not None and max_cycles > 0 and native.cycles >= max_cycles:
                    break
                if self._supervisor is not None and os.getppid() != self._supervisor:
                    break  # the supervisor is gone: nobody would stop or replace this worker
        except KeyboardInterrupt:
            pass
        finally:
            self.stop()
            self._draining = False
            if restore is not None:
                signal.signal(signal.SIGTERM, restore)

    def _listening_line(self) -> str:
        """What ``run()`` says once serving, as uvicorn does: where, how and what."""
        return f"ucall: {self._serving_line('; Ctrl-C stops')}"

    def _serving_line(self, tail: str = "", engine: str | None = None, workers: str = "") -> str:
        """The start-up record, in the one format of every front end (docs/operations.md):
        where, on which engine and threads, and then what it serves."""
        names = sorted(self._procedures)
        shown = ", ".join(names[:8]) + (f" and {len(names) - 8} more" if len(names) > 8 else "")
        threads = f"{self.threads} thread{'s' if self.threads != 1 else ''}{' each' if workers else ''}"
        tls = f", TLS on port {self.tls_port}" if self._limits["tls_port"] is not None else ""
        unix = f" and unix:{self.unix_socket}" if self.unix_socket is not None else ""
        fallback = f"; io_uring unavailable: {self.engine_fallback}" if self.engine_fallback else ""
        procedures = f"{len(names)} procedure{'s' if len(names) != 1 else ''}" + (f": {shown}" if names else "")
        engine = engine or self.engine
        return f"listening on {self.url}{unix} (engine {engine}, {threads}{tls}{fallback}{workers}; {procedures}{tail})"

    def _supervisor_line(self, pids: list[int], engine: str, metrics_port: int | None = None) -> str:
        """What a supervisor of worker processes says once they all serve."""
        metrics = "" if metrics_port is None else f"; their metrics on port {metrics_port}"
        workers = f"; workers {', '.join(str(pid) for pid in pids)}"
        return self._serving_line(f"{metrics}; Ctrl-C stops", engine or "?", workers)

    def _stop_timeout(self) -> float:
        """How long a worker told to stop may take before its supervisor kills it."""
        shutdown = self._limits["shutdown_timeout"]
        return self.drain_delay + (5.0 if shutdown is None else shutdown) + 2.0

    def _run_workers(self, workers: int, ready: Callable[[Server], None] | None, metrics_port: int | None) -> None:
        from ucall import _workers

        if self._native is not None:
            raise RuntimeError("run(workers=N) starts the workers itself: call it on a server not started")
        if threading.current_thread() is not threading.main_thread():
            raise RuntimeError("run(workers=N) needs the main thread: it handles the signals")
        if self.unix_socket is not None:
            raise ValueError(_UNIX_SOCKET_ONE_PROCESS)
        requested = self._requested_port, self._limits["tls_port"]
        reserved = [_workers.reserve_port(self.host, self._requested_port)]
        try:
            self._requested_port = reserved[0].getsockname()[1]
            if self._limits["tls_port"] is not None:
                reserved.append(_workers.reserve_port(self.host, self._limits["tls_port"]))
                self._limits["tls_port"] = reserved[1].getsockname()[1]
            supervisor = _workers.Supervisor(
                self._serve_as_worker,
                workers,
                stop_timeout=self._stop_timeout(),
                metrics=None if metrics_port is None else (self.host, metrics_port),
            )

            def serving(pids: list[int]) -> None:
                self.metrics_port = supervisor.metrics_port
                if ready is not None:
                    ready(self)
                elif not self._limits["quiet"]:
                    line = self._supervisor_line(pids, supervisor.engine, supervisor.metrics_port)
                    print(f"ucall: {line}", file=sys.stderr, flush=True)

            status = supervisor.run(serving)
        finally:
            self._requested_port, self._limits["tls_port"] = requested
            for sock in reserved:
                sock.close()
        if status != 0:
            raise RuntimeError("the workers did not start serving (their errors are above)")

    def _serve_as_worker(self, ready_fd: int) -> int:
        """Serve as one of a supervisor's workers: the port shared, the engine's name written
        to ``ready_fd`` once serving. Returns the exit status."""
        self._supervisor = os.getppid()

        from ucall import _workers

        def announce(_server: Server) -> None:
            folder = os.environ.get(_workers.METRICS_DIR)
            native = self._native
            if folder and native is not None:
                _workers.serve_worker_metrics(native.metrics_text, os.path.join(folder, f"{os.getpid()}.sock"))
            os.write(ready_fd, ((native.engine if native is not None else None) or "?").encode())
            os.close(ready_fd)

        self.run(ready=announce)
        return 0

    def __enter__(self) -> Server:
        if self._native is None:
            self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def running(self) -> bool:
        native = self._native
        return native is not None and native.running

    @property
    def port(self) -> int:
        """The bound port once started (the one asked for before)."""
        native = self._native
        port = native.port if native is not None else None
        return port if port is not None else self._requested_port

    @property
    def tls_port(self) -> int | None:
        """The port that speaks TLS once started: the separate TLS listener's when
        ``tls_port`` was given, else the server's own port when it speaks TLS (``None``
        without TLS, or before ``start``)."""
        native = self._native
        return native.tls_port if native is not None else None

    @property
    def engine(self) -> str | None:
        """The engine in use once started (``"poll"``, ``"uring"``)."""
        native = self._native
        return native.engine if native is not None else None

    @property
    def engine_fallback(self) -> str | None:
        """Why ``engine="auto"`` serves with poll where io_uring was wanted, e.g.
        ``"io_uring is forbidden here (EPERM), likely by a seccomp filter"``; None when it
        did not fall back, or before the server started."""
        native = self._native
        return native.engine_fallback if native is not None else None

    @property
    def url(self) -> str:
        """``http://host:port``; ``https://`` when the port speaks TLS (no separate ``tls_port``)."""
        host = self.host if ":" not in self.host else f"[{self.host}]"
        speaks_tls = self._limits["tls_cert"] is not None and self._limits["tls_port"] is None
        return f"{'https' if speaks_tls else 'http'}://{host}:{self.port}"

    def __repr__(self) -> str:
        state = f"running on {self.url}" if self.running else "stopped"
        return f"<ucall.Server {state}, {len(self._procedures)} procedures>"


#: Why worker processes and a Unix socket do not go together: a restart starts the new
#: worker while the old one still holds the socket's path, which one process owns.
_UNIX_SOCKET_ONE_PROCESS = (
    "unix_socket is served by one process: worker processes cannot share its path "
    "(serve the Unix socket without workers, or the TCP port with them)"
)

# The largest size the core takes (a usize).
_SIZE_MAX = 2 ** (8 * struct.calcsize("P")) - 1


def _check_options(**options: Any) -> None:
    """Refuse options the core cannot take, naming them (the core's own errors name neither
    an option out of range nor TLS options given without a certificate)."""
    ranges = {
        "port": (0, 65535),
        "tls_port": (0, 65535),
        "threads": (1, _SIZE_MAX),
        "max_threads": (1, _SIZE_MAX),
        "max_body_bytes": (1, _SIZE_MAX),
        "max_head_bytes": (64, _SIZE_MAX),
        "max_batch": (1, _SIZE_MAX),
        "max_connections": (1, _SIZE_MAX),
        "max_pending_calls": (1, _SIZE_MAX),
        "max_connections_per_peer": (1, _SIZE_MAX),
    }
    for name, (low, high) in ranges.items():
        value = options[name]
        if isinstance(value, int) and not low <= value <= high:
            bound = f"at least {low}" if high == _SIZE_MAX and value < low else f"from {low} to {high}"
            raise ValueError(f"{name} must be {bound}, got {value}")
    given = [n for n in ("tls_cert", "tls_key", "tls_client_ca", "tls_port") if options[n] is not None]
    missing = [n for n in ("tls_cert", "tls_key") if options[n] is None]
    if given and missing:
        raise ValueError(
            f"TLS needs both a certificate chain and a private key: {_listed(given)} given without {_listed(missing)}"
        )


def _listed(options: list[str]) -> str:
    return " and ".join(f"{name}=" for name in options)


def _origin(func: Callable[..., Any]) -> str:
    """Where a function comes from, as ``module.qualname``."""
    target = getattr(func, "func", func)  # functools.partial
    module = getattr(target, "__module__", None) or type(target).__module__
    qualname = getattr(target, "__qualname__", None) or type(target).__qualname__
    return f"{module}.{qualname}"


_is_async = _middleware.is_async


def _registry_page(registry: Any) -> Callable[[], str]:
    """The text a ``prometheus_client`` registry adds to the metrics page, as a function
    called on each scrape."""
    if not callable(getattr(registry, "collect", None)):
        raise TypeError(f"metrics_registry must be a prometheus_client CollectorRegistry, got {registry!r}")
    from prometheus_client.exposition import generate_latest  # only a server given a registry needs it

    return lambda: generate_latest(registry).decode("utf-8")
