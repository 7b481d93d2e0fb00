# SPDX-License-Identifier: Apache-2.0
"""The private extension module behind ``ucall`` (Rust, PyO3). Use the public API instead."""

from typing import Any, Callable, Dict, List, Literal, Optional, Sequence, Tuple, Union, final, overload

__all__ = [
    "AttachmentMemory",
    "BatchReply",
    "BinaryBody",
    "Context",
    "DEADLINE_EXCEEDED",
    "DeferredReply",
    "ERROR_CODES",
    "NativeClient",
    "NativeMux",
    "NativeServer",
    "NpyBytes",
    "ReplyBody",
    "SERVER_ERROR_MAX",
    "SERVER_ERROR_MIN",
    "StreamReply",
    "UNSENT_AT_MOST",
    "__version__",
    "b64decode",
    "check_rate_limit",
    "code_for_http_status",
    "dumps",
    "loads",
    "type_text",
]

__version__: str
#: The pre-defined JSON-RPC error codes by name (``"INVALID_PARAMS": -32602``...), from the core's table.
ERROR_CODES: dict[str, int]
#: The range left to server-defined errors.
SERVER_ERROR_MIN: int
SERVER_ERROR_MAX: int
#: ``(status, message)`` of the error a caller gets at its call's deadline (the core's).
DEADLINE_EXCEEDED: tuple[int, str]
#: While more request bytes than this wait to be written, the native clients encode no more.
UNSENT_AT_MOST: int

#: ``(name, kind, check, converter, has_default, default)``; see ``ucall._signature``.
_ParamSpec = tuple[str, int, int, Optional[Callable[[Any], Any]], bool, Any]

