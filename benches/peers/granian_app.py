# SPDX-License-Identifier: Apache-2.0
"""JSON-RPC 2.0 over HTTP on granian's own interface (RSGI), one worker, one
runtime thread: `POST /` with a request or batch, as UCall takes it.

    python granian_app.py
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import procs  # noqa: E402
from serve import HOST, announce_when_ready, free_port  # noqa: E402

HEADERS = [("content-type", "application/json")]


async def app(scope, proto):
    body = await proto()
    out = procs.handle_jsonrpc(body)
    if out:
        proto.response_bytes(status=200, headers=HEADERS, body=out)
    else:
        proto.response_empty(status=204, headers=[])


if __name__ == "__main__":
    from granian import Granian
    from granian.constants import Interfaces

    port = free_port()
    announce_when_ready(port, "granian RSGI, 1 worker, 1 runtime thread")
    Granian(
        "granian_app:app",
        address=HOST,
        port=port,
        interface=Interfaces.RSGI,
        workers=1,
        runtime_threads=1,
        log_enabled=False,
        working_dir=HERE,
    ).serve()
