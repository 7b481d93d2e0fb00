# SPDX-License-Identifier: Apache-2.0
"""Middleware: functions run around every call of a server.

A middleware is ``mw(ctx, call_next)``: ``ctx`` is the call's ``ucall.Context`` (its
``method`` and ``params`` too), ``call_next()`` runs the rest of the chain and returns the
result. It rejects a call by raising (``ucall.HTTPError(401, ...)``), or changes the
result by returning another. An ``async def`` middleware awaits ``call_next()``; a plain
one around an ``async def`` handler (or an async middleware) gets an awaitable from it.

With ``rate_limit_key="middleware"`` a middleware names the call's client for the rate
limits with ``ctx.limit_by(key)``; a call it does not key is limited by its peer address
as the chain hands it to its procedure.
"""

from __future__ import annotations

import inspect
from typing import Any, Callable, Sequence

Middleware = Callable[[Any, Callable[[], Any]], Any]


def is_async(func: Callable[..., Any]) -> bool:
    # An object whose __call__ is a coroutine function is async too (not a callable check).
    return inspect.iscoroutinefunction(func) or inspect.iscoroutinefunction(getattr(func, "__call__", None))  # noqa: B004


def chain(middlewares: Sequence[Middleware], keyed: bool = False) -> Callable[..., Any] | None:
    """``run(ctx, func, args, kwargs)``, running ``func(*args, **kwargs)`` inside
    ``middlewares`` (the first outermost); ``None`` without middleware. ``func`` is ``None``
    when the params did not bind: ``args`` is then the error, raised where ``func`` would run.
    ``keyed``: the middleware keys the rate limits (a call it left unkeyed is admitted
    by its peer address before ``func`` runs)."""
    if not middlewares:
        return None
    layers = tuple((m, is_async(m)) for m in middlewares)
    depth = len(layers)

    def run(ctx: Any, func: Callable[..., Any] | None, args: Any, kwargs: dict[str, Any] | None) -> Any:
        def at(i: int) -> Any:
            if i == depth:
                if func is None:
                    raise args
                if keyed:
                    ctx._limit_by_peer()
                return func(*args, **kwargs) if kwargs else func(*args)
            middleware, asynchronous = layers[i]
            if asynchronous:

                async def call_next() -> Any:
                    result = at(i + 1)
                    return await result if inspect.isawaitable(result) else result

                return middleware(ctx, call_next)
            return middleware(ctx, lambda: at(i + 1))

        return at(0)

    return run
