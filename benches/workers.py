# SPDX-License-Identifier: Apache-2.0
"""How worker processes scale a Python server whose handler computes (make bench-workers).

A handler that computes for about 100 µs (`spin`, holding the GIL) is served by
`ucall serve --workers 1`, then `--workers 2`, each measured with ucall-load over
HTTP keep-alive. One process runs one handler at a time, so it tops out near 10,000
calls/s; two processes on two cores should answer close to twice that. The goal: two
workers answer at least 1.6x the calls per second of one.

    python benches/workers.py [--seconds 10] [--connections 16] [--json FILE]
                              [--append FILE [--goals-are-reported]]

Exits 1 when the goal is missed, unless --goals-are-reported (make bench, whose brief
shows it).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
LOAD_BIN = ROOT / "target" / "release" / "ucall-load"
GOAL = 1.6
APP = '''
import time
from ucall import Server

server = Server(threads=1)

@server
def spin(us: int) -> int:
    """Compute (hold the GIL) for about `us` microseconds."""
    end = time.perf_counter_ns() + us * 1000
    turns = 0
    while time.perf_counter_ns() < end:
        turns += 1
    return turns
'''


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def measure(workers: int, seconds: float, connections: int, folder: Path) -> dict[str, Any]:
    port = free_port()
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT / "python"), str(folder)]))
    command = [sys.executable, "-m", "ucall", "serve", "app:server", "--port", str(port), "--workers", str(workers)]
    server = subprocess.Popen(command, cwd=folder, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        # The supervisor's start-up line, on stderr, once every worker serves.
        line = server.stderr.readline() if server.stderr else ""
        if not line.startswith("ucall: listening on"):
            raise RuntimeError(f"the server did not start: {line}{server.stderr.read() if server.stderr else ''}")
        body = '{"jsonrpc":"2.0","method":"spin","params":{"us":100},"id":1}'
        load = subprocess.run(
            [str(LOAD_BIN), "--addr", f"127.0.0.1:{port}", "--connections", str(connections), "--threads", "1"]
            + ["--duration", str(seconds), "--warmup", "1", "--body-json", body, "--expect", '"result"', "--json"],
            capture_output=True,
            text=True,
            timeout=seconds + 60,
            check=True,
        )
        report = json.loads(load.stdout)
        return {
            "workers": workers,
            "calls_per_s": round(report["calls_per_s"]),
            "p50_us": report["latency_us"]["p50"],
            "p99_us": report["latency_us"]["p99"],
            "errors": report["errors"],
            "client_cpu_percent": report["client_cpu_percent"],
        }
    finally:
        server.send_signal(signal.SIGTERM)
        try:
            server.wait(30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait(5)
        for stream in (server.stdout, server.stderr):
            if stream:
                stream.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=10)
    parser.add_argument("--connections", type=int, default=16)
    parser.add_argument("--json", type=Path, help="also write the results here")
    parser.add_argument("--append", type=Path, help="add the table to this Markdown file")
    parser.add_argument("--goals-are-reported", action="store_true", help="exit 0 when the goal is missed")
    args = parser.parse_args()
    if not LOAD_BIN.exists():
        print(f"{LOAD_BIN} is missing: cargo build --release -p ucall-bench --bin ucall-load", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="ucall-workers-") as folder:
        (Path(folder) / "app.py").write_text(APP)
        rows = []
        for workers in (1, 2):
            rows.append(measure(workers, args.seconds, args.connections, Path(folder)))
            time.sleep(0.5)
    ratio = rows[1]["calls_per_s"] / max(rows[0]["calls_per_s"], 1)
    met = ratio >= GOAL and all(row["errors"] == 0 for row in rows)
    lines = [
        f"A handler computing 100 µs (`benches/workers.py`), `ucall serve --workers 1` then `--workers 2`, "
        f"{args.connections} connections, {args.seconds:g} s each, {os.cpu_count()} CPUs.",
        "",
        "| workers | calls/s | p50 µs | p99 µs | errors | client CPU % |",
        "|--------:|--------:|-------:|-------:|-------:|-------------:|",
    ]
    for row in rows:
        lines.append(
            f"| {row['workers']} | {row['calls_per_s']} | {row['p50_us']:.0f} | {row['p99_us']:.0f} | "
            f"{row['errors']} | {row['client_cpu_percent']:.0f} |"
        )
    lines += ["", f"2 workers / 1 worker: {ratio:.2f}x (goal >= {GOAL}x): {'met' if met else 'NOT met'}"]
    print("\n".join(lines))
    if args.append:
        with args.append.open("a") as brief:
            brief.write("\n### Worker processes (benches/workers.py)\n\n" + "\n".join(lines) + "\n")
    if args.json:
        args.json.write_text(json.dumps({"rows": rows, "ratio": ratio, "goal": GOAL, "met": met}, indent=2))
    return 0 if met or args.goals_are_reported else 1


if __name__ == "__main__":
    sys.exit(main())
