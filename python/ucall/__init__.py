# SPDX-License-Identifier: Apache-2.0
"""UCall: plain Python functions as JSON-RPC 2.0 services over HTTP/1.1 and raw TCP.

    from ucall import Server

    server = Server(port=8545)

    @server
    def sum(a: int, b: int) -> int:
        return a + b

    server.run()
"""

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
