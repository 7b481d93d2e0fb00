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


# Responses whose body is still arriving. socketify keeps only a weak handle to each: an
# object collected before its last chunk crashes the process (seen with res.get_data()
# under 32 connections), so hold them here until they are answered.
PENDING: set = set()


def rpc(res, req):
    chunks: list[bytes] = []
    PENDING.add(res)

    def on_data(res, chunk, is_end):
        if chunk is not None:
            chunks.append(chunk)
        if is_end:
            PENDING.discard(res)
            out = procs.handle_jsonrpc(b"".join(chunks))
            if out:
                res.write_header("Content-Type", "application/json")
                res.end(out)
            else:
                res.write_status(204).end_without_body()

    res.on_aborted(lambda res: PENDING.discard(res))
    res.on_data(on_data)


if __name__ == "__main__":
    port = free_port()
    app = App()
    app.post("/", rpc)
    announce_when_ready(port, "socketify, 1 process")
    app.listen(port, lambda config: None)
    app.run()