@final
class NativeServer:
    """The core server with Python procedures. Nothing is bound until ``start``."""

    def __new__(
        cls,
        host: str,
        port: int,
        threads: int,
        engine_name: str,
        encode: Callable[[Any], Any],
        rpc_error: type[BaseException],
        describe: Optional[Callable[[BaseException, Any], str]] = None,
        submit: Optional[Callable[[list[tuple[Any, Any, Optional[float]]]], None]] = None,
        *,
        log_failure: Optional[Callable[[str, BaseException, Any], None]] = None,
        middleware: Optional[Callable[[Context, Any, Any, Any], Any]] = None,
        max_threads: int = 64,
        max_body_bytes: Optional[int] = None,
        max_head_bytes: Optional[int] = None,
        max_batch: Optional[int] = None,
        max_connections: Optional[int] = None,
        max_pending_calls: Optional[int] = None,
        header_timeout: Optional[float] = None,
        idle_timeout: Optional[float] = None,
        shutdown_timeout: Optional[float] = None,
        tls_cert: Optional[str] = None,
        tls_key: Optional[str] = None,
        tls_client_ca: Optional[str] = None,
        tls_port: Optional[int] = None,
        quiet: bool = False,
        share_port: bool = False,
        trust_after: int = 1000,
        cors_origins: Optional[list[str]] = None,
        cors_methods: Optional[list[str]] = None,
        cors_headers: Optional[list[str]] = None,
        cors_max_age: Optional[int] = None,
        hsts_max_age: Optional[int] = None,
        healthz_path: Optional[str] = ...,  # "/healthz"
        readyz_path: Optional[str] = ...,  # "/readyz"
        readyz_not_found: bool = False,
        metrics_path: Optional[str] = ...,  # "/metrics"
        metrics_buckets: Optional[List[float]] = ...,  # gRPC's, 100 µs to 10 s
        metrics_extra: Optional[Callable[[], str]] = ...,  # the page's tail: a registry's text
        request_log_path: Optional[str] = None,
        request_log_fd: Optional[int] = None,
        request_log_format: Optional[str] = None,  # "text"
        unix_socket: Optional[str] = None,
        unix_socket_mode: Optional[int] = None,
        rate_limit: Optional[str] = None,
        rate_limit_key: Optional[str] = None,
        trusted_proxies: Optional[list[str]] = None,
        max_connections_per_peer: Optional[int] = None,
        time_calls: bool = False,
        replied: Optional[Callable[[Context, int], None]] = None,
    ) -> "NativeServer": ...
    def add(
        self,
        name: str,
        func: Callable[..., Any],
        params: Sequence[_ParamSpec],
        ignore_extra: bool,
        is_async: bool = False,
        context: Optional[tuple[str, Optional[int]]] = None,
        timeout: Optional[float] = None,
        streams: bool = False,
        rate_limit: Optional[str] = None,
    ) -> None:
        """Register ``func`` under ``name``; only before ``start``. ``context``: the
        parameter that takes the call's ``Context``, and its positional place (or ``None``:
        by name). ``streams``: ``func`` is a generator whose items stream. ``rate_limit``:
        each client's limit on this procedure (``"10/s"``)."""
    def add_batch(
        self,
        name: str,
        runner: Callable[[list[tuple[Any, ...]]], Any],
        params: Sequence[_ParamSpec],
        ignore_extra: bool,
        *,
        max_size: int,
        max_wait: float,
        max_concurrent: int,
        max_queue: int,
        gate: Optional[Callable[[list[Context]], list[Optional[BaseException]]]] = None,
    ) -> None:
        """Register the batch procedure ``name``: ``runner(rows)`` gets the params of a
        batch's calls bound by the per-item ``params`` and returns one value per call (or
        an awaitable of them); ``gate(contexts)`` (with middleware) runs the middleware for
        each call first: ``None`` admits it, an exception refuses it. Only before ``start``."""
    def batch_stats(self) -> dict[str, dict[str, Any]]:
        """Each batch procedure's counters, by name."""
    def describe(self, description: str) -> None:
        """Describe a procedure (the JSON form of the core's MethodDoc); only before ``start``.
        Raises ``ValueError`` for a malformed description."""
    def discovery(self, settings: str) -> None:
        """Where and whether the server describes itself (JSON: title, version, description,
        rpc_discover, openrpc_path, openapi_path, docs_path); only before ``start``."""
    def mcp(self, settings: str) -> None:
        """Serve the procedures as MCP tools (JSON: path, allowed_origins, name, version,
        instructions, page_size); only before ``start``. Raises ``ValueError`` for
        malformed settings."""
    def set_draining(self, on: bool) -> None:
        """Mark the server draining (``GET /readyz`` answers 503) or serving again."""
    def set_readiness_check(self, check: Callable[[], Optional[tuple[str, Optional[str]]]]) -> None:
        """Run ``check()`` on every readiness probe: ``None`` when ready, else
        ``(check_name, error_or_None)``."""
    def ready_state(self) -> tuple[bool, str]:
        """What ``GET /readyz`` reports: ``(ready, its JSON body)``."""
    def start(self) -> int:
        """Bind and serve on background threads; the bound port. Raises ``OSError``."""
    def metrics_text(self) -> Optional[str]:
        """The page ``GET /metrics`` answers (Prometheus text format), while running with metrics on."""
    def wait(self, timeout: Optional[float] = None) -> bool:
        """Wait (GIL released) until the workers finished; False after ``timeout`` seconds."""
    def stop(self) -> Optional[Tuple[int, int]]:
        """Stop gracefully and wait for the threads, up to shutdown_timeout and a second
        more (a handler still running then is left behind, with a RuntimeWarning); a
        signal handler's exception (a second Ctrl-C) ends the wait. Idempotent. Returns
        (calls answered during the drain, calls left unanswered), None if not running."""
    @property
    def running(self) -> bool: ...
    @property
    def port(self) -> Optional[int]: ...
    @property
    def tls_port(self) -> Optional[int]: ...
    @property
    def engine(self) -> Optional[str]: ...
    @property
    def engine_fallback(self) -> Optional[str]:
        """Why ``auto`` serves with poll where io_uring was wanted (None when it did not
        fall back, or before ``start``)."""
    @property
    def cycles(self) -> int:
        """Event-loop turns taken so far, over all workers."""

@final
class DeferredReply:
    """The reply of an ``async def`` call; completed by its task's done-callback."""

    def settle(self, task: Any) -> None: ...

@final
class StreamReply:
    """The streamed reply of an async generator handler, fed by ``ucall._streaming.drive``."""

    def offer(self, item: Any) -> Optional[bool]:
        """Send ``item`` if there is room: True sent, False full, None the caller has gone."""
    def settle(self, task: Any) -> None: ...

