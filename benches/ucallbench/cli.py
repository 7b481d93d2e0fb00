# SPDX-License-Identifier: Apache-2.0
"""The command line: python -m ucallbench [--quick] [--servers a,b] [--workloads x,y] [--reps N]."""

from __future__ import annotations

import argparse
import atexit
import os
import shutil
import signal
import sys
from pathlib import Path

import ucallbench
from ucallbench import config
from ucallbench.build import build, build_grpc, make_certificate, peer_status, setup_peers
from ucallbench.config import FULL_DURATION, FULL_WARMUP, QUICK_DURATION, QUICK_WARMUP, ROOT
from ucallbench.measure import (
    PAIR_ROUNDS,
    QUICK_PAIR_ROUNDS,
    Settings,
    bench,
    estimate_seconds,
    make_plan,
    paired_ratios,
    paired_seconds,
)
from ucallbench.processes import STOP_SIGNALS, BenchError, Interrupted, kill_children, on_stop_signal, say
from ucallbench.report import chart_from
from ucallbench.servers import SERVERS, Server
from ucallbench.workloads import WORKLOADS, Workload

# ---------------------------------------------------------------- main


def pick(names: str | None, table: list, what: str, default) -> list:
    if not names:
        return [x for x in table if default(x)]
    by_name = {x.name: x for x in table}
    chosen = []
    for n in names.split(","):
        n = n.strip()
        if n not in by_name:
            raise BenchError(f"unknown {what} {n!r}; known: {', '.join(by_name)}")
        chosen.append(by_name[n])
    return chosen


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["publish"]:
        from ucallbench.publish import main as publish

        return publish(argv[1:])
    if argv[:1] == ["binary"]:
        from ucallbench.binary import main as binary

        return binary(argv[1:])
    ap = argparse.ArgumentParser(
        prog="python -m ucallbench",
        description=ucallbench.__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("--quick", action="store_true", help="the workloads marked quick, shorter, 1 repetition")
    ap.add_argument("--servers", help="comma-separated, from: " + ", ".join(s.name for s in SERVERS))
    ap.add_argument("--workloads", help="comma-separated, from: " + ", ".join(w.name for w in WORKLOADS))
    ap.add_argument("--reps", type=int, help="repetitions of each figure (default 3, or 1 with --quick)")
    ap.add_argument(
        "--duration",
        type=float,
        help=f"seconds measured per figure (default {FULL_DURATION}, or {QUICK_DURATION} with --quick)",
    )
    ap.add_argument(
        "--warmup",
        type=float,
        help=f"seconds of warm-up per figure (default {FULL_WARMUP}, or {QUICK_WARMUP} with --quick)",
    )
    ap.add_argument(
        "--pair-rounds",
        type=int,
        help=f"A B B A rounds of each bounded goal ratio with both servers up (default {PAIR_ROUNDS}, or "
        f"{QUICK_PAIR_ROUNDS} with --quick; 0 leaves the goals to the tables)",
    )
    ap.add_argument("--no-build", action="store_true", help="use the binaries already built")
    ap.add_argument(
        "--dry-run", action="store_true", help="print what would run and how long it would take; start nothing"
    )
    ap.add_argument(
        "--load-bin", type=Path, help=f"the ucall-load to use (default {config.LOAD_BIN.relative_to(ROOT)})"
    )
    ap.add_argument("--chart-from", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--chart-to", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.chart_from:
        chart_from(args.chart_from, args.chart_to)
        return 0

    if args.load_bin:
        config.LOAD_BIN = args.load_bin.resolve()
    for sig in STOP_SIGNALS:
        signal.signal(sig, on_stop_signal)
    atexit.register(kill_children)
    try:
        servers = pick(args.servers, SERVERS, "server", lambda s: s.default)
        workloads = pick(args.workloads, WORKLOADS, "workload", lambda w: w.quick or not args.quick)
        settings = Settings(
            duration=args.duration or (QUICK_DURATION if args.quick else FULL_DURATION),
            warmup=args.warmup if args.warmup is not None else (QUICK_WARMUP if args.quick else FULL_WARMUP),
            reps=args.reps or (1 if args.quick else 3),
            quick=args.quick,
            pair_rounds=args.pair_rounds
            if args.pair_rounds is not None
            else QUICK_PAIR_ROUNDS
            if args.quick
            else PAIR_ROUNDS,
        )
        if settings.reps < 1 or settings.duration <= 0 or settings.warmup < 0:
            raise BenchError("--reps must be at least 1, --duration positive, --warmup not negative")
        if not shutil.which("taskset"):
            raise BenchError("taskset is missing (Debian package util-linux)")
        if (os.cpu_count() or 1) < 2:
            raise BenchError("two CPUs are needed: the server and the load generator each get one")
        has_wrk = shutil.which("wrk") is not None
        if not has_wrk and any(w.tool == "wrk" for w in workloads):
            say("wrk is not installed: skipping the wrk cross-check (scripts/setup.sh bench installs it)")
            workloads = [w for w in workloads if w.tool != "wrk"]
        if args.dry_run:
            return dry_run(servers, workloads, settings)
        if not args.no_build:
            build(servers)
            build_grpc(servers)
            setup_peers(servers)
        make_certificate(servers, workloads)
        return bench(servers, workloads, settings)
    except BenchError as e:
        print(f"bench: error: {e}", file=sys.stderr)
        return 1
    except Interrupted as e:
        print(f"bench: interrupted ({signal.Signals(e.signum).name})", file=sys.stderr)
        return 128 + e.signum
    except KeyboardInterrupt:
        print("bench: interrupted", file=sys.stderr)
        return 130
    finally:
        kill_children()


def dry_run(servers: list[Server], workloads: list[Workload], s: Settings) -> int:
    """Prints the plan and the time it would take."""
    runnable, plan, failures = make_plan(servers, workloads, peer_status())
    for srv in runnable:
        for proto, wls in plan[srv.name]:
            say(f"{srv.name} ({proto}): {', '.join(w.name for w in wls)}")
    figures, starts, seconds = estimate_seconds(runnable, plan, s)
    load = figures * s.reps * (s.warmup + s.duration)
    say(
        f"{len(runnable)} server(s), {figures} figure(s) and {starts} server start(s) per round, {s.reps} round(s) "
        f"of {s.warmup:g} s warm-up + {s.duration:g} s: {load / 60:.1f} min of load, "
        f"about {seconds / 60:.1f} min with the starts and the load generator's"
    )
    if s.pair_rounds:
        pairs = paired_ratios(servers, workloads, runnable)
        say(
            f"then {len(pairs)} goal ratio(s) paired, {s.pair_rounds} round(s) of 4 figures each: "
            f"about {paired_seconds(servers, workloads, runnable, s) / 60:.1f} min"
        )
    if failures:
        say(f"not counted ({len({k[0] for k in failures})} server(s) cannot run here): see the lines above")
    return 0
