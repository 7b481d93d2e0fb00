# SPDX-License-Identifier: Apache-2.0
"""JSON-RPC clients: ``Client`` (blocking sockets) and ``AsyncClient`` (asyncio).

    from ucall.client import Client

    client = Client(port=8545)
    client.sum(a=1, b=2).json        # 3  (by name)
    client.sum(1, 2).json            # 3  (by position)
    with client.batch() as batch:    # one round trip
        first, second = batch.sum(1, 2), batch.sum(3, 4)
    first.json, second.json          # 3, 7

    Client("https://127.0.0.1:8545", cacert="ca.pem")   # HTTPS, the certificate checked
    Client("ws://127.0.0.1:8545")                       # WebSocket; wss:// over TLS
    Client("tcp://127.0.0.1:8545")                      # raw TCP; tls:// over TLS

One connection per client, kept alive and re-opened when the server closed it. A client
is not thread-safe: use one per thread (or ``AsyncClient`` with many calls in flight).
Rich arguments (bytes, numpy arrays, PIL images) are packed the way the server unpacks
them; ``Response.bytes``, ``.numpy`` and ``.image`` unpack rich results.

TLS verifies the server's certificate and name by default, against the system's CAs or
``cacert``; ``insecure=True`` skips the check. A failed check raises ``ConnectError``
whose ``__cause__`` is an ``ssl.SSLCertVerificationError`` saying why. ``tls_cert=`` and
``tls_key=`` present a client certificate to a server that requires one; a server that
refuses it (or its absence) makes the call raise ``ConnectError`` saying so. Calls run on
the native transport (rustls for TLS); a client given an ``ssl_context=`` uses Python's
``ssl`` with it instead.
"""

from __future__ import annotations

import asyncio
import builtins
import contextvars
import dataclasses
import functools
import itertools
import json
import os
import select
import socket
import ssl
import urllib.parse
from collections import deque
from typing import Any, Awaitable, Callable, Coroutine, Iterable, Mapping, TypeVar, Union, overload

from ucall import _attachments, _codec, _streamed
from ucall._ucall import DEADLINE_EXCEEDED, UNSENT_AT_MOST, NativeClient, NativeMux, ReplyBody, b64decode, loads
from ucall._tracing import current_meta, trace_header_lines
from ucall._wire import (
    Reply,
    ReplyReader,
    WebSocketReader,
    dumps,
    header_lines,
    host_port,
    http_head,
    http_request,
)
from ucall.exceptions import ConnectError, HTTPError, ProtocolError, RPCError, TimeoutError, TransportError

__all__ = ["AsyncClient", "AsyncStream", "Batch", "Client", "ClientTLS", "Response", "Stream"]

#: The largest reply a client takes unless told otherwise (``max_reply_size=``): 64 MiB,
#: the largest request a UCall server takes by default, as the Rust and C clients.
MAX_REPLY_SIZE = 64 << 20

Progress = Callable[[int, int], None]
Framer = Union[ReplyReader, WebSocketReader]
StrPath = Union[str, "os.PathLike[str]"]

# The URI schemes every UCall client takes (as @ucall/client does): scheme -> (tls, transport).
SCHEMES = {
    "http": (False, "http"),
    "https": (True, "http"),
    "ws": (False, "ws"),
    "wss": (True, "ws"),
    "tcp": (False, "tcp"),
    "tls": (True, "tcp"),
}


class Response:
    """One JSON-RPC reply. ``data`` is the whole reply object."""

    def __init__(self, data: Any) -> None:
        self.data = data

    @property
    def ok(self) -> bool:
        return isinstance(self.data, dict) and "error" not in self.data

    @property
    def id(self) -> Any:
        return self.data.get("id") if isinstance(self.data, dict) else None

    @property
    def error(self) -> RPCError | None:
        """The error as an exception object (not raised), or None."""
        if not isinstance(self.data, dict):
            return RPCError(-32603, f"not a JSON-RPC reply: {self.data!r}")
        error = self.data.get("error")
        if error is None:
            return None
        code = error.get("code", -32603) if isinstance(error, dict) else None
        if not isinstance(code, int) or isinstance(code, bool):
            return RPCError(-32603, f"a malformed error: {error!r}")
        return RPCError(code, error.get("message", ""), error.get("data"))

    def raise_for_status(self) -> None:
        """Raise ``ucall.RPCError`` when the reply is an error."""
        error = self.error
        if error is not None:
            raise error

    @property
    def json(self) -> Any:
        """The result; raises ``ucall.RPCError`` for an error reply."""
        data = self.data
        if type(data) is not dict or "error" in data:
            self.raise_for_status()
        return data.get("result")

    @property
    def bytes(self) -> bytes:
        """The result decoded from base64 (``ProtocolError`` when it is not base64)."""
        return bytes(self._decoded(bytearray=False))  # bytes(a bytes object) is itself

    def _decoded(self, bytearray: bool) -> builtins.bytes | builtins.bytearray:
        # The core's base64 rule, as for the servers' bytes params; SIMD, into the new object.
        result = self.json
        if isinstance(result, builtins.bytes):  # an attachment of a binary reply
            return builtins.bytearray(result) if bytearray else result
        if _codec.is_ndarray(result):
            return builtins.bytearray(result.tobytes()) if bytearray else result.tobytes()
        if not isinstance(result, str):
            raise ProtocolError(f"the result is {_shown(result)}, not bytes (a base64 string)")
        try:
            return b64decode(result, bytearray)
        except ValueError:
            raise ProtocolError(f"the result is {_shown(result)}, not bytes (a base64 string)") from None

    @property
    def numpy(self) -> Any:
        """The result as a numpy array: an attachment's array as it is (a view of the reply's
        bytes), else ``.npy`` in base64, loaded with pickling disabled."""
        if _codec.is_ndarray(self.json):
            return self.json
        data = self._decoded(bytearray=True)  # writable: the array is a view of it, not a copy
        try:
            return _codec.unpack_ndarray(data)
        except ValueError as error:
            raise ProtocolError(f"the result is not a numpy array: {error}") from None

    @property
    def image(self) -> Any:
        """The result as a ``PIL.Image.Image``."""
        from PIL import UnidentifiedImageError

        data = self.bytes
        try:
            return _codec.unpack_image(data)
        except (UnidentifiedImageError, OSError, ValueError):
            raise ProtocolError("the result is not an image in a format Pillow reads") from None

    def __repr__(self) -> str:
        return f"Response({self.data!r})"


class _LargeResponse(Response):
    """A large result as the native transport keeps it (``ReplyBody``): ``.bytes`` and
    ``.numpy`` decode its base64 straight from the reply's buffer, with no 2 MB ``str`` in
    between; ``data`` is built on first use."""

    def __init__(self, body: ReplyBody) -> None:
        self._body = body

    @property
    def data(self) -> Any:
        data = self.__dict__.get("_data", _UNREAD)
        if data is _UNREAD:
            data = self._data = self._body.value()
        return data

    @data.setter
    def data(self, value: Any) -> None:
        self._data = value

    # Made only for a result to its call (``ReplyBody.answers``): no error to read for.
    @property
    def ok(self) -> bool:
        return True

    @property
    def error(self) -> RPCError | None:
        return None

    def _decoded(self, bytearray: bool) -> builtins.bytes | builtins.bytearray:
        decoded = self._body.result_base64(bytearray)
        return decoded if decoded is not None else super()._decoded(bytearray)


_UNREAD = object()


def _native_response(status: int | None, body: Any, call_id: Any) -> Response | None:
    """A result to call ``call_id`` as a ``Response`` without further checks; None when
    the reply needs them (an error, another id, an HTTP error status, not JSON)."""
    if (status or 0) >= 400:
        return None
    if type(body) is dict:
        return Response(body) if "error" not in body and body.get("id") == call_id else None
    if type(body) is ReplyBody and body.answers(call_id):
        return _LargeResponse(body)
    return None