@final
class BatchReply:
    """The replies of an ``async def`` batch; completed by its task's done-callback."""

    def settle(self, task: Any) -> None: ...

@final
class Context:
    """How a call reached the server. A handler gets it through a parameter annotated
    ``ucall.Context``, which is no part of the procedure's params or schema."""

    @property
    def transport(self) -> str:
        """``"http"``, ``"tcp"`` or ``"websocket"``."""
    @property
    def tls(self) -> bool:
        """Whether TLS carried the call."""
    @property
    def tls_subject(self) -> Optional[str]:
        """The subject of the client's TLS certificate (mutual TLS), ``"CN=alice, O=Example"``."""
    @property
    def peer(self) -> Optional[tuple[str, int]]:
        """The peer's ``(host, port)``."""
    @property
    def headers(self) -> dict[str, str]:
        """The request's header fields, names in lower case (a WebSocket call's: the
        upgrade request's; none over raw TCP); repeated fields joined with ", "."""
    @property
    def method(self) -> str:
        """The JSON-RPC method name."""
    @property
    def id(self) -> Any:
        """The JSON-RPC id (``None`` for a notification and a REST-style call)."""
    @property
    def timeout(self) -> Optional[float]:
        """The seconds the caller allows the call (``UCall-Timeout`` header or ``"timeout"``
        member), or ``None``."""
    @property
    def deadline(self) -> Optional[float]:
        """When the caller stops waiting, on ``time.monotonic()``'s clock (the earlier of the
        procedure's ``timeout=`` and the caller's), or ``None``."""
    @property
    def caller_gone(self) -> bool:
        """Whether the caller has gone (its connection ended, an HTTP client stopped sending,
        a WebSocket client sent Close, an MCP client cancelled this call): a handler that
        works long can stop."""
    @property
    def traceparent(self) -> Optional[str]:
        """The caller's W3C ``traceparent`` (its request's ``"_meta"`` member, else the HTTP
        header field) as version 00 writes it, when it sent a valid one; else ``None``."""
    @property
    def tracestate(self) -> Optional[str]:
        """The ``tracestate`` sent with a valid ``traceparent``, when valid too; else ``None``."""
    @property
    def received_ns(self) -> Optional[int]:
        """When the server read the request, on ``time.monotonic_ns()``'s clock, when calls
        are timed (tracing on); else ``None``."""
    @property
    def params(self) -> Any:
        """The params as sent, decoded (middleware only; else ``None``)."""
    def limit_by(self, key: str) -> None:
        """Rate-limit this call as a call of the client ``key`` names (server with
        ``rate_limit_key="middleware"``); over the limit raises ``HTTPError`` 429."""
    def _limit_by_peer(self) -> None: ...

def check_rate_limit(
    rate: Optional[str] = None, key: Optional[str] = None, trusted_proxies: Optional[list[str]] = None
) -> None:
    """Raise ``ValueError`` naming the rate-limit setting the core cannot take: a rate
    (``"100/s"``, ``"6000/min"``), a client key (``"peer"``, ``"bearer"``,
    ``"header:<name>"``, ``"middleware"``), or a trusted proxy (an address or network)."""

def type_text(schema: str) -> str:
    """A JSON Schema (JSON text) in the few words the /docs page shows for it
    (``array<integer>``, ``base64 application/x-npy``). ``ValueError`` if it is not JSON."""

def code_for_http_status(status: int) -> int:
    """The JSON-RPC code an error given only this HTTP status carries (the core's table)."""

def dumps(obj: Any, encode: Optional[Callable[[Any], Any]] = None) -> str:
    """Serialize as the server does (``ValueError`` when there is no JSON form)."""

def loads(text: Union[str, bytes]) -> Any:
    """Parse JSON (``str`` or UTF-8 ``bytes``) as the server does (integers of any size stay exact)."""

@overload
def b64decode(text: Union[str, bytes], bytearray: Literal[False] = False) -> bytes:
    """Base64 by the core's rule (padding optional, leftover bits zero); ``ValueError`` otherwise."""

