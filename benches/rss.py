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
import json
import signal
import sys
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import run  # noqa: E402  (benches/run.py: the servers, process groups, the load generator)

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
    raise run.BenchError(f"no VmRSS for process {pid}")


@dataclass(frozen=True)
class Call:
    body: Path  # the request body's file
    expect: str | None  # a reply lacking this counts as an error


def load(addr: str, call: Call, connections: int, seconds: float) -> dict:
    cmd = ["taskset", "-c", str(run.CLIENT_CPU), str(run.LOAD_BIN), "--addr", addr, "--proto", "http"]
    cmd += ["--connections", str(connections), "--duration", str(seconds), "--warmup", "0", "--json"]
    cmd += ["--body", str(call.body)]
    if call.expect is not None:
        cmd += ["--expect", call.expect]
    res = run.run_group(cmd, timeout=seconds + 60, capture=True)
    if res.returncode != 0:
        raise run.BenchError(f"ucall-load failed ({res.returncode}): {res.stderr.strip()[-500:]}")
    return json.loads(res.stdout)


def calls() -> tuple[Call, Call]:
    """The requests of run.py's sum and 1.6 MB echo workloads, with the replies they expect."""
    by_name = {w.name: w for w in run.WORKLOADS}
    made = []
    for name in ("sum-32conn", "echo-1.6MB"):
        wl = by_name[name]
        request = run.request_for(wl, run.Endpoint(("",)))
        made.append(Call(run.body_file(wl, request), request.expect))
    return made[0], made[1]


def one_round(proc: run.ServerProcess, sum_call: Call, echo_call: Call) -> tuple[int, int, int, int]:
    """`sum` then `echo` load; (sum calls, echoes, errors, highest RSS seen in KiB)."""
    out = load(proc.addr, sum_call, 32, ROUND_SECONDS)
    after_sum = rss_kib(proc.proc.pid)
    echo = load(proc.addr, echo_call, 1, ECHO_SECONDS)
    highest = max(after_sum, rss_kib(proc.proc.pid))
    return out["requests"], echo["requests"], out["errors"] + echo["errors"], highest


def watch(server: run.Server, requests: int, sum_call: Call, echo_call: Call) -> Watch:
    """RSS is read after each half of a round. One large buffer more or less in the
    allocator's hands moves it by 2 MiB either way, so the comparison is of highs: the
    highest of the warm-up rounds against the highest of the last rounds. A leak raises
    the second; a buffer that comes and goes is in both."""
    proc = run.ServerProcess(server, "http", run.BENCH_DIR / "logs")
    try:
        start = max(one_round(proc, sum_call, echo_call)[3] for _ in range(WARMUP_ROUNDS))
        answered = echoes = errors = 0
        highs: list[int] = []
        while answered < requests or len(highs) < LAST_ROUNDS:
            calls, echoed, failed, high = one_round(proc, sum_call, echo_call)
            answered, echoes, errors = answered + calls, echoes + echoed, errors + failed
            highs.append(high)
            run.say(f"rss: {server.name}: round {len(highs)}: {answered:,} sum calls, RSS up to {high / 1024:.1f} MiB")
        return Watch(server.name, answered, echoes, errors, start, max(highs[-LAST_ROUNDS:]), max(highs))
    finally:
        proc.stop()


def table(watches: list[Watch], requests: int) -> str:
    lines = [
        f"### Memory over {requests:,} requests",
        "",
        f"`benches/rss.py` at commit {run.git_commit()}: RSS read after each half of a round of `sum` "
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
    ap.add_argument("--servers", default=",".join(DEFAULT_SERVERS), help="names from benches/run.py")
    ap.add_argument("--append", type=Path, help="add the table to this Markdown file")
    args = ap.parse_args()
    for sig in run.STOP_SIGNALS:
        signal.signal(sig, run.on_stop_signal)
    atexit.register(run.kill_children)
    try:
        known = {s.name: s for s in run.SERVERS}
        names = [n.strip() for n in args.servers.split(",") if n.strip()]
        unknown = [n for n in names if n not in known]
        if unknown:
            raise run.BenchError(f"unknown servers {unknown}; known: {', '.join(known)}")
        if not run.LOAD_BIN.exists():
            raise run.BenchError(f"{run.LOAD_BIN} is missing: cargo build --release -p ucall-bench")
        sum_call, echo_call = calls()
        watches = [watch(known[n], args.requests, sum_call, echo_call) for n in names]
    except run.BenchError as e:
        print(f"rss: error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("rss: interrupted", file=sys.stderr)
        return 130
    finally:
        run.kill_children()
    text = table(watches, args.requests)
    print(text)
    (run.RESULTS / "rss.md").write_text(text)
    if args.append:
        with open(args.append, "a") as out:
            out.write("\n" + text)
    missed = [w for w in watches if w.server in GOAL_SERVERS and (w.growth > GOAL_GROWTH or w.errors)]
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