def _shown(value: Any) -> str:
    """A value for an error message: its JSON, cut to a readable length."""
    text = json.dumps(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _params(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    if args and kwargs:
        raise TypeError("pass params either by position or by name, not both")
    if kwargs:
        return {k: _codec.pack(v) for k, v in kwargs.items()}
    if args:
        return [_codec.pack(v) for v in args]
    return None


#: ``(code, message)`` of the error a server answers a call with at its deadline (the core's).
_DEADLINE = (HTTPError(*DEADLINE_EXCEEDED).code, DEADLINE_EXCEEDED[1])


def _request(method: str, params: Any, request_id: int | None, timeout: float | None = None) -> dict[str, Any]:
    """A call's request object; with ``timeout``, its deadline in seconds as the optional
    ``"timeout"`` member, so that the server stops waiting for the call when the client does."""
    request: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
    if params is not None:
        request["params"] = params
    if request_id is not None:
        request["id"] = request_id
    if timeout is not None:
        request["timeout"] = timeout
    meta = current_meta()
    if meta is not None:
        request["_meta"] = meta
    return request


def _complete(request: dict[str, Any], next_id: Callable[[], int]) -> dict[str, Any]:
    """An explicit request with ``jsonrpc`` and ``id`` filled in and rich params packed."""
    request = dict(request)
    request.setdefault("jsonrpc", "2.0")
    if "_meta" not in request:
        meta = current_meta()
        if meta is not None:
            request["_meta"] = meta
    if "id" not in request:
        request["id"] = next_id()
    if request.get("params") is not None:
        request["params"] = _codec.pack(request["params"])
    return request


def _native_params(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """Params for the native writer, which packs rich values itself (see ``_codec.encode``)."""
    if args and kwargs:
        raise TypeError("pass params either by position or by name, not both")
    return kwargs or args or None


def _loads_or_none(text: bytes) -> Any:
    try:
        return loads(text)
    except ValueError:
        return None


def _is_item(data: Any) -> bool:
    """Whether ``data`` is an item of a streamed reply (docs/streaming.md)."""
    return isinstance(data, dict) and data.get("method") == _streamed.ITEM_METHOD and "id" not in data


#: What the error of a call to a procedure that streams its result says.
STREAMS_ITS_RESULT = "streams its result"


def _streams_error(method: Any) -> ProtocolError:
    """What a call of a procedure that streams its result raises: its items came in
    place of one reply."""
    name = f"{method!r} " if isinstance(method, str) else ""
    return ProtocolError(
        f"the procedure {name}{STREAMS_ITS_RESULT} (items came in place of one reply): read them with"
        " client.stream(method, ...) (docs/streaming.md)"
    )


def _decode(reply: Reply) -> Any:
    if reply.json_length is not None:  # a binary message: placeholders resolved
        return _decode_body(reply.status, _attachments.decode(reply.body, reply.json_length))
    return _decode_body(reply.status, reply.body)


class _BinaryRequest:
    """A request (or batch) whose params hold binary values, sent as a binary message
    (docs/wire.md): the requests with placeholders, their attachments (one section for a
    batch) where they lie. ``marked(method)`` names the params that may be attachments
    (None: all)."""

    def __init__(self, request: Any, marked: Callable[[str], frozenset[str | int] | None]) -> None:
        self.attachments = _attachments.Attachments()
        self.raw = request

        def packed(one: Any) -> Any:
            if not isinstance(one, dict) or one.get("params") is None or not isinstance(one.get("method"), str):
                return one
            return dict(one, params=self.attachments.pack_params(one["params"], marked(one["method"])))

        #: The request object (a call's: a dict) or batch (a list), placeholders in place.
        self.request: Any = [packed(one) for one in request] if isinstance(request, list) else packed(request)
        self.text = dumps(self.request)

    def plain(self) -> Any:
        """The same request as plain JSON (base64), for a server without binary messages."""

        def plain(one: Any) -> Any:
            if not isinstance(one, dict) or one.get("params") is None:
                return one
            return dict(one, params=_codec.pack(one["params"]))

        return [plain(one) for one in self.raw] if isinstance(self.raw, list) else plain(self.raw)

    def parts(self, leading: bytes) -> list[Any]:
        """``leading`` (a head or prefix), then the body in pieces."""
        return [leading, *self.attachments.body(self.text)]

    @property
    def length(self) -> int:
        return self.attachments.body_length(self.text)


def _write_now(writer: asyncio.StreamWriter, parts: list[Any]) -> list[Any]:
    """What is left of ``parts`` after writing what the socket takes at once, from where
    the parts lie (``writev``), when nothing waits to be written before them on a plain
    connection: the transport then copies only the rest into its buffer (asyncio's
    ``writelines`` would join them all first)."""
    transport = writer.transport
    sock = transport.get_extra_info("socket")
    if sock is None or transport.get_extra_info("sslcontext") is not None or transport.get_write_buffer_size():
        return parts
    views = [memoryview(part).cast("B") for part in parts if len(part)]
    try:
        sent = os.writev(sock.fileno(), views[:512])
    except OSError:  # full, or failed: the transport writes (and reports) as it would
        return parts
    first = 0
    while first < len(views) and sent >= views[first].nbytes:
        sent -= views[first].nbytes
        first += 1
    if first < len(views):
        views[first] = views[first][sent:]
    return views[first:]


def _send_parts(sock: socket.socket, parts: list[Any]) -> None:
    """Write ``parts`` in order with ``sendmsg``: arrays from their own memory, no join."""
    views = [memoryview(part).cast("B") for part in parts if len(part)]
    first = 0
    while first < len(views):
        sent = sock.sendmsg(views[first : first + 512])
        while sent:
            size = views[first].nbytes
            if sent < size:
                views[first] = views[first][sent:]
                break
            sent -= size
            first += 1


def _decode_body(status: int | None, body: Any) -> Any:
    """The reply's JSON value; ``body`` is its bytes, or that value already (the native
    transport parses what is JSON as it takes the reply: JSON is never ``bytes``)."""
    if status == 204:
        return None
    if type(body) is ReplyBody:
        data = body.value()
    elif not isinstance(body, (bytes, bytearray, memoryview)):
        data = body
    else:
        try:
            data = loads(body if isinstance(body, bytes) else bytes(body))
        except ValueError:
            if _is_item(_loads_or_none(bytes(body).split(b"\n", 1)[0])):  # a streamed reply's JSON lines
                raise _streams_error(None) from None
            text = bytes(body[:200]).decode("utf-8", "replace")
            shown = f"HTTP {status}: " if status is not None else ""
            raise ProtocolError(f"{shown}the reply is not JSON: {text!r}") from None
    if status is not None and status >= 400 and isinstance(data, dict) and "jsonrpc" not in data:
        # The server refused the HTTP request itself (a body or head too large, a method
        # it does not serve): the body is the bare error object, about no call in it.
        if "code" in data and "message" in data:
            return {"jsonrpc": "2.0", "id": None, "error": data}
    return data


def tls_context(
    cacert: StrPath | None = None,
    insecure: bool = False,
    http: bool = True,
    tls_cert: StrPath | None = None,
    tls_key: StrPath | None = None,
) -> ssl.SSLContext:
    """The client side of TLS as the clients make it: the server's certificate and name
    checked against the system's CAs, or only those in the PEM file ``cacert``;
    ``insecure=True`` accepts any certificate. ``tls_cert`` (with ``tls_key`` unless the
    key is in the same file) is the client's own certificate chain, for servers that ask
    for one. ALPN offers ``http/1.1`` for HTTP and WebSocket."""
    if cacert is not None and insecure:
        raise ValueError("a CA file (cacert) and insecure contradict each other: pick one")
    try:
        context = ssl.create_default_context(cafile=os.fspath(cacert) if cacert is not None else None)
    except ssl.SSLError:
        raise ValueError(f"CA file {os.fspath(cacert or '')}: no PEM certificate in it") from None
    except OSError as error:  # kept as it is (FileNotFoundError...), with the file named
        raise type(error)(error.errno, f"CA file {os.fspath(cacert or '')}: {error.strerror}") from None
    if insecure:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    if http:
        context.set_alpn_protocols(["http/1.1"])
    if tls_cert is not None:
        _load_chain(context, os.fspath(tls_cert), os.fspath(tls_key) if tls_key is not None else None)
    elif tls_key is not None:
        raise ValueError("tls_key= needs the certificate it belongs to: tls_cert=")
    return context


def _load_chain(context: ssl.SSLContext, cert: str, key: str | None) -> None:
    """``load_cert_chain``, with each failure naming the user's file: OpenSSL's own errors
    name neither file, and an encrypted key would prompt for its password on the terminal."""

    def encrypted() -> str:
        raise ValueError(f"client key file {key or cert} is encrypted: load it into an ssl_context= with its password")

    try:
        context.load_cert_chain(cert, key, password=encrypted)
    except ssl.SSLError as error:
        if error.reason == "KEY_VALUES_MISMATCH":
            raise ValueError(f"client key file {key or cert} does not match the certificate in {cert}") from None
        try:  # which file is not PEM: a scratch context reads the certificates alone
            ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT).load_verify_locations(cert)
        except ssl.SSLError:
            raise ValueError(f"client certificate file {cert}: no PEM certificate in it") from None
        where = f"client key file {key}" if key is not None else f"client certificate file {cert} (and no tls_key=)"
        raise ValueError(f"{where}: no PEM private key in it") from None
    except OSError:  # which file: the first that does not open
        for what, path in (("client certificate", cert), ("client key", key)):
            if path is None:
                continue
            try:
                open(path, "rb").close()
            except OSError as failure:
                raise type(failure)(failure.errno, f"{what} file {path}: {failure.strerror}") from None
        raise


# The alerts a server sends about the client's certificate, the only one a client sends.
_CLIENT_CERTIFICATE_ALERTS = {
    "TLSV13_ALERT_CERTIFICATE_REQUIRED",
    "SSLV3_ALERT_BAD_CERTIFICATE",
    "SSLV3_ALERT_UNSUPPORTED_CERTIFICATE",
    "SSLV3_ALERT_CERTIFICATE_REVOKED",
    "SSLV3_ALERT_CERTIFICATE_EXPIRED",
    "SSLV3_ALERT_CERTIFICATE_UNKNOWN",
    "TLSV1_ALERT_UNKNOWN_CA",
    "TLSV1_ALERT_ACCESS_DENIED",
}


@dataclasses.dataclass(frozen=True)
class _Options:
    """The constructor arguments both client classes take, by the names they take them."""

    uri: str
    port: int
    use_http: bool
    timeout: float | None
    path: str
    tls: bool | None
    cacert: StrPath | None
    insecure: bool
    ssl_context: ssl.SSLContext | None
    server_hostname: str | None
    tls_cert: StrPath | None
    tls_key: StrPath | None
    headers: Mapping[str, str] | None
    binary: bool | None
    max_reply_size: int | None

    @classmethod
    def of(cls, arguments: Mapping[str, Any]) -> _Options:
        """The options among a constructor's ``locals()``."""
        return cls(**{field.name: arguments[field.name] for field in dataclasses.fields(cls)})


class _Endpoint:
    """What both clients share: the address, the transport, framing and ids."""

    def __init__(self, options: _Options) -> None:
        uri, port, use_http, path, tls = options.uri, options.port, options.use_http, options.path, options.tls
        cacert, insecure, ssl_context = options.cacert, options.insecure, options.ssl_context
        tls_cert, tls_key, headers, timeout = options.tls_cert, options.tls_key, options.headers, options.timeout
        server_hostname = options.server_hostname
        if options.binary not in (None, True, False):
            raise TypeError(f"binary= is True, False or None (as the server takes), not {options.binary!r}")
        #: Whether binary values travel as attachments (docs/wire.md): None where the
        #: server's description marks them (asked once, with ``rpc.discover``), True
        #: always, False never.
        self.binary = options.binary
        self._marked: dict[str, frozenset[str | int]] | None = None  # by method, once asked
        max_reply_size = options.max_reply_size
        if max_reply_size is not None and (
            isinstance(max_reply_size, bool) or not isinstance(max_reply_size, int) or max_reply_size < 1
        ):
            raise ValueError(f"max_reply_size is a number of bytes from 1 (None: any size), got {max_reply_size!r}")
        #: The largest reply taken, in bytes; a larger one raises ``ProtocolError``.
        self.max_reply_size = max_reply_size
        websocket = False
        tls_options = any(o is not None for o in (cacert, ssl_context, tls_cert, tls_key)) or insecure
        if "://" in uri:
            parts = urllib.parse.urlsplit(uri)
            scheme = parts.scheme.lower()
            if scheme not in SCHEMES:
                raise ValueError(f"{uri!r}: the scheme must be one of {', '.join(SCHEMES)}")
            secure, transport = SCHEMES[scheme]
            if not use_http and transport != "tcp":
                raise ValueError(f"{uri!r} names its protocol: use_http=False (raw TCP) does not go with it")
            if not parts.hostname:
                raise ValueError(f"{uri!r} names no host")
            if transport == "tcp" and parts.path not in ("", "/"):
                raise ValueError(f"{uri!r}: raw TCP has no path")
            websocket = transport == "ws"
            use_http = transport == "http"
            if tls is not None and tls != secure:
                raise ValueError(f"tls={tls} contradicts {scheme}://")
            if tls_options and not secure:
                raise ValueError(f"{scheme}:// is plaintext: TLS options need https://, wss:// or tls://")
            tls = secure
            uri = parts.hostname
            port = parts.port if parts.port is not None else port
            path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        elif tls is False and tls_options:
            raise ValueError("cacert=, insecure=True, ssl_context= and tls_cert= need TLS, and tls=False turns it off")
        self.uri = uri
        self.port = port
        self.use_http = use_http and not websocket
        self.websocket = websocket
        #: Sent with every HTTP request and with the WebSocket upgrade request.
        self.headers = dict(headers or {})
        self._header_lines = header_lines(self.headers)
        if self.headers and not (self.use_http or websocket):
            raise ValueError(
                "raw TCP carries no headers: call a server behind ucall.auth over HTTP or WebSocket"
                " (or its methods named in public=)"
            )
        self.tls = bool(tls) or tls_options
        self.timeout = timeout
        self.path = path
        if ssl_context is not None and (cacert is not None or insecure or tls_cert is not None or tls_key is not None):
            raise ValueError("ssl_context= is used as given: drop cacert=, insecure=, tls_cert= and tls_key=")
        given_context = ssl_context is not None
        if self.tls and ssl_context is None:
            # Made even for the native transport: it checks the files (naming them in its
            # errors), and streams and uploads with progress reports run on Python's ssl.
            ssl_context = tls_context(cacert, insecure, use_http, tls_cert, tls_key)
        self.ssl_context = ssl_context if self.tls else None
        self.server_hostname = server_hostname or uri
        self._ids = itertools.count(1)
        # Calls run on the native transport (ucall-client): requests written and replies
        # framed in Rust, TLS by rustls, the GIL released while waiting. An ssl_context=
        # is a Python object, so a client given one stays on Python's ssl.
        native = not given_context
        self._native_protocol = ("ws" if self.websocket else "http" if self.use_http else "tcp") if native else None
        self._native_tls: dict[str, Any] | None = None
        if self.tls and native:
            self._native_tls = {
                "cacert": os.fspath(cacert) if cacert is not None else None,
                "insecure": insecure,
                "tls_cert": os.fspath(tls_cert) if tls_cert is not None else None,
                "tls_key": os.fspath(tls_key) if tls_key is not None else None,
                "server_hostname": server_hostname,
                "resumption": True,
            }

    @property
    def url(self) -> str:
        """Where the client goes, as a URL (``tcp://`` and ``tls://`` for raw TCP)."""
        if self.websocket:
            scheme = "wss" if self.tls else "ws"
        elif self.use_http:
            scheme = "https" if self.tls else "http"
        else:
            scheme = "tls" if self.tls else "tcp"
        path = self.path if self.use_http or self.websocket else ""
        return f"{scheme}://{host_port(self.uri, self.port)}{path}"

    @property
    def _where(self) -> str:
        return host_port(self.uri, self.port)

    def _in_time(self, response: Response) -> Response:
        """``response``, unless the server gave up on the call at its deadline: a client
        with a ``timeout`` (which it sent as the call's deadline) raises ``TimeoutError``
        then, as when no reply comes in time; the connection stays usable."""
        error = response.error if self.timeout is not None else None
        if error is not None and (error.code, error.message) == _DEADLINE:
            raise TimeoutError(f"no result from {self._where} within {self.timeout} s: the server's {_DEADLINE[1]!r}")
        return response

    def _requests(self, calls: Iterable[tuple[str, Any]]) -> list[dict[str, Any]]:
        """A request per ``(method, params)``, each with an id of its own."""
        return [_request(m, _codec.pack(p) if p is not None else None, self.next_id(), self.timeout) for m, p in calls]

    def next_id(self) -> int:
        return next(self._ids)

    def _request_headers(self, headers: Mapping[str, str] | None = None) -> list[tuple[str, str]]:
        """A request's own header fields over HTTP, besides the client's: a call's
        ``headers``, then the current span's context (``traceparent``, ``tracestate``)
        unless a ``traceparent`` is among the others, as ``trace_header_lines`` adds it."""
        own = list((headers or {}).items())
        meta = current_meta() if self.use_http else None
        if meta is not None and not any(name.lower() == "traceparent" for name, _ in [*self.headers.items(), *own]):
            own += meta.items()
        return own

    def frame(self, body: bytes, headers: str = "") -> bytes:
        """A request's bytes over HTTP or raw TCP (WebSocket messages need the connection);
        ``headers``: a call's own header lines, after the client's."""
        if self.use_http:
            lines = trace_header_lines(self._header_lines + headers)
            return http_request(body, self.uri, self.port, self.path, lines)
        return body + b"\n"

    def _encode(self, framer: Framer, bodies: Iterable[bytes | _BinaryRequest], headers: str = "") -> list[Any]:
        """Each body (a JSON text, or a call with attachments) as this connection frames it,
        in pieces to write in order."""
        parts: list[Any] = []
        for body in bodies:
            if isinstance(body, _BinaryRequest):
                parts += self._binary_parts(framer, body, headers)
            elif isinstance(framer, WebSocketReader):
                parts.append(framer.encode(body))
            else:
                parts.append(self.frame(body, headers))
        return parts

    def _binary_parts(
        self, framer: Framer | None, call: _BinaryRequest, headers: str, accept: str | None = None
    ) -> list[Any]:
        """A binary message in pieces to write in order (on a WebSocket whose server did not
        select the subprotocol, its plain JSON form); ``accept``: over HTTP, what the
        request accepts, when not binary replies (``http_head``)."""
        json_length, length = len(call.text), call.length
        if isinstance(framer, WebSocketReader):
            if framer.binary:
                return [framer.encode_binary(b"".join(call.parts(_attachments.prefix(json_length, length))))]
            if self.binary:
                raise self._no_binary_websocket()
            return [framer.encode(dumps(call.plain()))]
        if self.use_http:
            lines = trace_header_lines(self._header_lines + headers)
            return call.parts(http_head(length, self.uri, self.port, self.path, lines, json_length, accept))
        return call.parts(_attachments.prefix(json_length, length))

    def _stream_parts(self, body: bytes | _BinaryRequest, ws: WebSocketReader | None) -> list[Any]:
        """A streamed call's request (its JSON text, or a binary message) in pieces to write
        in order on its connection; ``ws``: the connection's reader, on a WebSocket."""
        if isinstance(body, _BinaryRequest):
            # Items and the final reply may come back as binary messages (over HTTP, a
            # binary stream), as a binary call's reply may.
            return self._binary_parts(ws, body, "", _streamed.BINARY_ACCEPT)
        if ws is not None:
            return [ws.encode(body)]
        kind = _stream_kind(self)
        return [_streamed.request_bytes(kind, body, self.uri, self.port, self.path, self._header_lines)]

    def _stream_request(self, method: str, params: Any) -> tuple[int, bytes | _BinaryRequest]:
        """A streamed call's id and request: a binary message when values of its params go
        as attachments (the server's description asked for by then, ``_must_ask``) and
        always with ``binary=True`` (so that its items may come back as attachments), else
        its JSON text (base64 for binary values)."""
        bare = self.binary is True
        call = self._binary_request(method, params, bare, streamed=True) if bare or self._may_attach(params) else None
        if call is not None:
            return call.request["id"], call
        request_id = self.next_id()
        return request_id, _streamed.request(method, _codec.pack(params) if params is not None else None, request_id)

    def _may_attach(self, params: Any) -> bool:
        """Whether a call with ``params`` may go as a binary message: it holds a binary value."""
        return self.binary is not False and _attachments.is_binary(params)

    def _must_ask(self) -> bool:
        """Whether the server's description must be asked for before a binary message."""
        return self.binary is None and self._marked is None

    def _learn(self, document: Any) -> None:
        """Which params of which methods take attachments, from the server's OpenRPC
        document (``rpc.discover``; a server without it describes none)."""
        self._marked = _attachments.marked_params(document)

    def _marked_params(self, method: str) -> frozenset[str | int] | None:
        """The params of ``method`` that may go as attachments: all (None) with
        ``binary=True``, else those the server's description marks."""
        return None if self.binary else (self._marked or {}).get(method, frozenset())

    def _binary_request(
        self, method: str, params: Any, bare: bool = False, streamed: bool = False
    ) -> _BinaryRequest | None:
        """The call as a binary message, or None when no value of it goes as an attachment
        (with ``binary=None``, only the params the server's description marks do);
        ``bare``: even without one, as a call accepts a binary reply (``_asks_binary_replies``);
        ``streamed``: a streamed call's, without a ``timeout`` (it lasts while items come)."""
        marked = self._marked_params(method)
        if marked is not None and not marked and not bare:
            return None
        timeout = None if streamed else self.timeout
        call = _BinaryRequest(_request(method, params, self.next_id(), timeout), self._marked_params)
        return call if call.attachments.buffers or bare else None

    def _asks_binary_replies(self) -> bool:
        """With ``binary=True``, every call on the native transport (HTTP, raw TCP) is a
        binary message, so that a result array or bytes come back as an attachment: over
        raw TCP a JSON text is always answered with JSON (docs/wire.md §3.2)."""
        return self.binary is True and self._native_protocol in ("http", "tcp")

    def _no_binary_websocket(self) -> ProtocolError:
        """What ``binary=True`` raises on a WebSocket whose server did not select the subprotocol."""
        return ProtocolError(
            f"{self._where} does not take binary messages (it did not select the WebSocket"
            f" subprotocol {_attachments.SUBPROTOCOL}): binary=None sends them as JSON"
        )

    def _binary_message(self, request: Any) -> _BinaryRequest | None:
        """A request object or batch (ids given, params unpacked) as one binary message;
        None when none of its values goes as an attachment."""
        methods = [one.get("method") for one in (request if isinstance(request, list) else [request])]
        if not any(self._marked_params(m) is None or self._marked_params(m) for m in methods if isinstance(m, str)):
            return None  # (before packing: plain JSON goes on the native writer)
        message = _BinaryRequest(request, self._marked_params)
        return message if message.attachments.buffers else None

    def _call_headers(self, headers: Mapping[str, str]) -> str:
        """A call's own headers as lines; only HTTP sends headers with each call."""
        if not self.use_http:
            raise ValueError(
                "only HTTP sends headers with each call: a WebSocket sends them once, with its"
                " upgrade (give them to the client: headers=)"
            )
        return header_lines(headers)

    def _framer(self) -> Framer:
        if self.websocket:
            return WebSocketReader(
                self.uri, self.port, self.path, self.tls, self.headers, self.binary is not False, self.max_reply_size
            )
        return ReplyReader(self.use_http, self.max_reply_size)

    def _tls_failure(self, error: Exception) -> ConnectError:
        if isinstance(error, ssl.SSLCertVerificationError):
            why = error.verify_message or error.reason or str(error)
            return ConnectError(f"cannot verify the TLS certificate of {self._where}: {why}")
        return self._refusal(error) or ConnectError(f"TLS handshake with {self._where} failed: {error}")

    def _refusal(self, error: BaseException) -> ConnectError | None:
        """The server's TLS alert about the client's certificate, as a ``ConnectError``;
        None for any other error. TLS 1.3 sends it after the handshake, so it may come
        on the first read, in place of a reply."""
        reason = getattr(error, "reason", None)
        if not isinstance(error, ssl.SSLError) or reason not in _CLIENT_CERTIFICATE_ALERTS:
            return None
        alert = reason.split("ALERT_", 1)[1].replace("_", " ").lower()
        return ConnectError(f"{self._where} requires a client certificate it trusts (tls_cert=, tls_key=): {alert}")

    def expects_reply(self, request: Any) -> bool:
        """Over HTTP every request gets a reply (204 for notifications); over TCP and
        WebSocket only calls do."""
        if self.use_http:
            return True
        if isinstance(request, list):
            return any(isinstance(r, dict) and "id" in r for r in request) or not request
        return not (isinstance(request, dict) and "id" not in request and "method" in request)


_Owner = TypeVar("_Owner", bound="_OwnsSocket")


class _OwnsSocket:
    """What a blocking client object that owns a socket (in the attribute named by
    ``_SOCKET``) does at its end: ``with`` calls ``close()``, and the garbage collector
    closes the socket when ``close()`` never ran."""

    _SOCKET = "sock"

    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self: _Owner) -> _Owner:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        sock = self.__dict__.get(self._SOCKET)
        if sock is not None:
            sock.close()


class Client(_Endpoint, _OwnsSocket):
    """A blocking JSON-RPC client over HTTP/1.1 (default), raw TCP (``use_http=False``) or
    WebSocket (a ``ws://`` or ``wss://`` URI), each in plaintext or over TLS.

    ``uri`` is a host, or a URL (``http``, ``https``, ``ws``, ``wss``, and ``tcp``, ``tls``
    for raw TCP) whose port and path, when given, replace ``port`` and ``path``. TLS (``tls=True``, or an ``https``/``wss``
    URI) checks the server's certificate against the system's CAs, or only against the
    PEM file ``cacert``; ``insecure=True`` accepts any certificate; ``ssl_context`` is used
    as given. ``tls_cert`` is the client's certificate chain (PEM), with its key in
    ``tls_key`` or in the same file, for servers that require one (mutual TLS). Passing any
    of these turns TLS on. The name checked and sent as SNI is the host, or
    ``server_hostname``. Sessions are resumed on reconnection unless
    ``session_resumption=False``. A reply over ``max_reply_size`` bytes (default 64 MiB,
    ``MAX_REPLY_SIZE``; ``None``: any size) fails its call with ``ProtocolError`` naming both
    sizes, and the connection is closed.

    Bytes, numpy arrays and PIL images in params travel as attachments of a binary message
    (docs/wire.md) where the server takes them: with ``binary=None``, for the params its
    description (``rpc.discover``, asked once) marks; ``binary=True`` for every such value,
    ``binary=False`` never (base64 in the JSON text, as plain JSON clients send).
    """

    def __init__(
        self,
        uri: str = "127.0.0.1",
        port: int = 8545,
        use_http: bool = True,
        *,
        timeout: float | None = 30.0,
        path: str = "/",
        tls: bool | None = None,
        cacert: StrPath | None = None,
        insecure: bool = False,
        ssl_context: ssl.SSLContext | None = None,
        server_hostname: str | None = None,
        session_resumption: bool = True,
        tls_cert: StrPath | None = None,
        tls_key: StrPath | None = None,
        headers: Mapping[str, str] | None = None,
        binary: bool | None = None,
        max_reply_size: int | None = MAX_REPLY_SIZE,
    ) -> None:
        super().__init__(_Options.of(locals()))
        self.sock: socket.socket | None = None
        self._heard = False  # whether the connection has sent any reply bytes
        self.session_resumption = session_resumption
        self.session: ssl.SSLSession | None = None  # the TLS session kept for resumption
        self._reader: Framer = ReplyReader(self.use_http, self.max_reply_size)
        self._native: NativeClient | None = None
        if self._native_protocol is not None:
            if self._native_tls is not None:
                self._native_tls["resumption"] = session_resumption
            native = self._native_protocol, self.path, timeout
            self._native = NativeClient(
                self.uri, self.port, *native, self._native_tls, list(self.headers.items()), self.max_reply_size
            )

    # ------------------------------------------------------------ calling

    def __getattr__(self, name: str) -> Callable[..., Response]:
        if name.startswith("_"):
            raise AttributeError(name)

        def call(*args: Any, **kwargs: Any) -> Response:
            return self.call(name, *args, **kwargs)

        call.__name__ = name
        return call

    def call(self, method: str, *args: Any, **kwargs: Any) -> Response:
        """Call ``method`` with positional or named params; the ``Response``."""
        params = _native_params(args, kwargs)
        if self._may_attach(params) or self._asks_binary_replies():
            binary = self._binary_request_asked(method, params, self._asks_binary_replies())
            if binary is not None:
                return self._binary_call(binary)
        # (A call inside a traced span carries its context in a request object of its own.)
        if self._native is not None and current_meta() is None:
            return self._in_time(self._native_calls([(method, _native_params(args, kwargs))])[0])
        request = _request(method, _params(args, kwargs), self.next_id(), self.timeout)
        response: Response = self._exchange(request)
        return self._in_time(response)

    def call_with_headers(self, method: str, params: Any, headers: Mapping[str, str]) -> Response:
        """Like ``call`` with params given whole (a list, a dict or None), sending ``headers``
        with this call only, besides the client's (HTTP only), on the connection of the
        other calls (binary values as attachments, as ``call`` sends them)."""
        self._call_headers(headers)  # (checked before anything is sent)
        if self._may_attach(params):
            binary = self._binary_request_asked(method, params)
            if binary is not None:
                return self._binary_call(binary, None, headers)
        request = _request(method, _codec.pack(params) if params is not None else None, self.next_id(), self.timeout)
        response: Response = self._exchange(request, None, headers)
        return self._in_time(response)

    def call_with_progress(self, method: str, params: Any, progress: Progress | None = None) -> Response:
        """Like ``call`` with params given whole; ``progress(sent, total)`` follows the upload
        (the request's bytes written, told at each MiB and at the end), on the connection
        of the other calls. What ``progress`` raises ends the call, the connection closed."""
        if self._may_attach(params):
            binary = self._binary_request_asked(method, params)
            if binary is not None:
                return self._binary_call(binary, progress)
        request = _request(method, _codec.pack(params) if params is not None else None, self.next_id(), self.timeout)
        response: Response = self._exchange(request, progress)
        return self._in_time(response)

    def stream(self, method: str, *args: Any, **kwargs: Any) -> Stream:
        """Call ``method``, which streams its result (a generator on the server): iterate
        the ``Stream`` for its items as they arrive (``for token in client.stream(...)``);
        once it is exhausted, its ``result`` is the final reply's. An error reply raises
        ``ucall.RPCError``. The call has a connection of its own; closing the stream
        (``close()``, or leaving ``with client.stream(...) as items:``) hangs up, which
        stops the generator on the server. Binary values in the params go as attachments
        of a binary message, as ``call`` sends them."""
        params = _native_params(args, kwargs)
        if self._may_attach(params):
            self._ask()
        return Stream(self, method, params)

    def notify(self, method: str, *args: Any, **kwargs: Any) -> None:
        """Send a notification: no id, no reply."""
        self._exchange(_request(method, _params(args, kwargs), None, self.timeout))

    def __call__(self, request: dict[str, Any] | list[dict[str, Any]]) -> Any:
        """Send an explicit request object, or a list of them as a batch. ``jsonrpc`` and
        ``id`` are filled in when absent (use ``notify`` for notifications); rich params are
        packed. Returns a ``Response`` (a list of them for a batch)."""
        if isinstance(request, list):
            return self._exchange([self._complete(r) for r in request])
        return self._exchange(self._complete(request))

    def _complete(self, request: dict[str, Any]) -> dict[str, Any]:
        return _complete(request, self.next_id)

    def batch(self) -> Batch:
        """Collect calls, then send them in one round trip (``send()`` or leaving a ``with``)."""
        return Batch(self)

    def pipeline(self, calls: Iterable[tuple[str, Any]]) -> list[Response]:
        """Send every ``(method, params)`` back to back and read the replies in order,
        reading while writing: any number of calls of any size completes. Calls whose
        params hold binary values go as binary messages among the others, in order."""
        calls = list(calls)
        if self._may_attach([params for _, params in calls]):
            self._ask()
        if self._native is not None:
            return self._native_calls(calls)
        bodies: list[bytes | _BinaryRequest] = []
        requests: list[dict[str, Any]] = []
        for method, params in calls:
            message = self._pipelined_message(method, params)
            if message is None:
                request = _request(method, _codec.pack(params) if params is not None else None, self.next_id(), self.timeout)
                bodies.append(dumps(request))
            else:
                request = message.request
                bodies.append(message)
            requests.append(request)
        replies = self._roundtrip(bodies, len(requests))
        return [self._check(Response(_decode(reply)), req) for reply, req in zip(replies, requests)]

    def _pipelined_message(self, method: str, params: Any) -> _BinaryRequest | None:
        """A pipelined call as a binary message, or None when it goes as a JSON text."""
        if self._may_attach(params) or self._asks_binary_replies():
            return self._binary_request(method, params, self._asks_binary_replies())
        return None

    # ------------------------------------------------------------ transport

    def _ask(self) -> None:
        """The server's description, when binary messages need it (``_learn``)."""
        if self._must_ask():
            try:
                self._learn(self.call("rpc.discover").json)
            except (RPCError, ProtocolError):
                self._learn(None)

    def _binary_request_asked(self, method: str, params: Any, bare: bool = False) -> _BinaryRequest | None:
        """``_binary_request``, the server's description asked for first when needed."""
        self._ask()
        return self._binary_request(method, params, bare)

    def _binary_message_asked(self, request: Any) -> _BinaryRequest | None:
        """``_binary_message``, the server's description asked for first when needed."""
        self._ask()
        return self._binary_message(request)

    def _binary_call(
        self, call: _BinaryRequest, progress: Progress | None = None, headers: Mapping[str, str] | None = None
    ) -> Response:
        """A call as a binary message, with ``headers`` of its own over HTTP: on the native
        connection (``_binary_send``), or on the Python transport of a client given an
        ``ssl_context`` (``sendmsg`` writes the attachments where they lie)."""
        if self._native is not None:
            reply = self._binary_send(call, 1, self._request_headers(headers), progress)[0]
        else:
            reply = self._roundtrip([call], 1, progress, header_lines(headers or {}))[0]
        return self._in_time(self._check(Response(_decode(reply)), call.request))

    def _websocket_takes_binary(self) -> bool:
        """Off WebSocket True; on one, whether its server selected the subprotocol (the
        native connection opened to learn it), else False, or with ``binary=True`` the
        ``ProtocolError`` Python's transport raises."""
        assert self._native is not None
        if not self.websocket or self._native.websocket_binary():
            return True
        if self.binary:
            raise self._no_binary_websocket()
        return False

    def _binary_send(
        self, message: _BinaryRequest, replies: int, headers: list[tuple[str, str]], progress: Progress | None = None
    ) -> list[Reply]:
        """A binary message on the native connection, in order with every other call: the
        JSON text, then each attachment written from its own memory (one vectored write);
        a binary reply read into one buffer that its arrays view. On a WebSocket without
        the subprotocol, its plain JSON form (the native writer's base64). ``headers``:
        the request's own (``_request_headers``); ``progress`` follows its upload."""
        assert self._native is not None
        if not self._websocket_takes_binary():
            sent = self._native.send([message.raw], replies, _codec.encode, self.timeout, headers, progress)
        else:
            attachments = message.attachments.sources()
            sent = self._native.send_binary(message.text, attachments, replies, self.timeout, headers, progress)
        return [Reply(*reply) for reply in sent]

    def _native_calls(self, calls: list[tuple[str, Any]]) -> list[Response]:
        """A pipeline on the native connection: JSON texts written by the native writer,
        binary messages (``_pipelined_message``) among them in order. Inside a traced span
        each request carries the context (``_meta``, and over HTTP its header fields)."""
        assert self._native is not None
        items: list[Any] = []
        ids: list[int] = []
        binary = None  # whether a WebSocket takes binary messages, asked at the first
        traced = current_meta() is not None
        for method, params in calls:
            message = self._pipelined_message(method, params)
            if message is not None and binary is None:
                binary = self._websocket_takes_binary()
            if message is not None and binary:
                items.append((message.text, message.attachments.sources()))
                ids.append(message.request["id"])
            else:
                ids.append(message.request["id"] if message is not None else self.next_id())
                # (A request object of its own in a span: the call's JSON holds the context.)
                items.append(_request(method, params, ids[-1], self.timeout) if traced else (method, params, ids[-1]))
        replies = self._native.calls(items, _codec.encode, self.timeout, self._request_headers())
        return [
            _native_response(reply[0], reply[1], call_id) or self._check(Response(_decode(Reply(*reply))), {"id": call_id})
            for reply, call_id in zip(replies, ids)
        ]

    def _exchange(self, request: Any, progress: Progress | None = None, headers: Mapping[str, str] | None = None) -> Any:
        """``request`` (an object or a batch) sent, with ``headers`` of its own over HTTP,
        and its reply read (``progress`` following the upload): on the native connection,
        or on Python's transport for a client given an ``ssl_context``."""
        expected = 1 if self.expects_reply(request) else 0
        message = self._binary_message_asked(request) if self._may_attach(request) else None
        own = self._request_headers(headers) if self._native is not None else []
        if message is not None and self._native is not None:
            replies = self._binary_send(message, expected, own, progress)
        elif message is not None:
            replies = self._roundtrip([message], expected, progress, header_lines(headers or {}))
        elif self._native is not None:
            sent = self._native.send([request], expected, _codec.encode, self.timeout, own, progress)
            replies = [Reply(*r) for r in sent]
        else:
            replies = self._roundtrip([dumps(_codec.pack(request))], expected, progress, header_lines(headers or {}))
        if not replies:
            return None
        data = _decode(replies[0])
        if isinstance(request, list):
            return _match_batch(request, data)
        if "id" not in request:
            return None
        return self._check(Response(data), request)

    def _check(self, response: Response, request: dict[str, Any]) -> Response:
        if _is_item(response.data) and request.get("id") is not None:
            # The stream's other items are still on their way: a fresh connection for
            # the next call, as the native client does for its own calls.
            self.close()
        return Client._checked(response, request)

    @staticmethod
    def _checked(response: Response, request: dict[str, Any]) -> Response:
        data = response.data
        if isinstance(data, dict) and "error" in data and data.get("id") is None:
            return response  # errors about the request itself carry no id
        if not isinstance(data, dict) or data.get("id") != request.get("id"):
            if _is_item(data):
                raise _streams_error(request.get("method"))
            raise ProtocolError(f"a reply to another request: {data!r}")
        return response

    def _roundtrip(
        self, bodies: list[bytes | _BinaryRequest], replies: int, progress: Progress | None = None, headers: str = ""
    ) -> list[Reply]:
        if self.sock is not None and (self._reader.ended or _closed_by_peer(self.sock)):
            self._drop()  # closed by the server between calls: an idle time-out, a shutdown
        for attempt in (0, 1):
            fresh = self.sock is None
            sock = self._connect()
            sent = False
            try:
                # The first request alone first: once it is written whole the server may
                # have run it, and the exchange is not sent again.
                first = self._encode(self._reader, bodies[:1], headers)
                rest = self._encode(self._reader, bodies[1:], headers)
                self._send(sock, first + rest if progress else first, progress)
                sent = True
                if rest and not progress:
                    self._send(sock, rest, None)
                received = [self._receive(sock) for _ in range(replies)]
                self._keep_session(sock)
                return received
            except socket.timeout:
                self._drop()
                raise TimeoutError(f"no reply from {self._where} within {self.timeout} s") from None
            except TransportError:
                self._drop()
                raise
            except (ConnectionError, _Closed) as error:
                self._drop()
                # A kept-alive connection that failed while the first request was being
                # sent: once more on a new one. Once it is sent whole, the server may have
                # run it, and running it twice is worse than reporting the lost reply.
                if sent and fresh and not self._heard:
                    raise TransportError(
                        f"{self._where} closed a new connection before replying (a server at its"
                        f" max_connections, or shutting down, closes new connections at once): {error}"
                    ) from None
                if sent:
                    raise TransportError(
                        f"connection to {self._where} lost after the request was sent (the call may have run): {error}"
                    ) from None
                if fresh or attempt == 1 or not isinstance(error, (ConnectionResetError, BrokenPipeError)):
                    raise TransportError(f"connection to {self._where} lost: {error}") from None
            except OSError as error:
                self._drop()
                raise self._refusal(error) or TransportError(f"{self._where}: {error}") from None
        raise AssertionError("unreachable")

    def _connect(self) -> socket.socket:
        if self.sock is not None:
            return self.sock
        try:
            raw = socket.create_connection((self.uri, self.port), timeout=self.timeout)
        except socket.timeout:
            raise TimeoutError(f"cannot connect to {self._where} within {self.timeout} s") from None
        except OSError as error:
            raise ConnectError(f"cannot connect to {self._where}: {error}") from None
        raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock = raw
        try:
            sock = self._wrap(raw)
            reader = self._framer()
            if isinstance(reader, WebSocketReader):
                self._open_websocket(sock, reader)
        except BaseException:
            sock.close()
            raw.close()
            raise
        self.sock, self._reader, self._heard = sock, reader, False
        return sock

    def _wrap(self, sock: socket.socket) -> socket.socket:
        """The TLS handshake, when the client speaks TLS."""
        if self.ssl_context is None:
            return sock
        session = self.session if self.session_resumption else None
        try:
            return self.ssl_context.wrap_socket(sock, server_hostname=self.server_hostname, session=session)
        except socket.timeout:
            raise TimeoutError(f"no TLS handshake with {self._where} within {self.timeout} s") from None
        except OSError as error:
            raise self._tls_failure(error) from error

    def _open_websocket(self, sock: socket.socket, reader: WebSocketReader) -> None:
        try:
            sock.sendall(reader.handshake())
            while not reader.opened:
                reader.feed(sock.recv(1 << 16))
        except socket.timeout:
            raise TimeoutError(f"no WebSocket handshake from {self._where} within {self.timeout} s") from None
        except TransportError:
            raise
        except OSError as error:
            failed = ConnectError(f"WebSocket handshake with {self._where} failed: {error}")
            raise self._refusal(error) or failed from None

    def _keep_session(self, sock: socket.socket) -> None:
        if self.session_resumption and isinstance(sock, ssl.SSLSocket):
            session = sock.session
            if session is not None:
                self.session = session

    @staticmethod
    def _send(sock: socket.socket, parts: list[Any], progress: Progress | None) -> None:
        if progress is None and len(parts) > 1 and not isinstance(sock, ssl.SSLSocket):
            _send_parts(sock, parts)
            return
        payload = parts[0] if len(parts) == 1 else b"".join(parts)
        if progress is None:
            sock.sendall(payload)
            return
        view = memoryview(payload)
        step = 1 << 20
        for offset in range(0, len(view), step):
            sock.sendall(view[offset : offset + step])
            progress(min(offset + step, len(view)), len(view))

    def _receive(self, sock: socket.socket) -> Reply:
        reader = self._reader
        while True:
            reply = reader.next()
            if reply is not None:
                if reply.close:
                    self._drop()
                return reply
            if reader.ended:
                raise _Closed(f"the server closed the connection{reader.why}")
            room = reader.room() if isinstance(reader, ReplyReader) else None
            if room is not None and isinstance(reader, ReplyReader):  # a large body: read where it stays
                n = sock.recv_into(room)
                self._heard |= bool(n)
                reader.filled(n)
                continue
            # A WebSocket message's frame in few reads where its size is known.
            wanted = reader.wanted() if isinstance(reader, WebSocketReader) else 0
            data = sock.recv(min(max(1 << 16, wanted), 16 << 20))
            self._heard |= bool(data)
            reader.feed(data)
            owed = reader.to_send()  # a WebSocket pong or closing frame
            if owed:
                sock.sendall(owed)

    def close(self) -> None:
        """Close the connection (a WebSocket with its closing frame); calls re-open it."""
        if self._native is not None:
            self._native.close()
        sock = self.sock
        if sock is not None and isinstance(self._reader, WebSocketReader):
            try:
                goodbye = self._reader.close()
                if goodbye:
                    sock.sendall(goodbye)
            except OSError:
                pass
        self._drop()

    def _drop(self) -> None:
        sock, self.sock = self.sock, None
        if sock is not None:
            try:
                self._keep_session(sock)
            finally:
                sock.close()


class _Closed(Exception):
    pass


def _stream_kind(endpoint: _Endpoint) -> str:
    return "ws" if endpoint.websocket else "http" if endpoint.use_http else "tcp"


def _stream_end(data: Any, request_id: int, cancelled: bool) -> Any:
    """The final reply's result; raises ``RPCError`` for an error reply (but the one
    that ends a stream its caller cancelled)."""
    response = Response(data)
    if isinstance(data, dict) and data.get("id") not in (request_id, None):
        raise ProtocolError(f"a reply to another request: {data!r}")
    error = response.error
    if cancelled and error is not None and error.code == _streamed.CANCELLED:
        return None
    return response.json


def _read_size(framer: _streamed.StreamFramer) -> int:
    """How much a stream's next read asks for: what the message under way still needs
    (a large attachment in few reads), at least 64 KiB and at most 16 MiB."""
    return min(max(1 << 16, framer.wanted()), 16 << 20)


def _cancel_request(request_id: int) -> bytes:
    return dumps({"jsonrpc": "2.0", "method": _streamed.CANCEL_METHOD, "params": {"id": request_id}})


class Stream(_OwnsSocket):
    """The items of a streamed call (``Client.stream``), as they arrive; ``result`` is the
    final reply's result once they are all read."""

    _SOCKET = "_sock"

    def __init__(self, client: Client, method: str, params: Any) -> None:
        """``params`` unpacked (numpy arrays, bytes as they are): a binary message carries
        them where ``client`` sends them so (``Client.stream``), else base64 in JSON."""
        self.result: Any = None
        self._id, body = client._stream_request(method, params)
        self._where = client._where
        self._timeout = client.timeout
        kind = _stream_kind(client)
        try:
            raw = socket.create_connection((client.uri, client.port), timeout=client.timeout)
        except socket.timeout:
            raise TimeoutError(f"cannot connect to {self._where} within {client.timeout} s") from None
        except OSError as error:
            raise ConnectError(f"cannot connect to {self._where}: {error}") from None
        raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock = raw
        try:
            sock = client._wrap(raw)
            ws = None
            if kind == "ws":  # (the subprotocol offered when binary messages go)
                binary = isinstance(body, _BinaryRequest)
                ws = WebSocketReader(client.uri, client.port, client.path, client.tls, client.headers, binary)
                client._open_websocket(sock, ws)
            client._send(sock, client._stream_parts(body, ws), None)
        except BaseException:
            sock.close()
            raw.close()
            raise
        self._sock: socket.socket | None = sock
        self._framer = _streamed.StreamFramer(kind, self._id, ws)
        self._events: deque[tuple[str, Any]] = deque()
        self._cancelled = False

    def __iter__(self) -> Stream:
        return self

    def __next__(self) -> Any:
        while not self._events:
            sock = self._sock
            if sock is None:
                raise StopIteration
            try:
                data = sock.recv(_read_size(self._framer))
            except socket.timeout:
                self.close()
                raise TimeoutError(f"no item from {self._where} within {self._timeout} s") from None
            except OSError as error:
                self.close()
                raise TransportError(f"connection to {self._where} lost during a stream: {error}") from None
            self._framer.feed(data)
            owed = self._framer.to_send()
            if owed:
                sock.sendall(owed)
            try:
                self._events.extend(self._framer.events())
            except ProtocolError:
                self.close()
                raise
        kind, value = self._events.popleft()
        if kind == _streamed.ITEM:
            return value
        self.close()
        self.result = _stream_end(value, self._id, self._cancelled)
        raise StopIteration

    def cancel(self) -> None:
        """Ask the server to stop the stream: over raw TCP and WebSocket with
        ``ucall.cancel`` (the items already sent still come, then the stream ends); over
        HTTP by hanging up."""
        sock = self._sock
        if sock is None or self._framer.kind == "http":
            self.close()
            return
        self._cancelled = True
        message = _cancel_request(self._id)
        ws = self._framer.ws
        sock.sendall(ws.encode(message) if ws is not None else message + b"\n")

    def close(self) -> None:
        """Hang up: the server stops the stream."""
        sock, self._sock = self._sock, None
        if sock is not None:
            sock.close()


class AsyncStream:
    """The items of a streamed call (``AsyncClient.stream``), for ``async for``; ``result``
    is the final reply's result once they are all read."""

    def __init__(self, client: AsyncClient, method: str, params: Any) -> None:
        """``params`` unpacked (numpy arrays, bytes as they are): they go as a binary message
        as ``AsyncClient.call`` would send them, else as JSON."""
        self.result: Any = None
        self._client = client
        self._method, self._params = method, params
        self._made_in = contextvars.copy_context()  # the span its request names (``_meta``)
        self._id = 0  # given as the request is made (``_start``)
        self._writer: asyncio.StreamWriter | None = None
        self._reader: asyncio.StreamReader | None = None
        self._framer: _streamed.StreamFramer | None = None
        self._events: deque[tuple[str, Any]] = deque()
        self._ended = False
        self._cancelled = False

    def __aiter__(self) -> AsyncStream:
        return self

    async def _start(self) -> _streamed.StreamFramer:
        client = self._client
        kind = _stream_kind(client)
        if client._may_attach(self._params):
            await client._ask_once()
        self._id, body = self._made_in.run(client._stream_request, self._method, self._params)
        try:
            reader, writer, framer = await asyncio.wait_for(client._open(), client.timeout)
        except asyncio.TimeoutError:
            raise TimeoutError(f"cannot connect to {client._where} within {client.timeout} s") from None
        ws = framer if isinstance(framer, WebSocketReader) else None
        try:
            parts = self._made_in.run(client._stream_parts, body, ws)
        except BaseException:
            writer.close()
            raise
        writer.writelines(_write_now(writer, parts) if len(parts) > 1 else parts)
        self._reader, self._writer = reader, writer
        self._framer = _streamed.StreamFramer(kind, self._id, ws)
        return self._framer

    async def __anext__(self) -> Any:
        framer = self._framer
        if framer is None and not self._ended:
            framer = await self._start()
        while not self._events:
            if self._ended or framer is None or self._reader is None:
                raise StopAsyncIteration
            try:
                data = await asyncio.wait_for(self._reader.read(_read_size(framer)), self._client.timeout)
            except asyncio.TimeoutError:
                await self.aclose()
                raise TimeoutError(f"no item from {self._client._where} within {self._client.timeout} s") from None
            except OSError as error:
                await self.aclose()
                raise TransportError(f"connection to {self._client._where} lost during a stream: {error}") from None
            framer.feed(data)
            owed = framer.to_send()
            if owed and self._writer is not None:
                self._writer.write(owed)
            try:
                self._events.extend(framer.events())
            except ProtocolError:
                await self.aclose()
                raise
        kind, value = self._events.popleft()
        if kind == _streamed.ITEM:
            return value
        await self.aclose()
        self.result = _stream_end(value, self._id, self._cancelled)
        raise StopAsyncIteration

    async def cancel(self) -> None:
        """As ``Stream.cancel``."""
        framer, writer = self._framer, self._writer
        if framer is None or writer is None or framer.kind == "http":
            await self.aclose()
            return
        self._cancelled = True
        message = _cancel_request(self._id)
        writer.write(framer.ws.encode(message) if framer.ws is not None else message + b"\n")
        await writer.drain()

    async def aclose(self) -> None:
        """Hang up: the server stops the stream."""
        self._ended = True
        writer, self._writer = self._writer, None
        if writer is not None:
            writer.close()
            try:
                await writer.wait_closed()
            except OSError:
                pass

    async def __aenter__(self) -> AsyncStream:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


def _closed_by_peer(sock: socket.socket) -> bool:
    """Whether a kept-alive connection is unfit for the next call: between calls a server
    sends nothing, so anything to read (its close, a reset, stray bytes) means it has
    gone out of step. Checked before sending, so that a call is never sent into a
    connection the server has already closed."""
    if hasattr(select, "poll"):
        poller = select.poll()
        poller.register(sock, select.POLLIN)
        readable = bool(poller.poll(0))
    else:
        readable = bool(select.select([sock], [], [], 0)[0])
    if not readable or not isinstance(sock, ssl.SSLSocket):
        return readable
    # TLS 1.3 session tickets arrive unasked: read without waiting; wanting more input
    # means only such records were there.
    timeout = sock.gettimeout()
    sock.setblocking(False)
    try:
        sock.recv(1)
        return True
    except ssl.SSLWantReadError:
        return False
    except OSError:
        return True
    finally:
        sock.settimeout(timeout)


def _match_batch(requests: list[dict[str, Any]], data: Any) -> list[Response]:
    """Responses for the calls of a batch, in request order (notifications get none)."""
    if data is None:
        return []
    if isinstance(data, dict):
        # The batch refused as a whole (over max_batch, not JSON): the error answers every
        # call, one response each as for a batch answered call by call.
        calls = sum(1 for request in requests if "id" in request)
        return [Response(data) for _ in range(calls)] or [Response(data)]
    by_id = {json.dumps(r.get("id")): Response(r) for r in data if isinstance(r, dict)}
    out = []
    for request in requests:
        if "id" in request:
            key = json.dumps(request["id"])
            error = {"code": -32603, "message": "no reply in the batch"}
            missing = {"jsonrpc": "2.0", "id": request["id"], "error": error}
            out.append(by_id.get(key) or Response(missing))
    return out


class _Pending:
    """A batched call's future response."""

    def __init__(self) -> None:
        self.response: Response | None = None

    def _get(self) -> Response:
        if self.response is None:
            raise RuntimeError("the batch has not been sent yet")
        return self.response

    @property
    def json(self) -> Any:
        return self._get().json

    @property
    def data(self) -> Any:
        return self._get().data

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self._get(), name)