@overload
def b64decode(text: Union[str, bytes], bytearray: Literal[True]) -> bytearray: ...
@overload
def b64decode(text: Union[str, bytes], bytearray: bool) -> Union[bytes, bytearray]: ...

@final
class NpyBytes:
    """A C-contiguous numpy array's ``.npy`` file as its header and the array, written as
    base64 by the native writer without joining them first."""

    def __new__(cls, header: bytes, array: Any) -> NpyBytes: ...

@final
class AttachmentMemory:
    """An attachment's bytes where they lie (the connection's input, lent by the core, or
    the copy a waiting call's params were kept in), alive while this object is (the base
    of a numpy array param made of them); read them through ``ucall._attachments.view``,
    or as uint8 by ``numpy.asarray``."""

    @property
    def address(self) -> int: ...
    def __len__(self) -> int: ...
    @property
    def __array_interface__(self) -> Dict[str, Any]: ...

@final
class BinaryBody:
    """A binary reply's body from the native transport, in the one buffer it was read into."""

    def text(self) -> bytes:
        """The JSON text."""
    def section_bytes(self, offset: int, length: int) -> bytes:
        """Bytes of the attachment section, copied."""
    @property
    def __array_interface__(self) -> Dict[str, Any]:
        """The whole body for numpy, read-only, viewed where it lies."""
    def __len__(self) -> int: ...

@final
class ReplyBody:
    """A large JSON reply from the native transport, checked and kept as its text."""

    def value(self) -> Any:
        """The whole reply as its Python value."""
    def answers(self, id: Any) -> bool:
        """Whether this is a result (no error) for the call with this id."""
    @overload
    def result_base64(self, bytearray: Literal[False] = False) -> Optional[bytes]:
        """The result decoded from base64; None when it is not a base64 string."""
    @overload
    def result_base64(self, bytearray: Literal[True]) -> Optional[bytearray]: ...
    @overload
    def result_base64(self, bytearray: bool) -> Optional[Union[bytes, bytearray]]: ...
    def __len__(self) -> int: ...

@final
class NativeClient:
    """A blocking client's connection (HTTP, raw TCP or WebSocket, plain or over TLS);
    the GIL is released while it waits. ``tls`` (None: plaintext) holds ``cacert``,
    ``insecure``, ``tls_cert``, ``tls_key``, ``server_hostname`` and ``resumption``.
    ``headers`` go with every HTTP request and the WebSocket upgrade (ValueError for a
    bad name or value). A reply over ``max_reply_size`` bytes (None: any size) raises
    ProtocolError."""

    def __new__(
        cls,
        host: str,
        port: int,
        protocol: str,
        path: str,
        timeout: Optional[float],
        tls: Optional[Dict[str, Any]] = None,
        headers: Sequence[Tuple[str, str]] = ...,
        max_reply_size: Optional[int] = None,
    ) -> "NativeClient": ...
    def calls(
        self,
        calls: Sequence[Union[Tuple[str, Any, Optional[int]], Tuple[bytes, List[Any]], Dict[str, Any]]],
        encode: Callable[[Any], Any],
        timeout: Optional[float],
        headers: Sequence[Tuple[str, str]] = ...,
    ) -> List[Tuple[Optional[int], Any, bool, Optional[int]]]:
        """Send ``(method, params, id)`` calls, ``(text, attachments)`` binary messages
        (as ``send_binary``) and request objects (serialized whole) back to back, reading
        while writing; each ``(method, params, id)`` call carries ``timeout`` as its
        deadline member ``"timeout"``, and over HTTP each request ``headers`` (as ``send``
        takes them). Each reply is ``(status, body, close, json_length)``, the body parsed
        when it is JSON, a ``BinaryBody`` whose JSON text is ``json_length`` long for a
        binary message (None for any other), else ``bytes``."""
    def send(
        self,
        requests: Sequence[Any],
        replies: int,
        encode: Callable[[Any], Any],
        timeout: Optional[float],
        headers: Sequence[Tuple[str, str]] = ...,
        progress: Optional[Callable[[int, int], Any]] = None,
    ) -> List[Tuple[Optional[int], Any, bool, Optional[int]]]:
        """Send request objects and read ``replies`` replies (as ``calls`` gives them); over
        HTTP each request carries ``headers`` too, besides the client's (ValueError for a
        bad name or value, or for headers over raw TCP or WebSocket, with nothing sent);
        ``progress(sent, total)`` is told of the requests' bytes written at each MiB and at
        the end, and what it raises ends the exchange, the connection closed."""
    def send_binary(
        self,
        text: bytes,
        attachments: List[Any],
        replies: int,
        timeout: Optional[float],
        headers: Sequence[Tuple[str, str]] = ...,
        progress: Optional[Callable[[int, int], Any]] = None,
    ) -> List[Tuple[Optional[int], Any, bool, Optional[int]]]:
        """Send a binary message (docs/wire.md): ``text``, whose placeholders name the
        ``attachments`` laid out in order each at the next multiple of 64, written from
        their own memory; read ``replies`` replies (as ``calls`` gives them); ``headers``
        and ``progress`` as ``send`` takes them."""
    def websocket_binary(self) -> bool:
        """Whether binary messages go on this WebSocket (the server selected the
        subprotocol at the upgrade; the connection is opened to learn it); False for HTTP
        and raw TCP."""
    def close(self) -> None: ...
    def tls_info(self) -> Optional[Tuple[Optional[str], bool, Optional[bytes]]]:
        """What the open TLS connection agreed on: ``(alpn, resumed, server certificate
        DER)``; None without TLS or a connection."""

