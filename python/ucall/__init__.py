# SPDX-License-Identifier: Apache-2.0
"""UCall: plain Python functions as JSON-RPC 2.0 services over HTTP/1.1 and raw TCP.

    from ucall import Server

    server = Server(port=8545)

    @server
    def sum(a: int, b: int) -> int:
        return a + b

    server.run()

The submodules the docs name (``ucall.auth``, ``ucall.client``, ``ucall.testing``,
``ucall.posix``, ...) are there after ``import ucall``, loaded when first used.
"""

import importlib
from typing import Any

from ucall._server import Server
from ucall._ucall import Context, __version__
from ucall.exceptions import (
    ConnectError,
    ErrorCode,
    HTTPError,
    ProtocolError,
    RPCError,
    TimeoutError,
    TransportError,
    UCallError,
)

__all__ = [
    "ConnectError",
    "Context",
    "ErrorCode",
    "HTTPError",
    "ProtocolError",
    "RPCError",
    "Server",
    "TimeoutError",
    "TransportError",
    "UCallError",
    "__version__",
]

# Loaded on first use, so `import ucall` stays quick and `ucall.auth.api_key(...)` works.
_SUBMODULES = frozenset({"auth", "cli", "client", "posix", "rich_posix", "rich_uring", "server", "testing", "uring"})


def __getattr__(name: str) -> Any:
    if name in _SUBMODULES:
        return importlib.import_module(f"ucall.{name}")
    raise AttributeError(f"module 'ucall' has no attribute {name!r}")