class _Collected:
    """Calls collected for one round trip. Attribute access makes calls, like on a client."""

    def __init__(self, next_id: Callable[[], int]) -> None:
        self._next_id = next_id
        self.requests: list[dict[str, Any]] = []
        self.pending: list[_Pending] = []

    def __getattr__(self, name: str) -> Callable[..., _Pending]:
        if name.startswith("_"):
            raise AttributeError(name)
        return lambda *args, **kwargs: self.call(name, *args, **kwargs)

    def call(self, method: str, *args: Any, **kwargs: Any) -> _Pending:
        # Params as given: the batch goes as one binary message when they hold binary values.
        self.requests.append(_request(method, _native_params(args, kwargs), self._next_id()))
        pending = _Pending()
        self.pending.append(pending)
        return pending

    def notify(self, method: str, *args: Any, **kwargs: Any) -> None:
        self.requests.append(_request(method, _native_params(args, kwargs), None))

    def _settle(self, responses: list[Response] | None) -> list[Response]:
        """Hand each collected call its response; the batch is empty again."""
        for pending, response in zip(self.pending, responses or []):
            pending.response = response
        self.requests, self.pending = [], []
        return list(responses or [])


class Batch(_Collected):
    """Calls collected for one round trip, sent by ``send()`` or on leaving ``with``."""

    def __init__(self, client: Client) -> None:
        super().__init__(client.next_id)
        self.client = client

    def send(self) -> list[Response]:
        if not self.requests:
            return []
        return self._settle(self.client._exchange(self.requests))

    def __enter__(self) -> Batch:
        return self

    def __exit__(self, exc_type: object, *exc: object) -> None:
        if exc_type is None:
            self.send()