@final
class NativeMux:
    """One connection with many calls in flight and an I/O thread of its own."""

    def __new__(
        cls,
        host: str,
        port: int,
        protocol: str,
        path: str,
        timeout: Optional[float],
        notify_fd: int,
        tls: Optional[Dict[str, Any]] = None,
        headers: Sequence[Tuple[str, str]] = ...,
        max_reply_size: Optional[int] = None,
    ) -> "NativeMux": ...
    def call(
        self,
        method: str,
        params: Any,
        id: Optional[int],
        encode: Callable[[Any], Any],
        timeout: Optional[float] = None,
        unsent_at_most: Optional[int] = None,
    ) -> Optional[int]:
        """Submit a call (with ``timeout``, its deadline member); its ticket. With
        ``unsent_at_most``, None (nothing encoded) while more bytes wait to be written."""
    def send_binary(
        self,
        text: bytes,
        attachments: List[Any],
        expects_reply: bool,
        unsent_at_most: Optional[int] = None,
        plain: Any = None,
        encode: Optional[Callable[[Any], Any]] = None,
        headers: Sequence[Tuple[str, str]] = ...,
    ) -> Optional[int]:
        """Submit a binary message: ``text`` and the buffers its placeholders name, each
        at the next multiple of 64 in the section; its ticket (None while more than
        ``unsent_at_most`` bytes wait to be written). ``plain``, the same request object
        (serialized with ``encode``), goes instead on a WebSocket whose server did not
        select the subprotocol; without it such a message fails with ProtocolError. Over
        HTTP ``headers`` go in this request's head only, besides the client's (ValueError
        for a bad name or value, or for headers over raw TCP or WebSocket, nothing sent)."""
    def websocket_binary(self) -> Optional[bool]:
        """Whether the last WebSocket opened carries binary messages; None before one
        opened, and for HTTP and raw TCP."""
    def send(
        self, request: Any, expects_reply: bool, encode: Callable[[Any], Any], headers: Sequence[Tuple[str, str]] = ...
    ) -> int:
        """Submit a request object (or batch), serialized whole; its ticket. Over HTTP
        ``headers`` go in this request's head only (as ``send_binary`` takes them)."""
    def take(self) -> List[Tuple[int, Optional[int], Any, bool, Optional[BaseException], Optional[int]]]:
        """Every completion so far: ``(ticket, status, body, close, error, json_length)``;
        the body parsed when it is JSON, a ``BinaryBody`` for a binary message whose JSON
        text is ``json_length`` long, else ``bytes``; None with an ``error``."""
    def reset(self, message: str, timeout: bool) -> None: ...
    def in_flight(self) -> int: ...
    def close(self) -> None: ...
