# SPDX-License-Identifier: Apache-2.0
"""Every exception UCall raises, in one tree::

    UCallError
    ├── RPCError            a JSON-RPC error object: raise it in a handler to send it;
    │   │                   clients raise it when the reply is an error
    │   └── HTTPError       one that also names the HTTP status to answer with
    └── TransportError      the call could not be completed (also an OSError)
        ├── ConnectError    no connection could be made
        ├── ProtocolError   the server's bytes are not a valid reply
        └── TimeoutError    no reply in time (also the built-in TimeoutError)

The numeric codes come from the core's one table (``ErrorCode``); they are never
restated here.
"""

from __future__ import annotations

import builtins
import enum
import operator
from typing import Any

from ucall import _ucall

__all__ = [
    "ConnectError",
    "ErrorCode",
    "HTTPError",
    "ProtocolError",
    "RPCError",
    "TimeoutError",
    "TransportError",
    "UCallError",
]

#: The pre-defined JSON-RPC 2.0 error codes (specification §5.1), e.g. ``ErrorCode.INVALID_PARAMS``.
ErrorCode = enum.IntEnum("ErrorCode", dict(_ucall.ERROR_CODES), module=__name__)  # type: ignore[misc]
ErrorCode.__doc__ = "The pre-defined JSON-RPC 2.0 error codes (specification §5.1)."


class UCallError(Exception):
    """Base class of every UCall exception."""


class RPCError(UCallError):
    """A JSON-RPC error object: ``code``, ``message`` and optional ``data``.

    Raised in a handler, it is sent as that call's error. Clients raise it for an error
    reply. Server-defined codes belong in ``-32099..-32000``; ``RPCError("message")``
    alone is a server error with the highest of them.
    """

    def __init__(self, code: int | str, message: str = "", data: Any = None) -> None:
        given: Any = code
        if isinstance(given, str) and not message:
            given, message = _ucall.SERVER_ERROR_MAX, given
        try:
            if isinstance(given, bool):
                raise TypeError
            number = operator.index(given)  # an int, or an integer type such as numpy's
        except TypeError:
            raise TypeError(f"an RPCError code is an integer, not {code!r}") from None
        super().__init__(number, message, data)
        self.code = number
        self.message = str(message)
        self.data = data

    def __str__(self) -> str:
        text = f"{self.message} ({self.code})"
        return text if self.data is None else f"{text}: {self.data!r}"

    def __repr__(self) -> str:
        return f"RPCError(code={self.code}, message={self.message!r}, data={self.data!r})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, RPCError):
            return NotImplemented
        return (self.code, self.message, self.data) == (other.code, other.message, other.data)

    __hash__ = None  # type: ignore[assignment]


class HTTPError(RPCError):
    """An error that answers HTTP with ``status`` (a 4xx or 5xx), e.g.
    ``raise HTTPError(404, "no such user")``.

    A REST-style call (``GET /user?id=7``) and a single JSON-RPC call over HTTP answer
    with that status, the JSON-RPC error in the body; a batch keeps 200, and raw TCP and
    WebSocket send only the JSON-RPC error. Its ``code`` comes from the core's one table
    of codes and statuses: ``-32602`` (invalid params) for 400, ``-32603`` (internal
    error) for 500, ``-32000`` (server error) for the others; ``code=`` picks another.
    """

    def __init__(self, status: int, message: str = "", data: Any = None, *, code: int | None = None) -> None:
        if isinstance(status, bool) or not isinstance(status, int) or not 400 <= status <= 599:
            raise ValueError(f"an HTTPError status is an error status from 400 to 599, not {status!r}")
        super().__init__(_ucall.code_for_http_status(status) if code is None else code, message, data)
        self.status = int(status)

    def __str__(self) -> str:
        return f"HTTP {self.status}: {super().__str__()}"

    def __repr__(self) -> str:
        return f"HTTPError(status={self.status}, code={self.code}, message={self.message!r}, data={self.data!r})"


class TransportError(UCallError, OSError):
    """The call could not be completed: connection refused or lost, bad reply, time-out."""


class ConnectError(TransportError):
    """No connection could be made to the server."""


class ProtocolError(TransportError):
    """The server sent bytes that are not a valid HTTP or JSON-RPC reply."""


class TimeoutError(TransportError, builtins.TimeoutError):  # noqa: A001
    """No reply within the client's time-out."""
