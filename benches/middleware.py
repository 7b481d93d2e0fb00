# SPDX-License-Identifier: Apache-2.0
"""What one Python middleware costs per call (make bench-middleware; make bench appends
its table to the brief).

The same `sum` procedure is served without middleware, then with one pass-through
middleware (`return call_next()`), each loaded by ucall-load over HTTP keep-alive for
`--seconds`. The figure is the server's CPU time (user + system, from /proc) per answered
call: it does not depend on how fast the client is. FastAPI (uvicorn) gets the same pair
(no middleware, then one `@app.middleware("http")` that awaits `call_next`) when its
environment exists (benches/.venv-peers, made by benches/setup_peers.sh).

    python benches/middleware.py [--seconds 5] [--connections 8] [--quick] [--append FILE] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

from ucallbench.config import PEERS_PY as PEERS_PY_RELATIVE
from ucallbench.config import ROOT
from ucallbench.serving import ensure_load_bin, free_port, measure, python_env

PEERS_PY = ROOT / PEERS_PY_RELATIVE

UCALL_APP = '''
from ucall import Server

server = Server(threads=1)

@server
def sum(a: int, b: int) -> int:
    return a + b
'''
UCALL_MIDDLEWARE = '''
@server.middleware
def passthrough(ctx, call_next):
    return call_next()
'''
FASTAPI_APP = '''
import sys
import uvicorn
from fastapi import Body, FastAPI

app = FastAPI()

@app.post("/sum")
async def sum_(a: int = Body(), b: int = Body()) -> int:
    return a + b
'''
FASTAPI_MIDDLEWARE = '''
@app.middleware("http")
async def passthrough(request, call_next):
    return await call_next(request)
'''
FASTAPI_RUN = '''
uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning", access_log=False)
'''


def extra_costs(rows: list[dict[str, Any]]) -> list[str]:
    """One line per server: what its one middleware adds to its CPU time per call."""
    lines = []
    for base, with_one in zip(rows[::2], rows[1::2]):
        if base["cpu_us_per_call"] and with_one["cpu_us_per_call"]:
            extra = with_one["cpu_us_per_call"] - base["cpu_us_per_call"]
            share = extra / base["cpu_us_per_call"] * 100
            lines.append(f"one middleware on {base['server']}: {extra:+.2f} µs of server CPU per call ({share:+.0f} %)")
    return lines


def table(rows: list[dict[str, Any]], seconds: float, connections: int, fastapi: str) -> str:
    """The markdown section `make bench` appends to its brief."""
    lines = [
        "## One Python middleware",
        "",
        f"`sum(a, b)` over HTTP keep-alive, {connections} connections of `ucall-load`, {seconds:g} s per row "
        "after 1 s of warm-up; CPU is the server process's (user + system) per answered call. "
        f"UCall: `threads=1`; FastAPI: one uvicorn process. FastAPI: {fastapi}.",
        "",
        "| server | calls/s | server CPU µs/call | errors |",
        "|---|---:|---:|---:|",
    ]
    for row in rows:
        cpu = "—" if row["cpu_us_per_call"] is None else f"{row['cpu_us_per_call']:.2f}"
        lines.append(f"| {row['server']} | {row['calls_per_s']:,} | {cpu} | {row['errors']} |")
    lines += [""] + [f"- {line}" for line in extra_costs(rows)] + [""]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=5.0, help="measured seconds per row")
    parser.add_argument("--connections", type=int, default=8)
    parser.add_argument("--quick", action="store_true", help="1 s per row: a bounded check that it all runs")
    parser.add_argument("--append", type=Path, help="append the table to this markdown file")
    parser.add_argument("--json", type=Path, help="also write the rows here")
    args = parser.parse_args()
    ensure_load_bin()
    seconds = 1.0 if args.quick else args.seconds
    connections = ["--connections", str(args.connections)]
    fastapi = "ran" if PEERS_PY.exists() else f"skipped, {PEERS_PY.relative_to(ROOT)} missing (benches/setup_peers.sh)"
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        for label, code in (("UCall (Python)", UCALL_APP), ("UCall (Python), one middleware", UCALL_APP + UCALL_MIDDLEWARE)):
            app = Path(folder) / "app.py"
            app.write_text(code)
            port = free_port()
            command = [sys.executable, "-m", "ucall", "serve", "app:server", "--port", str(port)]
            env = python_env(folder)
            body = '{"jsonrpc":"2.0","method":"sum","params":{"a":1,"b":2},"id":1}'
            load = [*connections, "--body-json", body, "--expect", '"result":3']
            rows.append(measure(label, command, port, load, seconds, env))
        if PEERS_PY.exists():
            for label, code in (("FastAPI", FASTAPI_APP), ("FastAPI, one middleware", FASTAPI_APP + FASTAPI_MIDDLEWARE)):
                app = Path(folder) / "fastapi_mw.py"
                app.write_text(code + FASTAPI_RUN)
                port = free_port()
                load = [*connections, "--path", "/sum", "--body-json", '{"a":1,"b":2}', "--expect", "3"]
                rows.append(measure(label, [str(PEERS_PY), str(app), str(port)], port, load, seconds))
        else:
            print(f"FastAPI skipped: {PEERS_PY} missing (benches/setup_peers.sh makes it)", file=sys.stderr)
    text = table(rows, seconds, args.connections, fastapi)
    print(text)
    if args.append:
        with args.append.open("a") as out:
            out.write("\n" + text)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2) + "\n")
    return 1 if any(row["errors"] or row["cpu_us_per_call"] is None for row in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
