#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Server memory over a million requests: the resident set (RSS) through a warm-up, then
after each round of load, until a million `sum` calls have been answered.

    .venv/bin/python benches/rss.py [--requests 1000000] [--servers ucall-python,...]
                                    [--append benches/results/latest-brief.md]

Each server runs alone, pinned to CPU 0 with the load generator on CPU 1 (as in
benches/run.py, whose server table and process handling this reuses). A round is `sum`
over 32 keep-alive connections for a few seconds, then 1.6 MB `echo` calls for a second,
so that the buffers kept for large messages are part of what is watched. Growth is the
highest RSS of the last two rounds against the highest of two warm-up rounds; the goal
(Python issue): at most 5%. `make bench` runs this after benches/run.py and adds
the table to the one README.md shows. Exits 1 when a Python server misses the goal.
"""

from __future__ import annotations

import argparse
import atexit
import signal
import sys
from dataclasses import dataclass
from pathlib import Path

from ucallbench import config, measure, processes, servers

GOAL_GROWTH = 0.05  # the Python issue: RSS within 5% over one million requests
GOAL_SERVERS = ("ucall-python", "ucall-python-uring")
DEFAULT_SERVERS = ("ucall-rust-poll", *GOAL_SERVERS)
ROUND_SECONDS = 3.0
ECHO_SECONDS = 1.0
WARMUP_ROUNDS = 2
LAST_ROUNDS = 2


@dataclass
class Watch:
    server: str
    requests: int  # sum calls answered after the warm-up
    echoes: int  # 1.6 MB echo calls answered after the warm-up
    errors: int
    start_kib: int  # the highest RSS of the warm-up rounds
    end_kib: int  # the highest RSS of the last rounds
    peak_kib: int  # the highest RSS after the warm-up

    @property
    def growth(self) -> float:
        return (self.end_kib - self.start_kib) / self.start_kib


def rss_kib(pid: int) -> int:
    """VmRSS of the process `pid` leads (the server, under taskset's exec)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise processes.BenchError(f"no VmRSS for process {pid}")


def one_round(proc: processes.ServerProcess, sum_call: measure.Call, echo_call: measure.Call) -> tuple[int, int, int, int]:
    """`sum` then `echo` load; (sum calls, echoes, errors, highest RSS seen in KiB)."""
    out = measure.load_seconds(proc.addr, sum_call, 32, ROUND_SECONDS)
    after_sum = rss_kib(proc.proc.pid)
    echo = measure.load_seconds(proc.addr, echo_call, 1, ECHO_SECONDS)
    highest = max(after_sum, rss_kib(proc.proc.pid))
    return out["requests"], echo["requests"], out["errors"] + echo["errors"], highest


def watch(server: servers.Server, requests: int, sum_call: measure.Call, echo_call: measure.Call) -> Watch:
    """RSS is read after each half of a round. One large buffer more or less in the
    allocator's hands moves it by 2 MiB either way, so the comparison is of highs: the
    highest of the warm-up rounds against the highest of the last rounds. A leak raises
    the second; a buffer that comes and goes is in both."""
    proc = processes.ServerProcess(server, "http", config.BENCH_DIR / "logs")
    try:
        start = max(one_round(proc, sum_call, echo_call)[3] for _ in range(WARMUP_ROUNDS))
        answered = echoes = errors = 0
        highs: list[int] = []
        while answered < requests or len(highs) < LAST_ROUNDS:
            calls, echoed, failed, high = one_round(proc, sum_call, echo_call)
            answered, echoes, errors = answered + calls, echoes + echoed, errors + failed
            highs.append(high)
            processes.say(f"rss: {server.name}: round {len(highs)}: {answered:,} sum calls, RSS up to {high / 1024:.1f} MiB")
        return Watch(server.name, answered, echoes, errors, start, max(highs[-LAST_ROUNDS:]), max(highs))
    finally:
        proc.stop()


def table(watches: list[Watch], requests: int) -> str:
    lines = [
        f"### Memory over {requests:,} requests",
        "",
        f"`benches/rss.py` at commit {measure.git_commit()}: RSS read after each half of a round of `sum` "
        f"(32 connections, {ROUND_SECONDS:g} s) then 1.6 MB `echo` (1 connection, {ECHO_SECONDS:g} s); the highest of "
        f"{WARMUP_ROUNDS} warm-up rounds against the highest of the last {LAST_ROUNDS}.",
        "",
        "| server | sum calls | 1.6 MB echoes | errors | RSS, warm-up | RSS, last rounds | highest | growth "
        "| goal | met |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for w in watches:
        goal = w.server in GOAL_SERVERS
        met = ("yes" if w.growth <= GOAL_GROWTH and not w.errors else "**no**") if goal else "—"
        lines.append(
            f"| `{w.server}` | {w.requests:,} | {w.echoes:,} | {w.errors} | {w.start_kib / 1024:.1f} MiB "
            f"| {w.end_kib / 1024:.1f} MiB | {w.peak_kib / 1024:.1f} MiB | {w.growth:+.1%} "
            f"| {'≤ 5%' if goal else '(for comparison)'} | {met} |"
        )
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=1_000_000, help="sum calls to answer after the warm-up")
    ap.add_argument("--servers", default=",".join(DEFAULT_SERVERS), help="names from python -m ucallbench --help")
    ap.add_argument("--append", type=Path, help="add the table to this Markdown file")
    args = ap.parse_args()
    for sig in processes.STOP_SIGNALS:
        signal.signal(sig, processes.on_stop_signal)
    atexit.register(processes.kill_children)
    try:
        known = {s.name: s for s in servers.SERVERS}
        names = [n.strip() for n in args.servers.split(",") if n.strip()]
        unknown = [n for n in names if n not in known]
        if unknown:
            raise processes.BenchError(f"unknown servers {unknown}; known: {', '.join(known)}")
        if not config.LOAD_BIN.exists():
            raise processes.BenchError(f"{config.LOAD_BIN} is missing: cargo build --release -p ucall-bench")
        sum_call, echo_call = measure.sum_and_echo_calls()
        watches = [watch(known[n], args.requests, sum_call, echo_call) for n in names]
    except processes.BenchError as e:
        print(f"rss: error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("rss: interrupted", file=sys.stderr)
        return 130
    finally:
        processes.kill_children()
    text = table(watches, args.requests)
    print(text)
    (config.RESULTS / "rss.md").write_text(text)
    if args.append:
        with open(args.append, "a") as out:
            out.write("\n" + text)
    missed = [w for w in watches if w.server in GOAL_SERVERS and (w.growth > GOAL_GROWTH or w.errors)]
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