class AsyncBatch(_Collected):
    """``Batch`` for ``AsyncClient``: sent by ``await send()`` or on leaving ``async with``."""

    def __init__(self, client: AsyncClient) -> None:
        super().__init__(client.next_id)
        self.client = client

    async def send(self) -> list[Response]:
        if not self.requests:
            return []
        return self._settle(await self.client._exchange(self.requests))

    async def __aenter__(self) -> AsyncBatch:
        return self

    async def __aexit__(self, exc_type: object, *exc: object) -> None:
        if exc_type is None:
            await self.send()


class ClientTLS(Client):
    """UCall's published TLS client: ``Client`` over HTTPS, with the earlier signature.

    ``ssl_context`` is used as given; without one, the certificate is checked against the
    system's CAs, or not at all with ``allow_self_signed=True`` (any certificate is then
    accepted: ``Client(..., cacert=...)`` trusts one CA instead).
    ``enable_session_resumption`` resumes the TLS session on reconnection. ``tls_cert``
    and ``tls_key`` present a client certificate, as with ``Client``.
    """

    def __init__(
        self,
        uri: str = "127.0.0.1",
        port: int = 8545,
        ssl_context: ssl.SSLContext | None = None,
        allow_self_signed: bool = False,
        enable_session_resumption: bool = True,
        *,
        timeout: float | None = 30.0,
        path: str = "/",
        tls_cert: StrPath | None = None,
        tls_key: StrPath | None = None,
        headers: Mapping[str, str] | None = None,
        binary: bool | None = None,
        max_reply_size: int | None = MAX_REPLY_SIZE,
    ) -> None:
        super().__init__(
            uri,
            port,
            use_http=True,
            timeout=timeout,
            path=path,
            tls=True,
            ssl_context=ssl_context,
            insecure=allow_self_signed and ssl_context is None,
            session_resumption=enable_session_resumption,
            tls_cert=tls_cert,
            tls_key=tls_key,
            headers=headers,
            binary=binary,
            max_reply_size=max_reply_size,
        )


