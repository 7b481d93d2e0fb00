# SPDX-License-Identifier: Apache-2.0
"""UCall's newer ``ucall.server.Server``, as its README writes it::

    from ucall.server import Server

    server = Server(uring_if_possible=True, port=8545)

    @server.get("/sum")
    def sum(a: int, b: int) -> int:
        return a + b

    server.run()

It takes the published constructor (``hostname``, ``port``, ``ssl_pk``, ``ssl_certs``, ...)
and chooses the engine from ``uring_if_possible``: io_uring where this build and kernel have
it, else the portable engine (epoll on Linux, which ``epoll_if_possible`` asked for).
"""

from __future__ import annotations

from typing import Any, Callable, TypeVar

from ucall._published import PublishedServer

F = TypeVar("F", bound=Callable[..., Any])

__all__ = ["Server"]


class Server(PublishedServer):
    """A server on io_uring where possible (``uring_if_possible``), else the portable engine."""

    def __init__(self, uring_if_possible: bool = True, epoll_if_possible: bool = False, **kwargs: Any) -> None:
        # epoll is what the portable engine uses on Linux: the flag has nothing left to choose.
        del epoll_if_possible
        self._engine = "auto" if uring_if_possible else "poll"
        super().__init__(**kwargs)

    def get(self, path: str) -> Callable[[F], F]:
        """Register a function as the procedure named by ``path`` (``"/sum"``: ``sum``).

        It answers ``GET /sum?a=1&b=2`` as well as JSON-RPC calls of ``sum``.
        """
        name = path.strip("/")
        if not name or "/" in name:
            raise ValueError(f"{path!r}: the path of a procedure is one segment, as in '/sum'")
        return self.method(name)
