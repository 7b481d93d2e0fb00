# SPDX-License-Identifier: Apache-2.0
"""Ready-made authentication middleware: an API key in a header, or a bearer token.

    import ucall
    from ucall import auth

    server = ucall.Server()
    server.middleware(auth.api_key("s3cret"))           # X-API-Key: s3cret
    # or: server.middleware(auth.bearer("t0ken"))        # Authorization: Bearer t0ken

A call without the credential is refused with ``HTTPError(401)``, one with a wrong
credential with ``HTTPError(403)`` (over HTTP, that status with the JSON-RPC error in the
body); either refusal's ``data`` says ``{"executed": false}``, on every transport. Keys are
compared in constant time (``hmac.compare_digest``), against every key given, so the time
taken says nothing of how much of a key matched, nor which.

Headers come with HTTP calls and, for WebSocket, with the upgrade request. A browser
cannot set headers on a WebSocket, so there the credential may travel in the one header it
does send, ``Sec-WebSocket-Protocol`` (as Kubernetes does), as a subprotocol beside
``ucall``, which the server selects::

    new WebSocket(url, ["ucall", "ucall.bearer." + base64url(token)])    // auth.bearer
    new WebSocket(url, ["ucall", "ucall.api-key." + base64url(key)])     // auth.api_key

(base64url without ``=`` padding, RFC 4648 §5: a subprotocol is an HTTP token). Raw TCP
has no headers, so its calls are refused unless their method is in ``public``.
"""

from __future__ import annotations

import base64
import binascii
import hmac
from typing import Any, Callable, Iterable

from ucall.exceptions import HTTPError

__all__ = ["api_key", "bearer"]

#: The refusals' data: the call did not run, so a client may send it again with a credential.
_NOT_RUN = {"executed": False}


def _matches(given: str, keys: tuple[bytes, ...]) -> bool:
    offered = given.encode()
    found = False
    for key in keys:  # every key, whatever matched, so the time depends on none of them
        found |= hmac.compare_digest(offered, key)
    return found


def _keys(keys: Iterable[str], what: str) -> tuple[bytes, ...]:
    encoded = tuple(k.encode() for k in keys)
    if not encoded or not all(encoded):
        raise ValueError(f"{what}: give at least one non-empty key")
    return encoded


def _from_subprotocols(ctx: Any, kind: str) -> str | None:
    """The credential a browser's WebSocket offered as the subprotocol
    ``ucall.<kind>.<base64url>``, decoded; ``None`` when there is none (or it is not
    base64url of UTF-8 text)."""
    prefix = f"ucall.{kind}."
    for offered in ctx.headers.get("sec-websocket-protocol", "").split(","):
        offered = offered.strip()
        if offered.startswith(prefix):
            encoded = offered[len(prefix) :]
            try:
                return base64.urlsafe_b64decode(encoded + "=" * (-len(encoded) % 4)).decode()
            except (binascii.Error, UnicodeDecodeError):
                return None
    return None


def _missing(ctx: Any, what: str, where: str, kind: str) -> HTTPError:
    if ctx.transport == "tcp":
        why = (
            f"{what} is required, and raw TCP carries no headers: call over HTTP or WebSocket "
            f"with {where}, or serve this method as public"
        )
    elif ctx.transport == "websocket":
        why = f"{what} is required in {where} of the upgrade, or from a browser as the subprotocol ucall.{kind}.<base64url>"
    else:
        why = f"{what} is required in {where}"
    return HTTPError(401, why, _NOT_RUN)


def api_key(*keys: str, header: str = "X-API-Key", public: Iterable[str] = ()) -> Callable[[Any, Any], Any]:
    """Middleware that lets a call through only with one of ``keys`` in ``header`` (or, on
    WebSocket, the subprotocol ``ucall.api-key.<base64url key>``); calls of the methods in
    ``public`` need none."""
    valid = _keys(keys, "api_key")
    name = header.lower()
    free = frozenset(public)

    def check_api_key(ctx: Any, call_next: Callable[[], Any]) -> Any:
        if ctx.method not in free:
            given = ctx.headers.get(name)
            if given is None and ctx.transport == "websocket":
                given = _from_subprotocols(ctx, "api-key")
            if given is None:
                raise _missing(ctx, "an API key", f"the {header} header", "api-key")
            if not _matches(given, valid):
                raise HTTPError(403, "the API key is not valid", _NOT_RUN)
        return call_next()

    return check_api_key


def bearer(*tokens: str, public: Iterable[str] = ()) -> Callable[[Any, Any], Any]:
    """Middleware that lets a call through only with ``Authorization: Bearer <token>`` for
    one of ``tokens`` (RFC 6750 §2.1; on WebSocket, or the subprotocol
    ``ucall.bearer.<base64url token>``); calls of the methods in ``public`` need none."""
    valid = _keys(tokens, "bearer")
    free = frozenset(public)

    def check_bearer(ctx: Any, call_next: Callable[[], Any]) -> Any:
        if ctx.method not in free:
            scheme, _, token = ctx.headers.get("authorization", "").partition(" ")
            given: str | None = token.strip() if scheme.lower() == "bearer" and token.strip() else None
            if given is None and ctx.transport == "websocket":
                given = _from_subprotocols(ctx, "bearer")
            if given is None:
                raise _missing(ctx, "a bearer token", "the Authorization header", "bearer")
            if not _matches(given, valid):
                raise HTTPError(403, "the bearer token is not valid", _NOT_RUN)
        return call_next()

    return check_bearer
