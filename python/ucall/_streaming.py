# SPDX-License-Identifier: Apache-2.0
"""Streamed replies of async generator handlers, driven on the server's asyncio loop.

``drive(source, reply)`` sends each item the handler yields through ``reply`` (a
``ucall._ucall.StreamReply``), waiting while the stream's window is full, and returns the
final result (``None`` for an async generator, which cannot return a value). When the
caller has gone, the generator is closed (``aclose()``, so its ``finally`` blocks run) and
the task is cancelled.
"""

from __future__ import annotations

import asyncio
import inspect
from typing import Any

# A full window is checked again after this long, doubling up to the longest wait: the
# reader that drains it is on the other side of a network, milliseconds away.
_FIRST_WAIT = 0.001
_LONGEST_WAIT = 0.05


async def _send(reply: Any, item: Any) -> None:
    wait = _FIRST_WAIT
    while True:
        sent = reply.offer(item)
        if sent:
            return
        if sent is None:
            raise asyncio.CancelledError("the caller has gone")
        await asyncio.sleep(wait)
        wait = min(wait * 2, _LONGEST_WAIT)


async def drive(source: Any, reply: Any) -> Any:
    """Stream ``source`` (an async generator, or an awaitable of one) through ``reply``."""
    if inspect.isawaitable(source):
        source = await source  # async middleware around the handler
    if hasattr(source, "__anext__"):
        try:
            async for item in source:
                await _send(reply, item)
        finally:
            closing = getattr(source, "aclose", None)
            if closing is not None:
                await closing()
        return None
    if hasattr(source, "__next__"):
        try:
            for item in source:
                await _send(reply, item)
        finally:
            closing = getattr(source, "close", None)
            if closing is not None:
                closing()
        return None
    return source
