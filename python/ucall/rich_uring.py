# SPDX-License-Identifier: Apache-2.0
"""UCall's published `ucall.rich_uring.Server`: io_uring where available, else the portable engine.

Every server converts rich types (bytes, numpy arrays, PIL images) from type hints, so
``ucall.uring`` and ``ucall.rich_uring`` are the same server.
"""

from ucall._published import UringServer as Server

__all__ = ["Server"]
