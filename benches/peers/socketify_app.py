# SPDX-License-Identifier: Apache-2.0
"""JSON-RPC 2.0 over HTTP on socketify (uWebSockets), one process: `POST /` with a
request or batch, as UCall takes it.

    python socketify_app.py
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from socketify import App  # noqa: E402

import procs  # noqa: E402
from serve import announce_when_ready, free_port  # noqa: E402


async def rpc(res, req):
    body = await res.get_data()
    out = procs.handle_jsonrpc(body.getvalue())
    if out:
        res.write_header("Content-Type", "application/json")
        res.end(out)
    else:
        res.write_status(204).end_without_body()


if __name__ == "__main__":
    port = free_port()
    app = App()
    app.post("/", rpc)
    announce_when_ready(port, "socketify, 1 process")
    app.listen(port, lambda config: None)
    app.run()
