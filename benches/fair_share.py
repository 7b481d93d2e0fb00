# SPDX-License-Identifier: Apache-2.0
"""A steady client's latency while another client floods (make bench-fair-share; make bench
appends its table to the brief).

A Python server (`ucall serve`, one thread) runs `work()`, 1 ms of CPU in Python. One
client (from 127.0.0.2) floods it over raw TCP at 20 times its rate limit, open loop; another
(from 127.0.0.1) calls `work()` one call at a time, `--steady-rate` a second, and its
latency is measured from the flood's second second on (the flooder's burst is spent by
then). Four runs: with the limit and without, each without and with the flood.

Goals (with the limit): the steady client's p50 within 1.2x and its p99 within 2x of what
they are without the flood, and the flooder gets no more than its limit.

    python benches/fair_share.py [--seconds 10] [--limit 100] [--steady-rate 50] [--append FILE] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from ucallbench.serving import free_port, python_env, serving

FLOOD_FACTOR = 20
FLOODER_ADDRESS = "127.0.0.2"

APP = '''
import time
from ucall import Server

server = Server(threads=1)

@server
def work() -> int:
    """1 ms of CPU."""
    end = time.perf_counter() + 0.001
    spins = 0
    while time.perf_counter() < end:
        spins += 1
    return spins
'''

CALL = b'{"jsonrpc":"2.0","method":"work","id":1}\n'


def flood(port: int, rate: float, seconds: float) -> dict[str, Any]:
    """Send `rate` calls a second for `seconds` over one raw TCP connection from
    FLOODER_ADDRESS, open loop; count the replies: results and refusals, in all and after
    the first second."""
    sock = socket.socket()
    sock.bind((FLOODER_ADDRESS, 0))
    sock.connect(("127.0.0.1", port))
    counts = {"sent": 0, "ok": 0, "refused": 0, "other": 0, "ok_after_first_second": 0}
    started = time.monotonic()
    done = threading.Event()

    def read() -> None:
        # Replies are counted by their markers, not parsed: the flooder should cost the
        # host (two cores, shared with the server and the steady client) little CPU.
        while True:
            chunk = sock.recv(1 << 16)
            if not chunk:
                return
            results = chunk.count(b'"result"')
            counts["ok"] += results
            if time.monotonic() - started >= 1.0:
                counts["ok_after_first_second"] += results
            refused = chunk.count(b"-32029")
            counts["refused"] += refused
            counts["other"] += chunk.count(b"\n") - results - refused
            if done.is_set() and counts["ok"] + counts["refused"] + counts["other"] >= counts["sent"]:
                return

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    tick = 0.01
    next_at = started
    while (now := time.monotonic()) < started + seconds:
        due = int((now - started) * rate) - counts["sent"]
        if due > 0:
            sock.sendall(CALL * due)
            counts["sent"] += due
        next_at += tick
        time.sleep(max(0.0, next_at - time.monotonic()))
    done.set()
    reader.join(timeout=10)
    sock.close()
    counts["window_s"] = seconds - 1.0
    return counts


def steady(port: int, rate: float, seconds: float, start_after: float) -> list[float]:
    """One call at a time, `rate` a second; latencies in ms of those that start after
    `start_after` seconds."""
    latencies = []
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        reader = sock.makefile("rb")
        started = time.monotonic()
        n = 0
        while time.monotonic() < started + start_after + seconds:
            at = started + n / rate
            time.sleep(max(0.0, at - time.monotonic()))
            begin = time.perf_counter()
            sock.sendall(CALL)
            reply = json.loads(reader.readline())
            took = (time.perf_counter() - begin) * 1000
            if "result" not in reply:
                raise RuntimeError(f"the steady client was refused: {reply}")
            if time.monotonic() - started >= start_after:
                latencies.append(took)
            n += 1
    return latencies


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


def run(limit: int | None, flooded: bool, args: argparse.Namespace, folder: str) -> dict[str, Any]:
    port = free_port()
    command = [sys.executable, "-m", "ucall", "serve", "app:server", "--port", str(port), "--threads", "1"]
    if limit is not None:
        command += ["--rate-limit", f"{limit}/s"]
    flooder = None
    with serving(command, port, python_env(folder)):
        try:
            rate = args.limit * FLOOD_FACTOR
            if flooded:
                flooder = subprocess.Popen(
                    [sys.executable, __file__, "--flood", str(port), str(rate), str(args.seconds + 1.5)],
                    stdout=subprocess.PIPE,
                    text=True,
                )
            latencies = steady(port, args.steady_rate, args.seconds, start_after=1.0)
            counts = None
            if flooder is not None:
                out, _ = flooder.communicate(timeout=args.seconds + 60)
                counts = json.loads(out)
            return {
                "limit": limit,
                "flooded": flooded,
                "flood_rate": rate if flooded else 0,
                "calls": len(latencies),
                "p50_ms": round(statistics.median(latencies), 3),
                "p99_ms": round(percentile(latencies, 0.99), 3),
                "flooder": counts,
            }
        finally:
            stop_flooder(flooder)


def stop_flooder(flooder: subprocess.Popen[str] | None) -> None:
    if flooder is not None and flooder.poll() is None:
        flooder.kill()
        flooder.wait()


def goals(rows: list[dict[str, Any]], limit: int) -> list[tuple[str, bool]]:
    base = next(r for r in rows if r["limit"] and not r["flooded"])
    under = next(r for r in rows if r["limit"] and r["flooded"])
    flooder = under["flooder"]
    # The flooder's share after its first second: its burst is spent, one call per 1/limit s.
    allowed = limit * flooder["window_s"] + 1
    return [
        (
            f"steady p50 with the flood {under['p50_ms']:.2f} ms vs {base['p50_ms']:.2f} ms without: "
            f"{under['p50_ms'] / base['p50_ms']:.2f}x (goal ≤ 1.2x)",
            under["p50_ms"] <= 1.2 * base["p50_ms"],
        ),
        (
            f"steady p99 with the flood {under['p99_ms']:.2f} ms vs {base['p99_ms']:.2f} ms without: "
            f"{under['p99_ms'] / base['p99_ms']:.2f}x (goal ≤ 2x)",
            under["p99_ms"] <= 2.0 * base["p99_ms"],
        ),
        (
            f"the flooder got {flooder['ok_after_first_second']} calls in {flooder['window_s']:g} s after its first "
            f"second (goal ≤ {allowed:g}: its limit), {flooder['refused']} refused of {flooder['sent']} sent",
            flooder["ok_after_first_second"] <= allowed and flooder["other"] == 0,
        ),
    ]


def table(rows: list[dict[str, Any]], args: argparse.Namespace, load: tuple[float, float]) -> str:
    lines = [
        "## Fair share under a flood (rate limits)",
        "",
        f"`benches/fair_share.py --seconds {args.seconds:g} --limit {args.limit} --steady-rate {args.steady_rate:g}`: "
        "a Python server (`ucall serve`, one thread) runs `work()`, 1 ms of CPU; one client floods it at "
        f"{args.limit * FLOOD_FACTOR:,} calls/s ({FLOOD_FACTOR}x a limit of {args.limit}/s) over raw TCP from "
        f"{FLOODER_ADDRESS}, another calls one at a time, {args.steady_rate:g}/s, from 127.0.0.1; its latency "
        f"over {args.seconds:g} s from the flood's second second on. Load average {load[0]:.1f} before, "
        f"{load[1]:.1f} after (2 cores).",
        "",
        "| rate limit | flood | steady calls | steady p50 ms | steady p99 ms | flooder answered / refused / sent |",
        "|---|---|---:|---:|---:|---|",
    ]
    for row in rows:
        flooder = row["flooder"]
        answered = "—" if flooder is None else f"{flooder['ok']:,} / {flooder['refused']:,} / {flooder['sent']:,}"
        lines.append(
            f"| {'%d/s' % row['limit'] if row['limit'] else 'none'} | {'%d/s' % row['flood_rate'] if row['flooded'] else 'none'} "
            f"| {row['calls']} | {row['p50_ms']:.2f} | {row['p99_ms']:.2f} | {answered} |"
        )
    lines.append("")
    for text, met in goals(rows, args.limit):
        lines.append(f"- {'met' if met else 'MISSED'}: {text}")
    return "\n".join(lines) + "\n"


def main() -> int:
    if len(sys.argv) == 5 and sys.argv[1] == "--flood":
        print(json.dumps(flood(int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4]))))
        return 0
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10.0, help="measured seconds per run")
    parser.add_argument("--limit", type=int, default=100, help="the rate limit, calls per second per client")
    parser.add_argument("--steady-rate", type=float, default=50.0, help="the steady client's calls per second")
    parser.add_argument("--append", type=Path, help="append the table to this markdown file")
    parser.add_argument("--json", type=Path, help="also write the rows here")
    parser.add_argument("--goals-are-reported", action="store_true", help="exit 0 when a goal is missed")
    args = parser.parse_args()
    load_before = os.getloadavg()[0]
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        (Path(folder) / "app.py").write_text(APP)
        for limit in (args.limit, None):
            for flooded in (False, True):
                rows.append(run(limit, flooded, args, folder))
    text = table(rows, args, (load_before, os.getloadavg()[0]))
    print(text)
    if args.append:
        with args.append.open("a") as out:
            out.write("\n" + text)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2) + "\n")
    missed = [text for text, met in goals(rows, args.limit) if not met]
    return 1 if missed and not args.goals_are_reported else 0


if __name__ == "__main__":
    sys.exit(main())