class AsyncClient(_Endpoint):
    """An asyncio JSON-RPC client; many calls may be in flight on its one connection.

        async with AsyncClient(port=8545) as client:
            results = await asyncio.gather(*(client.sum(i, 1) for i in range(100)))

    It takes the same addresses and TLS options as ``Client`` (``ws://``, ``wss://``,
    ``tls=True``, ``cacert``, ``tls_cert``, ...) but ``session_resumption``: it resumes
    TLS sessions on reconnection, except with an ``ssl_context=`` (asyncio gives no way
    to resume one). As ``Client``, it opens a new connection for a call when the server has
    closed the idle one, whether or not the event loop has run since.
    """

    def __init__(
        self,
        uri: str = "127.0.0.1",
        port: int = 8545,
        use_http: bool = True,
        *,
        timeout: float | None = 30.0,
        path: str = "/",
        tls: bool | None = None,
        cacert: StrPath | None = None,
        insecure: bool = False,
        ssl_context: ssl.SSLContext | None = None,
        server_hostname: str | None = None,
        tls_cert: StrPath | None = None,
        tls_key: StrPath | None = None,
        headers: Mapping[str, str] | None = None,
        binary: bool | None = None,
        max_reply_size: int | None = MAX_REPLY_SIZE,
    ) -> None:
        super().__init__(_Options.of(locals()))
        self._writer: asyncio.StreamWriter | None = None
        self._framer_in_use: Framer | None = None
        self._waiting: deque[asyncio.Future[Reply]] = deque()
        self._reader_task: asyncio.Task[None] | None = None
        self._connecting: asyncio.Lock | None = None
        self._mux: _Mux | None = None
        self._asking: asyncio.Future[None] | None = None  # rpc.discover, for binary messages

    def __getattr__(self, name: str) -> Callable[..., Coroutine[Any, Any, Response]]:
        if name.startswith("_"):
            raise AttributeError(name)

        call = functools.partial(self.call, name)
        if len(self.__dict__) < _KEPT_METHODS:
            self.__dict__[name] = call  # found at once next time, without this lookup
        return call

    def call(self, method: str, *args: Any, **kwargs: Any) -> Coroutine[Any, Any, Response]:
        """The call's ``Response``, to await (or gather, or run as a task). On the native
        transport, inside a running event loop, the request is sent at once and what comes
        back is a future (``_Call``), which ``asyncio.gather`` takes without a task of its own."""
        if self._may_attach(_native_params(args, kwargs)) or self._asks_binary_replies():
            return self._binary_call(method, _native_params(args, kwargs))
        if self._native_protocol is not None and current_meta() is None:
            mux = self._mux
            try:
                if mux is None or mux.loop is not asyncio.get_running_loop():
                    mux = self._native_mux()
            except RuntimeError:  # no running loop yet (``asyncio.run(client.ping())``)
                return self._call(method, args, kwargs)
            return self._submit(mux, method, _native_params(args, kwargs))
        return self._call(method, args, kwargs)

    def _submit(self, mux: _Mux, method: str, params: Any) -> _Call:
        """A call on the native transport, its params encoded by the native writer."""
        request_id = next(self._ids)
        if mux.held:
            return mux.hold(method, params, request_id)
        try:
            ticket = mux.native.call(method, params, request_id, _codec.encode, self.timeout, UNSENT_AT_MOST)
        except Exception as error:  # raised where it is awaited, as from a coroutine
            failed = _Call(loop=mux.loop)
            failed.set_exception(error)
            return failed
        if ticket is None:
            return mux.hold(method, params, request_id)
        return mux.wait(ticket, request_id)

    async def _call(self, method: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Response:
        request = _request(method, _params(args, kwargs), self.next_id(), self.timeout)
        if self._native_protocol is not None and "_meta" not in request:
            return await self.call(method, *args, **kwargs)
        return self._in_time(await self._exchange(request))

    async def call_with_headers(self, method: str, params: Any, headers: Mapping[str, str]) -> Response:
        """As ``Client.call_with_headers``: ``headers`` go with this call only (HTTP only),
        on the connection of the other calls (binary values as attachments)."""
        self._call_headers(headers)  # (checked before anything is sent)
        if self._may_attach(params):
            return await self._binary_call(method, params, headers)
        request = _request(method, _codec.pack(params) if params is not None else None, self.next_id(), self.timeout)
        return self._in_time(await self._exchange(request, headers))

    def stream(self, method: str, *args: Any, **kwargs: Any) -> AsyncStream:
        """As ``Client.stream``: ``async for token in client.stream("generate", prompt=...)``.
        The call has a connection of its own; ``aclose()`` (or leaving ``async with``)
        hangs up, which stops the generator on the server. Binary values in the params go
        as attachments of a binary message, as ``call`` sends them."""
        return AsyncStream(self, method, _native_params(args, kwargs))

    async def notify(self, method: str, *args: Any, **kwargs: Any) -> None:
        await self._exchange(_request(method, _params(args, kwargs), None, self.timeout))

    async def __call__(self, request: dict[str, Any] | list[dict[str, Any]]) -> Any:
        if isinstance(request, list):
            return await self._exchange([_complete(r, self.next_id) for r in request])
        return await self._exchange(_complete(request, self.next_id))

    @overload
    def batch(self) -> AsyncBatch: ...

    @overload
    def batch(self, calls: Iterable[tuple[str, Any]]) -> Awaitable[list[Response]]: ...

    def batch(self, calls: Iterable[tuple[str, Any]] | None = None) -> AsyncBatch | Awaitable[list[Response]]:
        """Calls sent as one batch, in one round trip. As ``Client.batch()``, collected in
        ``async with client.batch() as batch:`` and sent on leaving it; or given at once as
        ``(method, params)`` pairs: ``await client.batch(calls)``, their responses in order."""
        if calls is None:
            return AsyncBatch(self)
        return self._exchange(self._kept_requests(calls))

    async def pipeline(self, calls: Iterable[tuple[str, Any]]) -> list[Response]:
        """Send every ``(method, params)`` back to back, then await the replies in order."""
        requests = self._kept_requests(calls)
        return list(await asyncio.gather(*(self._exchange(r) for r in requests)))

    def _kept_requests(self, calls: Iterable[tuple[str, Any]]) -> list[dict[str, Any]]:
        """A request per call, params as given when they hold binary values (``_exchange``
        sends those as binary messages), else packed."""
        calls = list(calls)
        if self._may_attach([params for _, params in calls]):
            return [_request(m, p, self.next_id(), self.timeout) for m, p in calls]
        return self._requests(calls)

    def _native_mux(self) -> _Mux:
        loop = asyncio.get_running_loop()
        mux = self._mux
        if mux is None or mux.loop is not loop:
            if mux is not None:
                mux.close(TransportError("the client moved to another event loop"))
            mux = self._mux = _Mux(self, loop)
        return mux

    async def _exchange(self, request: Any, headers: Mapping[str, str] | None = None) -> Any:
        """Send ``request`` and settle its reply, with ``headers`` of its own over HTTP
        (besides a traced span's context: ``_request_headers``). A request or batch whose
        params hold binary values goes as one binary message."""
        if self._may_attach(request):
            await self._ask_once()
            message = self._binary_message(request)
            if message is not None:
                expects = self.expects_reply(request)
                reply = await self._binary_send(message, expects, headers)
                return None if reply is None else self._settle(request, reply)
            request = _codec.pack(request)
        if self._native_protocol is not None:
            mux = self._native_mux()
            expects = self.expects_reply(request)
            reply = await mux.wait(mux.native.send(request, expects, _codec.encode, self._request_headers(headers)))
            if not expects:
                return None
            return self._settle(request, reply)
        body = dumps(_codec.pack(request))
        answer = await self._python_exchange(body, self.expects_reply(request), header_lines(headers or {}))
        return None if answer is None else self._settle(request, answer)

    async def _binary_call(self, method: str, params: Any, headers: Mapping[str, str] | None = None) -> Response:
        """A call with attachments, as a binary message on the client's connection; a call
        none of whose values goes as an attachment goes as any other."""
        await self._ask_once()
        call = self._binary_request(method, params) if self._may_attach(params) else None
        if call is None and not headers and not self._asks_binary_replies():
            if self._native_protocol is not None and current_meta() is None:
                # No attachment after all (the server marks none): the native writer packs
                # the values (base64 straight into the request), not Python.
                return self._in_time(await self._submit(self._native_mux(), method, params))
        if call is None:
            request = _request(
                method, _codec.pack(params) if params is not None else None, self.next_id(), self.timeout
            )
            if not (self._asks_binary_replies() and not headers):
                return self._in_time(await self._exchange(request, headers))
            # A binary message without attachments: how a call accepts a binary reply.
            call = _BinaryRequest(request, lambda method: frozenset())
        reply = await self._binary_send(call, True, headers)
        assert reply is not None
        return self._in_time(self._settle(call.request, reply))

    async def _binary_send(
        self, message: _BinaryRequest, expects: bool, headers: Mapping[str, str] | None
    ) -> Reply | None:
        """Send a binary message, with ``headers`` of its own over HTTP (and a traced span's
        context: ``_request_headers``) in its request's head only; its reply when one is
        expected. On the native transport it goes on the connection of every other call, in
        order, its attachments written from their own memory and a binary reply read into
        one buffer that its arrays view; else (a client given ``ssl_context=``) on Python's.
        On a WebSocket whose server did not select the subprotocol it goes as plain JSON
        (``binary=None``) or fails with ``ProtocolError`` (``binary=True``), as on Python's
        transport."""
        if self._native_protocol is None:
            return await self._python_exchange(message, expects, header_lines(headers or {}))
        mux = self._native_mux()
        native = mux.native
        takes = native.websocket_binary() if self.websocket else True
        if takes is False and self.binary:
            raise self._no_binary_websocket()
        ticket: int | None
        if takes is False:
            ticket = native.send(message.raw, expects, _codec.encode)
        else:
            # Before a WebSocket opened, its plain form goes along for a server without the subprotocol.
            plain = message.raw if takes is None and not self.binary else None
            sources, own = message.attachments.sources(), self._request_headers(headers)
            ticket = native.send_binary(message.text, sources, expects, None, plain, _codec.encode, own)
        assert ticket is not None  # (None only with unsent_at_most)
        reply = await mux.wait(ticket)
        return reply if expects else None

    async def _ask_once(self) -> None:
        """The server's description, asked once for every call waiting on it, when binary
        messages need it (``_learn``)."""
        if self._must_ask():
            if self._asking is None:
                self._asking = asyncio.ensure_future(self._ask())
            await asyncio.shield(self._asking)

    async def _ask(self) -> None:
        """The server's description, once for every call waiting on it (``_learn``)."""
        try:
            self._learn((await self.call("rpc.discover")).json)
        except (RPCError, ProtocolError):
            self._learn(None)
        finally:
            self._asking = None

    async def _python_exchange(self, body: bytes | _BinaryRequest, expects: bool, headers: str) -> Reply | None:
        """Send ``body`` on the Python transport; its reply when one is expected."""
        writer, framer = await self._connect()
        future: asyncio.Future[Reply] | None = None
        if expects:
            future = asyncio.get_running_loop().create_future()
            self._waiting.append(future)
        parts = self._encode(framer, [body], headers)
        writer.writelines(_write_now(writer, parts) if len(parts) > 1 else parts)
        if future is None:
            await writer.drain()
            return None
        try:
            return await asyncio.wait_for(asyncio.shield(future), self.timeout)
        except asyncio.TimeoutError:
            late = TimeoutError(f"no reply from {self._where} within {self.timeout} s")
            self._drop(late)
            raise late from None

    @staticmethod
    def _settle(request: Any, reply: Reply) -> Any:
        data = _decode(reply)
        if isinstance(request, list):
            return _match_batch(request, data)
        if "id" not in request:
            return None
        return Client._checked(Response(data), request)

    async def _connect(self) -> tuple[asyncio.StreamWriter, Framer]:
        if self._connecting is None:
            self._connecting = asyncio.Lock()
        async with self._connecting:
            sock = self._writer.get_extra_info("socket") if self._writer is not None else None
            if sock is not None and not self._waiting and _closed_by_peer(sock):
                # Closed by the server between calls (an idle time-out, a restart), and the
                # loop has not run since to see it: as Client does, a new connection rather
                # than a call sent into a closed one.
                self._drop(TransportError("the server closed the connection"))
            if self._writer is None or self._writer.is_closing() or self._framer_in_use is None:
                try:
                    reader, writer, framer = await asyncio.wait_for(self._open(), self.timeout)
                except asyncio.TimeoutError:
                    raise TimeoutError(f"cannot connect to {self._where} within {self.timeout} s") from None
                self._writer, self._framer_in_use = writer, framer
                self._reader_task = asyncio.get_running_loop().create_task(self._read(reader, writer, framer))
            return self._writer, self._framer_in_use

    async def _open(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter, Framer]:
        """A new connection: TCP, the TLS handshake, the WebSocket handshake."""
        tls = {"ssl": self.ssl_context, "server_hostname": self.server_hostname} if self.ssl_context else {}
        try:
            reader, writer = await asyncio.open_connection(self.uri, self.port, **tls)  # type: ignore[arg-type]
        except ssl.SSLError as error:
            raise self._tls_failure(error) from error
        except OSError as error:
            raise ConnectError(f"cannot connect to {self._where}: {error}") from None
        sock = writer.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        framer = self._framer()
        if isinstance(framer, WebSocketReader):
            try:
                writer.write(framer.handshake())
                while not framer.opened:
                    framer.feed(await reader.read(1 << 16))
            except BaseException as error:
                writer.close()
                if isinstance(error, OSError) and not isinstance(error, TransportError):
                    failed = ConnectError(f"WebSocket handshake with {self._where} failed: {error}")
                    raise self._refusal(error) or failed from None
                raise
        return reader, writer, framer

    async def _read(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, framer: Framer) -> None:
        try:
            while True:
                reply = framer.next()
                if reply is None:
                    if framer.ended:
                        raise TransportError(f"the server closed the connection{framer.why}")
                    wanted = framer.wanted() if isinstance(framer, WebSocketReader) else 0
                    framer.feed(await reader.read(min(max(1 << 16, wanted), 16 << 20)))
                    owed = framer.to_send()  # a WebSocket pong or closing frame
                    if owed:
                        writer.write(owed)
                    continue
                if not self._waiting:
                    raise ProtocolError("a reply nobody asked for")
                future = self._waiting.popleft()
                if not future.done():
                    future.set_result(reply)
                if reply.close:
                    raise TransportError("the server closed the connection")
        except OSError as error:
            failure = error if isinstance(error, TransportError) else self._refusal(error) or TransportError(str(error))
            if self._writer is writer:
                self._drop(failure)
            writer.close()

    def _drop(self, error: Exception) -> None:
        """Forget the connection and fail the calls awaiting replies on it. Its reader is
        stopped, so that it cannot fail the calls of the connection after it."""
        writer, self._writer = self._writer, None
        task, self._reader_task = self._reader_task, None
        self._framer_in_use = None
        if task is not None and task is not asyncio.current_task():
            task.cancel()
        if writer is not None:
            writer.close()
        while self._waiting:
            future = self._waiting.popleft()
            if not future.done():
                future.set_exception(error)
                future.exception()  # retrieved: no "never retrieved" warning

    async def close(self) -> None:
        """Close the connection (a WebSocket with its closing frame); calls re-open it."""
        mux, self._mux = self._mux, None
        if mux is not None:
            mux.close(TransportError("the client closed the connection"))
        writer, task, framer = self._writer, self._reader_task, self._framer_in_use
        if writer is not None and isinstance(framer, WebSocketReader) and not writer.is_closing():
            writer.write(framer.close())
        self._drop(TransportError("the client closed the connection"))
        if writer is not None:
            try:
                await asyncio.wait_for(writer.wait_closed(), self.timeout)
            except (OSError, asyncio.TimeoutError):
                pass
        if task is not None:
            try:
                await task
            except asyncio.CancelledError:
                pass

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


#: How many attributes an ``AsyncClient`` keeps, its methods' callers included: a client of
#: a few hundred methods keeps them all, one called with ever new names stays bounded.
_KEPT_METHODS = 512


class _Call(asyncio.Future["Response"], Coroutine[Any, Any, "Response"]):
    """A call's ``Response`` on the native transport: a future, which ``asyncio.gather``
    awaits as it is (wrapping each of 1,000 coroutines in a task cost more than the rest of
    a small call), that also steps as a coroutine, so that ``create_task`` and
    ``asyncio.run`` take it as they took the coroutine ``call`` once returned."""

    def send(self, value: Any) -> Any:
        if not self.done():
            self._asyncio_future_blocking = True
            return self
        raise StopIteration(self.result())

    def throw(self, kind: Any, value: Any = None, traceback: Any = None) -> Any:
        self.cancel()  # the task running it was cancelled (or had an error thrown in)
        raise value if value is not None else kind

    def close(self) -> None:
        self.cancel()


class _Mux:
    """An ``AsyncClient``'s native connection on one event loop: calls are submitted to
    its I/O thread, which writes a byte to a socket the loop watches when replies are
    waiting; the loop then settles every waiting future at once. Replies come in request
    order, so the oldest call's deadline is the only one a timer needs to watch.

    While more than ``UNSENT_AT_MOST`` request bytes (2 MiB) wait to be written, calls are
    held back unencoded in ``held``, in order, and submitted as replies come: a hundred
    1.6 MB arrays gathered were otherwise encoded at once into 210 MB of fresh pages, each
    written long after from memory no cache held (3.0 ms of client CPU per call; 2.4 ms
    held so). Small calls never wait: a thousand gathered are 60 KB. See docs/design.md,
    "The clients' large requests"."""

    def __init__(self, client: AsyncClient, loop: asyncio.AbstractEventLoop) -> None:
        self.client = client
        self.loop = loop
        self.waiting: dict[int, tuple[asyncio.Future[Any], float, int | None]] = {}
        self.held: deque[tuple[str, Any, int, _Call, float]] = deque()
        self.timer: asyncio.TimerHandle | None = None
        self.wake_r, wake_w = socket.socketpair()
        for end in (self.wake_r, wake_w):
            end.setblocking(False)
        assert client._native_protocol is not None
        try:
            # The write end goes to the native side, which closes it after its I/O thread.
            fd = wake_w.detach()
            native = client._native_protocol, client.path, client.timeout
            headers = list(client.headers.items())
            self.native = NativeMux(
                client.uri, client.port, *native, fd, client._native_tls, headers, client.max_reply_size
            )
        except BaseException:
            self.wake_r.close()
            raise
        loop.add_reader(self.wake_r.fileno(), self._ready)

    @overload
    def wait(self, ticket: int) -> asyncio.Future[Reply]: ...
    @overload
    def wait(self, ticket: int, call_id: int) -> _Call: ...
    def wait(self, ticket: int, call_id: int | None = None) -> asyncio.Future[Any]:
        """The future of request ``ticket``'s reply; with ``call_id``, of the ``Response``
        to the call of that id (checked here, so that the caller needs no coroutine)."""
        future: asyncio.Future[Any] = self.loop.create_future() if call_id is None else _Call(loop=self.loop)
        self._watch(ticket, future, self._deadline(), call_id)
        return future

    def _deadline(self) -> float:
        timeout = self.client.timeout
        return self.loop.time() + timeout if timeout is not None else float("inf")

    def _watch(self, ticket: int, future: asyncio.Future[Any], deadline: float, call_id: int | None) -> None:
        self.waiting[ticket] = (future, deadline, call_id)
        if self.timer is None and deadline != float("inf"):
            self.timer = self.loop.call_at(deadline, self._expire)

    def hold(self, method: str, params: Any, call_id: int) -> _Call:
        """The future of a call to submit once less is unsent (its deadline runs from now)."""
        future = _Call(loop=self.loop)
        self.held.append((method, params, call_id, future, self._deadline()))
        return future

    def _release(self) -> None:
        """Submit held calls, oldest first, while the connection has room for them."""
        held = self.held
        while held:
            method, params, call_id, future, deadline = held[0]
            if future.done():  # cancelled while held: never sent
                held.popleft()
                continue
            # The server is told the time the call has left, which began when it was made.
            left = None if deadline == float("inf") else max(deadline - self.loop.time(), 0.001)
            try:
                ticket = self.native.call(method, params, call_id, _codec.encode, left, UNSENT_AT_MOST)
            except Exception as error:
                held.popleft()
                future.set_exception(error)
                continue
            if ticket is None:
                return
            held.popleft()
            self._watch(ticket, future, deadline, call_id)

    def _ready(self) -> None:
        try:
            while self.wake_r.recv(4096):
                pass
        except (BlockingIOError, InterruptedError):
            pass
        waiting = self.waiting
        for ticket, status, body, close, error, json_length in self.native.take():
            entry = waiting.pop(ticket, None)
            if entry is None or entry[0].done():
                continue
            future, _, call_id = entry
            if error is not None:
                future.set_exception(error)
            elif call_id is None:
                future.set_result(Reply(status, body, close, json_length))
            elif (response := _native_response(status, body, call_id)) is not None:
                future.set_result(response)  # a result, to this call: nothing to check
            else:
                try:
                    data = _decode(Reply(status, body, close, json_length))
                    response = self.client._in_time(Client._checked(Response(data), {"id": call_id}))
                except (ProtocolError, RPCError, TimeoutError) as failed:
                    future.set_exception(failed)
                else:
                    future.set_result(response)
        if self.held:
            self._release()

    def _expire(self) -> None:
        self.timer = None
        if not self.waiting:
            return
        first = min(deadline for _, deadline, _ in self.waiting.values())
        if first > self.loop.time():
            if first != float("inf"):
                self.timer = self.loop.call_at(first, self._expire)
            return
        # As the Python transport does: a call without its reply in time drops the
        # connection, and every call waiting on it fails.
        late = TimeoutError(f"no reply from {self.client._where} within {self.client.timeout} s")
        self.native.reset(str(late), True)
        self._fail(late)

    def _fail(self, error: Exception) -> None:
        waiting, self.waiting = self.waiting, {}
        held, self.held = self.held, deque()
        futures = [future for future, _, _ in waiting.values()] + [entry[3] for entry in held]
        for future in futures:
            if not future.done():
                future.set_exception(error)
                future.exception()  # retrieved: no "never retrieved" warning

    def __del__(self) -> None:
        # A client dropped without close() (after a failed connection, say): the wake-up
        # socket goes with it quietly, as a Client's socket does.
        wake_r = self.__dict__.get("wake_r")
        if wake_r is not None:
            wake_r.close()

    def close(self, error: Exception) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        try:
            self.loop.remove_reader(self.wake_r.fileno())
        except (RuntimeError, ValueError):  # the loop is closed already
            pass
        self.native.close()  # joins the I/O thread: nothing writes to the pair after this
        self.wake_r.close()
        self._fail(error)
