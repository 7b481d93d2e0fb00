# SPDX-License-Identifier: Apache-2.0
"""UCall's published `ucall.posix.Server`: the portable (epoll/kqueue) engine.

Every server converts rich types (bytes, numpy arrays, PIL images) from type hints, so
``ucall.posix`` and ``ucall.rich_posix`` are the same server.
"""

from ucall._published import PosixServer as Server

__all__ = ["Server"]
