# SPDX-License-Identifier: Apache-2.0
"""Ready-made authentication middleware: an API key in a header, or a bearer token.

    import ucall
    from ucall import auth

    server = ucall.Server()
    server.middleware(auth.api_key("s3cret"))           # X-API-Key: s3cret
    # or: server.middleware(auth.bearer("t0ken"))        # Authorization: Bearer t0ken

A call without the credential is refused with ``HTTPError(401)``, one with a wrong
credential with ``HTTPError(403)`` (over HTTP, that status with the JSON-RPC error in the
body). Keys are compared in constant time (``hmac.compare_digest``), against every key
given, so the time taken says nothing of how much of a key matched, nor which. Headers
come with HTTP calls and, for WebSocket, with the upgrade request; raw TCP has none, so
its calls are refused unless their method is in ``public``.
"""

from __future__ import annotations

import hmac
from typing import Any, Callable, Iterable

from ucall.exceptions import HTTPError

__all__ = ["api_key", "bearer"]


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


def api_key(*keys: str, header: str = "X-API-Key", public: Iterable[str] = ()) -> Callable[[Any, Any], Any]:
    """Middleware that lets a call through only with one of ``keys`` in ``header``; calls
    of the methods in ``public`` need none."""
    valid = _keys(keys, "api_key")
    name = header.lower()
    free = frozenset(public)

    def check_api_key(ctx: Any, call_next: Callable[[], Any]) -> Any:
        if ctx.method not in free:
            given = ctx.headers.get(name)
            if given is None:
                raise HTTPError(401, f"an API key is required in the {header} header")
            if not _matches(given, valid):
                raise HTTPError(403, "the API key is not valid")
        return call_next()

    return check_api_key


def bearer(*tokens: str, public: Iterable[str] = ()) -> Callable[[Any, Any], Any]:
    """Middleware that lets a call through only with ``Authorization: Bearer <token>`` for
    one of ``tokens`` (RFC 6750 §2.1); calls of the methods in ``public`` need none."""
    valid = _keys(tokens, "bearer")
    free = frozenset(public)

    def check_bearer(ctx: Any, call_next: Callable[[], Any]) -> Any:
        if ctx.method not in free:
            scheme, _, token = ctx.headers.get("authorization", "").partition(" ")
            if scheme.lower() != "bearer" or not token.strip():
                raise HTTPError(401, "a bearer token is required in the Authorization header")
            if not _matches(token.strip(), valid):
                raise HTTPError(403, "the bearer token is not valid")
        return call_next()

    return check_bearer
