# SPDX-License-Identifier: Apache-2.0
"""Streamed items carrying numpy arrays (docs/streaming.md, "Binary items"): how fast a
generator's 1.6 MB float32 frames reach `Client.stream`, as attachments and as base64.

    .venv/bin/python benches/stream_items.py [--items 200] [--size 1600000] [--transports http,tcp,ws]

The server (`Server(threads=1)` with `frames(x, n)` yielding `x` n times) runs in a process
of its own on CPU 0, the client in this one on CPU 1 (where there are two). Each row is
one stream of `--items` items after one of 20 to warm up: items/s, and the CPU time per
item of the server process and of this one (user + system, all threads). `attachments` is
`Client(binary=None)` sending the array param as an attachment, so the frames come back as
attachments; `base64` is `binary=False` (plain JSON, each frame base64 of its `.npy`
form, decoded here by `Response(...).numpy`). Prints a Markdown table. Every process it
starts is stopped by its PID.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
from ucallbench.processes import proc_cpu_seconds, spawn, stop_group  # benches/ is on the path

ROOT = Path(__file__).resolve().parent.parent
SERVER = """
import sys
import numpy as np
from ucall import Server

server = Server(host="127.0.0.1", port=0, threads=1)


@server
def frames(x: np.ndarray, n: int):
    for _ in range(n):
        yield x


server.run(ready=lambda s: print(f"listening on 127.0.0.1:{s.port}", flush=True))
"""


def own_cpu_seconds() -> float:
    times = os.times()
    return times.user + times.system


def run_stream(client, x: np.ndarray, items: int, decode: bool) -> int:
    from ucall.client import Response

    got = 0
    for item in client.stream("frames", x, items):
        if decode:  # base64 .npy, as a plain JSON caller has it
            item = Response({"jsonrpc": "2.0", "id": 1, "result": item}).numpy
        got += int(item.shape == x.shape)
    return got


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=200)
    parser.add_argument("--size", type=int, default=1_600_000, help="bytes of float32 per item")
    parser.add_argument("--transports", default="http,tcp,ws")
    args = parser.parse_args()
    two_cores = len(os.sched_getaffinity(0)) >= 2
    pin = ["taskset", "-c", "0"] if two_cores else []
    server = spawn(
        [*pin, sys.executable, "-c", SERVER],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT / "python")},
    )
    try:
        line = server.stdout.readline() if server.stdout else ""
        if "listening on" not in line:
            raise SystemExit(f"the server did not start: {line!r}")
        port = int(line.rsplit(":", 1)[1])
        if two_cores:
            os.sched_setaffinity(0, {1})
        sys.path.insert(0, str(ROOT / "python"))
        from ucall.client import Client

        x = np.random.default_rng(0).standard_normal(args.size // 4).astype(np.float32)
        print(f"{args.items} items of {x.nbytes:,} bytes (float32) per stream; server on CPU 0, client on CPU 1")
        print("| transport | frames as | items/s | MB/s | server CPU µs/item | client CPU µs/item |")
        print("|---|---|---:|---:|---:|---:|")
        for transport in [t.strip() for t in args.transports.split(",") if t.strip()]:
            for form, binary in (("attachments", None), ("base64", False)):
                client = Client(f"{transport}://127.0.0.1:{port}", binary=binary)
                run_stream(client, x, 20, binary is False)  # warm-up
                server_before, client_before = proc_cpu_seconds(server.pid) or 0.0, own_cpu_seconds()
                started = time.perf_counter()
                got = run_stream(client, x, args.items, binary is False)
                elapsed = time.perf_counter() - started
                server_cpu = (proc_cpu_seconds(server.pid) or 0.0) - server_before
                client_cpu = own_cpu_seconds() - client_before
                client.close()
                if got != args.items:
                    raise SystemExit(f"{transport} {form}: {got} of {args.items} items came back as arrays")
                print(
                    f"| {transport} | {form} | {args.items / elapsed:,.0f} | {x.nbytes * args.items / elapsed / 1e6:,.0f}"
                    f" | {server_cpu * 1e6 / args.items:,.0f} | {client_cpu * 1e6 / args.items:,.0f} |",
                    flush=True,
                )
    finally:
        stop_group(server, grace=5.0)


if __name__ == "__main__":
    main()
