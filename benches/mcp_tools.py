# SPDX-License-Identifier: Apache-2.0
"""MCP tools/call over Streamable HTTP: UCall beside the official Python SDK's own server.

The same function, `add(a, b)`, served three ways and loaded by ucall-load over HTTP
keep-alive for `--seconds` each, `--connections` connections (32 by default), one request in
flight on each:

- UCall (Python, `threads=1`, `mcp=True`): a plain JSON-RPC call to `add` on `POST /`;
- the same server: `tools/call` of `add` on `POST /mcp`;
- the MCP SDK's `MCPServer` (stateless, JSON replies) under one uvicorn process, from
  benches/.venv-peers (benches/setup_peers.sh): the same `tools/call`.

Both MCP rows send the same request: a 2025-06-18 `tools/call` with `MCP-Protocol-Version`
and the `Accept` header the transport asks for. The figures are calls/s and the server
process's CPU time (user + system, from /proc) per answered call; the issue's goals are
at least 50x the SDK's calls/s and at most 1.5x the plain call's CPU per call.

    python benches/mcp_tools.py [--seconds 5] [--connections 32] [--quick] [--append FILE]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from ucallbench.config import PEERS_PY as PEERS_PY_RELATIVE
from ucallbench.config import ROOT
from ucallbench.serving import cpu_per_call, ensure_load_bin, free_port, python_env, serving

PEERS_PY = ROOT / PEERS_PY_RELATIVE

UCALL_APP = '''
from ucall import Server

server = Server(threads=1, mcp=True)


@server
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b
'''
SDK_APP = '''
import sys

import uvicorn
from mcp.server import MCPServer

mcp = MCPServer("bench")


@mcp.tool()
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


app = mcp.streamable_http_app(stateless_http=True, json_response=True)
uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning", access_log=False)
'''
PLAIN_CALL = '{"jsonrpc":"2.0","method":"add","params":{"a":1,"b":2},"id":1}'
TOOL_CALL = '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"add","arguments":{"a":1,"b":2}}}'
MCP_HEADERS = [
    "--header",
    "Accept: application/json, text/event-stream",
    "--header",
    "MCP-Protocol-Version: 2025-06-18",
]


def table(rows: list[dict[str, Any]], seconds: float, connections: int, sdk: str) -> str:
    lines = [
        "## MCP tools/call",
        "",
        f"`add(a, b)` over HTTP keep-alive, {connections} connections of `ucall-load`, {seconds:g} s per row "
        "after 1 s of warm-up (benches/mcp_tools.py); CPU is the server process's (user + system) per answered call. "
        f"UCall: the Python server, `threads=1`, `mcp=True`; the MCP SDK: `MCPServer` (stateless, JSON replies) "
        f"under one uvicorn process: {sdk}.",
        "",
        "| server | request | calls/s | server CPU µs/call | errors |",
        "|---|---|---:|---:|---:|",
    ]
    for row in rows:
        cpu = "—" if row["cpu_us_per_call"] is None else f"{row['cpu_us_per_call']:.2f}"
        lines.append(f"| {row['server']} | {row['request']} | {row['calls_per_s']:,} | {cpu} | {row['errors']} |")
    by = {row["key"]: row for row in rows}
    lines.append("")
    if "ucall-mcp" in by and "sdk-mcp" in by and by["sdk-mcp"]["calls_per_s"]:
        ratio = by["ucall-mcp"]["calls_per_s"] / by["sdk-mcp"]["calls_per_s"]
        lines.append(f"- UCall's tools/call: {ratio:.1f}x the MCP SDK server's calls/s (goal: at least 50x).")
    plain, tool = by.get("ucall-plain", {}), by.get("ucall-mcp", {})
    if plain.get("cpu_us_per_call") and tool.get("cpu_us_per_call"):
        ratio = tool["cpu_us_per_call"] / plain["cpu_us_per_call"]
        lines.append(
            f"- UCall's tools/call: {ratio:.2f}x the server CPU of its plain JSON-RPC call (goal: at most 1.5x)."
        )
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=5.0, help="measured seconds per row")
    parser.add_argument("--connections", type=int, default=32)
    parser.add_argument("--quick", action="store_true", help="1 s per row: a bounded check that it all runs")
    parser.add_argument("--append", type=Path, help="append the table to this markdown file")
    args = parser.parse_args()
    ensure_load_bin()
    seconds = 1.0 if args.quick else args.seconds
    connections = ["--connections", str(args.connections)]
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        (Path(folder) / "mcp_app.py").write_text(UCALL_APP)
        port = free_port()
        command = [sys.executable, "-m", "ucall", "serve", "mcp_app:server", "--port", str(port)]
        with serving(command, port, python_env(folder)) as server:
            plain = [*connections, "--body-json", PLAIN_CALL, "--expect", '"result":3']
            row = cpu_per_call(server, port, "UCall (Python)", plain, seconds)
            rows.append({**row, "key": "ucall-plain", "request": "JSON-RPC `add` on `/`"})
            tool = [*connections, "--path", "/mcp", *MCP_HEADERS, "--body-json", TOOL_CALL]
            row = cpu_per_call(
                server, port, "UCall (Python)", [*tool, "--expect", '"structuredContent":{"result":3}'], seconds
            )
            rows.append({**row, "key": "ucall-mcp", "request": "MCP `tools/call` on `/mcp`"})
        sdk = "ran"
        probe = (
            subprocess.run([str(PEERS_PY), "-c", "import mcp, uvicorn"], capture_output=True)
            if PEERS_PY.exists()
            else None
        )
        if probe is None or probe.returncode != 0:
            sdk = "skipped: benches/.venv-peers has no `mcp` (benches/setup_peers.sh)"
            print(f"MCP SDK server {sdk}", file=sys.stderr)
        else:
            app = Path(folder) / "sdk_app.py"
            app.write_text(SDK_APP)
            port = free_port()
            with serving([str(PEERS_PY), str(app), str(port)], port) as server:
                # The SDK writes the structured result with a space after the colon.
                tool = [*connections, "--path", "/mcp", *MCP_HEADERS, "--body-json", TOOL_CALL, "--expect", '"result"']
                row = cpu_per_call(server, port, "MCP SDK `MCPServer`", tool, seconds)
                rows.append({**row, "key": "sdk-mcp", "request": "MCP `tools/call` on `/mcp`"})
    text = table(rows, seconds, args.connections, sdk)
    print(text)
    if args.append:
        with args.append.open("a") as out:
            out.write("\n" + text)
    return 1 if any(row["errors"] or row["cpu_us_per_call"] is None for row in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
