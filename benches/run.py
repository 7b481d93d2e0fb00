#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Runs the UCall benchmarks and writes benches/results/.

    python3 benches/run.py [--quick] [--servers a,b] [--workloads x,y] [--reps N]

Every server runs pinned to CPU 0 and the load generator to CPU 1. Each
(server, workload) figure is measured several times, interleaved round-robin
across servers, and the median is reported. See benches/README.md.

Python 3.11 standard library only; matplotlib, when installed, adds a chart.
"""

from __future__ import annotations

import argparse
import datetime as dt
import ipaddress
import json
import os
import platform
import queue
import re
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TARGET = ROOT / "target"
BENCH_DIR = TARGET / "bench"
RESULTS = ROOT / "benches" / "results"
LOAD_BIN = TARGET / "release" / "ucall-load"

SERVER_CPU = 0
CLIENT_CPU = 1
LOADAVG_LIMIT = 2.5
# Also disturbed: other processes used more than this share of one CPU during the run.
OTHER_CPU_LIMIT = 25.0
# A load generator this busy may be what limits the figure, not the server.
CLIENT_BOUND_CPU = 90.0
DEFAULT_BODY = '{"jsonrpc":"2.0","method":"sum","params":{"a":1,"b":2},"id":1}'
SUM_REPLY = '"result":3'

# ---------------------------------------------------------------- the tables


@dataclass(frozen=True)
class Endpoint:
    """How to start a server for one protocol."""

    argv: tuple[str, ...]  # relative paths are taken from the repository root
    expect: str | None = SUM_REPLY  # a reply lacking this counts as an error


@dataclass(frozen=True)
class Server:
    name: str
    description: str
    endpoints: dict[str, Endpoint]  # protocol ("http" or "tcp") -> endpoint
    # cargo packages ("cargo:NAME"), C sources ("c:FILE"), or C sources on libucall ("capi:FILE")
    build: tuple[str, ...] = ()
    reference: bool = False  # ratio columns divide by this server's figures
    default: bool = True  # run when --servers is not given


SUM_SERVER_POLL = (
    "target/release/sum_server",
    *("--host", "127.0.0.1", "--port", "0", "--threads", "1", "--engine", "poll"),
)
SUM_C_POLL = (
    "target/bench/sum",
    *("--host", "127.0.0.1", "--port", "0", "--threads", "1", "--engine", "poll"),
)

# Needs the package built into .venv (make python; make bench does it).
SUM_PYTHON_POLL = (
    ".venv/bin/python",
    "examples/python/sum_server.py",
    *("--host", "127.0.0.1", "--port", "0", "--threads", "1", "--engine", "poll"),
)

SERVERS: list[Server] = [
    Server(
        name="c-reference",
        description="C, one thread, epoll; fixed reply per HTTP request (epoll_http.c), echo over raw TCP (epoll_echo.c)",
        endpoints={
            "http": Endpoint(("target/bench/epoll_http", "0")),
            # The echo server returns the request line itself, which has no result.
            "tcp": Endpoint(("target/bench/epoll_echo", "0"), expect='"method":"sum"'),
        },
        build=("c:benches/reference/epoll_http.c", "c:benches/reference/epoll_echo.c"),
        reference=True,
    ),
    Server(
        name="ucall-rust-poll",
        description="UCall Rust API, examples/rust sum_server, 1 thread, poll engine",
        # One port serves both: a connection whose first byte is `{` or `[` is raw TCP.
        endpoints={
            "http": Endpoint(SUM_SERVER_POLL),
            "tcp": Endpoint(SUM_SERVER_POLL),
        },
        build=("cargo:ucall-examples",),
    ),
    Server(
        name="ucall-c-poll",
        description="UCall C API, examples/c/sum.c on the release libucall.a, 1 thread, poll engine",
        endpoints={
            "http": Endpoint(SUM_C_POLL),
            "tcp": Endpoint(SUM_C_POLL),
        },
        build=("capi:examples/c/sum.c",),
    ),
    Server(
        name="ucall-python",
        description="UCall Python API, examples/python/sum_server.py (a: int, b: int), 1 thread, poll engine",
        endpoints={
            "http": Endpoint(SUM_PYTHON_POLL),
            "tcp": Endpoint(SUM_PYTHON_POLL),
        },
    ),
]


@dataclass(frozen=True)
class Workload:
    name: str
    title: str
    proto: str
    metric: str  # "rps" (requests/s, higher is better) or "p50" (median latency in µs, lower is better)
    load_args: tuple[str, ...] = ()  # for ucall-load
    tool: str = "ucall-load"  # or "wrk"
    connections: int = 1  # for wrk
    body: str = DEFAULT_BODY


WORKLOADS: list[Workload] = [
    Workload("sum-1conn", "sum, 1 connection", "http", "p50", ("--connections", "1")),
    Workload("sum-32conn", "sum, 32 connections", "http", "rps", ("--connections", "32")),
    Workload(
        "sum-32conn-pipe16",
        "sum, 32 connections, 16 pipelined",
        "http",
        "rps",
        ("--connections", "32", "--pipeline", "16"),
    ),
    Workload(
        "sum-newconn",
        "sum, new connection per request (32 at once)",
        "http",
        "rps",
        ("--connections", "32", "--new-connection"),
    ),
    Workload("wrk-sum-32conn", "sum, 32 connections, measured by wrk", "http", "rps", tool="wrk", connections=32),
    Workload("tcp-sum-1conn", "sum over raw TCP, 1 connection", "tcp", "p50", ("--connections", "1")),
    Workload("tcp-sum-32conn", "sum over raw TCP, 32 connections", "tcp", "rps", ("--connections", "32")),
    Workload(
        "tcp-sum-32conn-pipe16",
        "sum over raw TCP, 32 connections, 16 pipelined",
        "tcp",
        "rps",
        ("--connections", "32", "--pipeline", "16"),
    ),
]

METRICS = {
    "rps": ("requests_per_s", "req/s, higher is better"),
    "p50": ("latency_p50_us", "p50 latency µs, lower is better"),
}


@dataclass
class Settings:
    duration: float
    warmup: float
    reps: int
    quick: bool


# ---------------------------------------------------------------- helpers


class BenchError(Exception):
    pass


def say(msg: str) -> None:
    print(f"bench: {msg}", flush=True)


def loadavg() -> float:
    try:
        return float(Path("/proc/loadavg").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 0.0


def cpu_stat() -> tuple[float, float]:
    """Machine-wide busy and stolen CPU seconds from /proc/stat.

    Busy time counts user, nice, system, irq and softirq: a task's own system
    time includes the interrupt ticks taken while it ran, so subtracting the
    server's and the load generator's time leaves what other processes used.
    """
    tick = os.sysconf("SC_CLK_TCK")
    try:
        fields = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    except (OSError, ValueError, IndexError):
        return 0.0, 0.0
    user, nice, system, _idle, _iowait, irq, softirq = fields[:7]
    steal = fields[7] if len(fields) > 7 else 0
    return (user + nice + system + irq + softirq) / tick, steal / tick


def children_cpu() -> float:
    """CPU seconds used by this script's finished children."""
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def run_checked(cmd: list[str], **kw) -> None:
    say("$ " + " ".join(cmd))
    res = subprocess.run(cmd, cwd=ROOT, **kw)
    if res.returncode != 0:
        raise BenchError(f"command failed ({res.returncode}): {' '.join(cmd)}")


def build(servers: list[Server]) -> None:
    packages = ["ucall-bench"]
    sources = []
    capi_sources = []
    for s in servers:
        for step in s.build:
            kind, _, what = step.partition(":")
            if kind == "cargo" and what not in packages:
                packages.append(what)
            elif kind == "c" and what not in sources:
                sources.append(what)
            elif kind == "capi" and what not in capi_sources:
                capi_sources.append(what)
                if "ucall-capi" not in packages:
                    packages.append("ucall-capi")
    env = dict(os.environ, CARGO_TARGET_DIR=str(TARGET))
    cmd = ["cargo", "build", "--release"]
    for p in packages:
        cmd += ["-p", p]
    run_checked(cmd, env=env)
    BENCH_DIR.mkdir(parents=True, exist_ok=True)
    cc = os.environ.get("CC", "cc")
    for src in sources:
        out = BENCH_DIR / Path(src).stem
        run_checked([cc, "-O2", "-Wall", "-Wextra", "-Werror", src, "-o", str(out)])
    for src in capi_sources:
        out = BENCH_DIR / Path(src).stem
        lib = TARGET / "release" / "libucall.a"
        flags = ["-std=c99", "-O2", "-Wall", "-Wextra", "-Werror", "-I", str(ROOT / "include")]
        run_checked([cc, *flags, src, str(lib), "-lpthread", "-ldl", "-lm", "-lrt", "-o", str(out)])
    for s in servers:
        for ep in s.endpoints.values():
            exe = ROOT / ep.argv[0]
            if not exe.exists():
                raise BenchError(f"{s.name}: {exe} was not built")
    if not LOAD_BIN.exists():
        raise BenchError(f"{LOAD_BIN} was not built")


def proc_cpu_seconds(pgid: int) -> float | None:
    """CPU time (user + system) of every process in the process group."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0.0
    found = False
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            stat = Path(entry.path, "stat").read_text()
        except OSError:
            continue
        # Fields after the command name, which is in parentheses.
        fields = stat[stat.rfind(")") + 2 :].split()
        if int(fields[2]) != pgid:  # field 5, pgrp
            continue
        found = True
        total += (int(fields[11]) + int(fields[12])) / tick  # fields 14, 15: utime, stime
    return total if found else None


class ServerProcess:
    """A server started in its own process group, pinned to SERVER_CPU."""

    LISTENING = re.compile(r"listening on (\S+):(\d+)")

    def __init__(self, server: Server, proto: str, log_dir: Path):
        self.name = f"{server.name}/{proto}"
        ep = server.endpoints[proto]
        argv = [str(ROOT / ep.argv[0]), *ep.argv[1:]]
        log_dir.mkdir(parents=True, exist_ok=True)
        self.log_path = log_dir / f"{server.name}-{proto}.log"
        self.log = open(self.log_path, "w")
        self.lines: queue.Queue[str | None] = queue.Queue()
        self.proc = subprocess.Popen(
            ["taskset", "-c", str(SERVER_CPU), *argv],
            cwd=ROOT,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=self.log,
            text=True,
            start_new_session=True,
        )
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()
        try:
            self.addr = self._wait_listening(timeout=20.0)
        except BaseException:
            self.stop()
            raise

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.log.write(line)
            self.log.flush()
            self.lines.put(line)
        self.lines.put(None)

    def _wait_listening(self, timeout: float) -> str:
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise BenchError(f"{self.name}: no 'listening on' line within {timeout:.0f} s")
            try:
                line = self.lines.get(timeout=left)
            except queue.Empty:
                continue
            if line is None:
                self.proc.wait()
                tail = self.log_path.read_text()[-2000:]
                raise BenchError(f"{self.name} exited ({self.proc.returncode}) before listening:\n{tail}")
            m = self.LISTENING.search(line)
            if m:
                host = m.group(1).strip("[]")
                if host == "localhost":
                    host = "127.0.0.1"
                if not ipaddress.ip_address(host).is_loopback:
                    raise BenchError(f"{self.name} listens on {host}, not a loopback address")
                return f"[{host}]:{m.group(2)}" if ":" in host else f"{host}:{m.group(2)}"

    def cpu_seconds(self) -> float | None:
        return proc_cpu_seconds(self.proc.pid)

    def stop(self) -> None:
        if self.proc.poll() is None:
            for sig, wait in ((signal.SIGTERM, 3.0), (signal.SIGKILL, 5.0)):
                try:
                    os.killpg(self.proc.pid, sig)
                except ProcessLookupError:
                    break
                try:
                    self.proc.wait(timeout=wait)
                    break
                except subprocess.TimeoutExpired:
                    continue
        else:
            # The leader is gone; make sure nothing it left behind survives.
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        self.reader.join(timeout=2.0)
        self.log.close()


def run_ucall_load(addr: str, wl: Workload, expect: str | None, s: Settings) -> dict:
    cmd = ["taskset", "-c", str(CLIENT_CPU), str(LOAD_BIN), "--addr", addr, "--proto", wl.proto]
    cmd += [*wl.load_args, "--duration", str(s.duration), "--warmup", str(s.warmup), "--body-json", wl.body]
    if expect:
        cmd += ["--expect", expect]
    cmd.append("--json")
    res = subprocess.run(
        cmd, cwd=ROOT, capture_output=True, text=True, timeout=s.duration + s.warmup + 60, stdin=subprocess.DEVNULL
    )
    if res.returncode != 0:
        raise BenchError(f"ucall-load failed ({res.returncode}): {res.stderr.strip()}")
    out = json.loads(res.stdout)
    return {
        "requests": out["requests"],
        "requests_per_s": out["requests_per_s"],
        "bytes_per_s": out["bytes_per_s"],
        "errors": out["errors"],
        "errors_by_kind": out["errors_by_kind"],
        "latency_mean_us": out["latency_us"]["mean"],
        "latency_p50_us": out["latency_us"]["p50"],
        "latency_p99_us": out["latency_us"]["p99"],
        "latency_p999_us": out["latency_us"]["p999"],
        "latency_max_us": out["latency_us"]["max"],
        "client_cpu_percent": out["client_cpu_percent"],
        "connects": out["connects"],
    }


WRK_UNITS = {"us": 1.0, "ms": 1e3, "s": 1e6}


def wrk_latency(text: str, pct: str) -> float | None:
    m = re.search(rf"^\s*{re.escape(pct)}%\s+([\d.]+)(us|ms|s)\s*$", text, re.M)
    return float(m.group(1)) * WRK_UNITS[m.group(2)] if m else None


def run_wrk(addr: str, wl: Workload, s: Settings) -> dict:
    script = BENCH_DIR / f"{wl.name}.lua"
    if "]==]" in wl.body:
        raise BenchError("the request body cannot be quoted for wrk's Lua script")
    script.write_text(
        "-- Generated by benches/run.py: POST the JSON-RPC request body.\n"
        'wrk.method = "POST"\n'
        f"wrk.body = [==[{wl.body}]==]\n"
        'wrk.headers["Content-Type"] = "application/json"\n'
    )
    url = f"http://{addr}{'/'}"
    base = ["taskset", "-c", str(CLIENT_CPU), "wrk", "-t1", f"-c{wl.connections}", "-s", str(script)]
    if s.warmup > 0:
        warm = max(1, round(s.warmup))
        subprocess.run(
            [*base, f"-d{warm}s", url], cwd=ROOT, capture_output=True, timeout=warm + 30, stdin=subprocess.DEVNULL
        )
    secs = max(1, round(s.duration))
    cpu0, t0 = children_cpu(), time.monotonic()
    res = subprocess.run(
        [*base, f"-d{secs}s", "--latency", url],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=secs + 30,
        stdin=subprocess.DEVNULL,
    )
    cpu1, t1 = children_cpu(), time.monotonic()
    if res.returncode != 0:
        raise BenchError(f"wrk failed ({res.returncode}): {res.stderr.strip()}")
    text = res.stdout
    rps = re.search(r"Requests/sec:\s+([\d.]+)", text)
    total = re.search(r"(\d+) requests in", text)
    if not rps or not total:
        raise BenchError(f"cannot read wrk's output:\n{text}")
    errors = 0
    m = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", text)
    if m:
        errors += int(m.group(1))
    m = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", text)
    if m:
        errors += sum(int(g) for g in m.groups())
    return {
        "requests": int(total.group(1)),
        "requests_per_s": float(rps.group(1)),
        "errors": errors,
        "latency_p50_us": wrk_latency(text, "50"),
        "latency_p99_us": wrk_latency(text, "99"),
        "client_cpu_percent": 100 * (cpu1 - cpu0) / (t1 - t0),
        "wrk_output": text,
    }


# ---------------------------------------------------------------- reporting


def median_of(runs: list[dict], key: str) -> float | None:
    values = [r["result"][key] for r in runs if r["result"].get(key) is not None]
    return statistics.median(values) if values else None


def summarize(runs: list[dict]) -> dict:
    """Median figures for every (server, workload)."""
    groups: dict[tuple[str, str], list[dict]] = {}
    for r in runs:
        if "result" in r:
            groups.setdefault((r["server"], r["workload"]), []).append(r)
    summary: dict[str, dict[str, dict]] = {}
    keys = [
        "requests_per_s",
        "bytes_per_s",
        "latency_mean_us",
        "latency_p50_us",
        "latency_p99_us",
        "latency_p999_us",
        "client_cpu_percent",
        "server_cpu_percent",
        "other_cpu_percent",
        "steal_percent",
    ]
    for (server, workload), rs in groups.items():
        entry = {k: median_of(rs, k) for k in keys}
        entry["runs"] = len(rs)
        entry["errors"] = sum(r["result"].get("errors", 0) for r in rs)
        entry["disturbed_runs"] = sum(1 for r in rs if r["disturbed"])
        entry["requests_per_s_runs"] = [r["result"]["requests_per_s"] for r in rs]
        entry["latency_p50_us_runs"] = [r["result"].get("latency_p50_us") for r in rs]
        summary.setdefault(server, {})[workload] = entry
    return summary


def fmt_value(metric: str, v: float | None) -> str:
    if v is None:
        return "—"
    if metric == "rps":
        return f"{v:,.0f}"
    return f"{v:.1f}"


def fmt_opt(v: float | None, spec: str) -> str:
    return "—" if v is None else format(v, spec)


def markdown(meta: dict, summary: dict, servers: list[Server], workloads: list[Workload]) -> str:
    refs = [s for s in servers if s.reference]
    others = [s for s in servers if not s.reference]
    lines = [
        "# UCall benchmark results",
        "",
        f"{meta['started']} · {'quick' if meta['quick'] else 'full'} run · "
        f"{meta['duration_s']:g} s per figure after {meta['warmup_s']:g} s warm-up · "
        f"median of {meta['reps']} run(s), interleaved across servers",
        "",
        f"Host: {meta['host']['cpu']}, {meta['host']['cpus']} CPUs, Linux {meta['host']['kernel']} · "
        f"server on CPU {SERVER_CPU}, load generator on CPU {CLIENT_CPU} · commit {meta['commit']}",
        "",
    ]
    header = ["workload", "metric"] + [s.name for s in servers]
    header += [f"{o.name} / {r.name}" for o in others for r in refs]
    lines.append("| " + " | ".join(header) + " |")
    lines.append("|" + "|".join(["---", "---"] + ["---:"] * (len(header) - 2)) + "|")
    notes = set()
    for wl in workloads:
        key, label = METRICS[wl.metric]
        row = [wl.title, label]
        values = {}
        for s in servers:
            e = summary.get(s.name, {}).get(wl.name)
            v = e.get(key) if e else None
            values[s.name] = v
            cell = fmt_value(wl.metric, v)
            if e and e["errors"]:
                cell += f" ({e['errors']} errors)"
                notes.add("errors")
            if e and e["disturbed_runs"]:
                cell += " *"
                notes.add("disturbed")
            if e and wl.metric == "rps" and (e.get("client_cpu_percent") or 0) >= CLIENT_BOUND_CPU:
                cell += " †"
                notes.add("client-bound")
            row.append(cell)
        for o in others:
            for r in refs:
                a, b = values.get(o.name), values.get(r.name)
                row.append(f"{a / b:.2f}" if a is not None and b else "—")
        lines.append("| " + " | ".join(row) + " |")
    lines.append("")
    if refs and others:
        lines.append(
            "Ratio columns divide the UCall figure by the reference's: for req/s, 1.00 is parity and lower is "
            "slower; for latency, 1.00 is parity and higher is slower."
        )
    if "disturbed" in notes:
        lines.append(
            f"`*` disturbed: at least one run started with a 1-minute load average above {LOADAVG_LIMIT}, or other "
            f"processes used more than {OTHER_CPU_LIMIT:g} % of a CPU while it ran."
        )
    if "client-bound" in notes:
        lines.append(
            f"`†` the load generator used at least {CLIENT_BOUND_CPU:g} % of its CPU: the figure may be bounded by "
            "the client rather than the server, and ratios against it understate the difference."
        )
    if "errors" in notes:
        lines.append("`(N errors)`: failed or unexpected replies summed over the runs; such a figure is not valid.")
    lines += ["", "## Details (medians)", ""]
    lines.append(
        "| workload | server | req/s | p50 µs | p99 µs | p99.9 µs | errors | client CPU % | server CPU % "
        "| other CPU % | steal % | runs (disturbed) |"
    )
    lines.append("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for wl in workloads:
        for s in servers:
            e = summary.get(s.name, {}).get(wl.name)
            if not e:
                continue
            lines.append(
                f"| {wl.name} | {s.name} | {fmt_opt(e['requests_per_s'], ',.0f')} | "
                f"{fmt_opt(e['latency_p50_us'], '.1f')} | {fmt_opt(e['latency_p99_us'], '.1f')} | "
                f"{fmt_opt(e['latency_p999_us'], '.1f')} | {e['errors']} | "
                f"{fmt_opt(e['client_cpu_percent'], '.0f')} | {fmt_opt(e['server_cpu_percent'], '.0f')} | "
                f"{fmt_opt(e['other_cpu_percent'], '.0f')} | {fmt_opt(e['steal_percent'], '.0f')} | "
                f"{e['runs']} ({e['disturbed_runs']}) |"
            )
    lines += ["", "## Servers", ""]
    for s in servers:
        lines.append(f"- `{s.name}`: {s.description}")
    lines += ["", "## Workloads", ""]
    for wl in workloads:
        lines.append(f"- `{wl.name}` ({wl.proto}): {wl.title}")
    return "\n".join(lines) + "\n"


def chart(path: Path, summary: dict, servers: list[Server], workloads: list[Workload]) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        say("matplotlib is not installed: skipping the chart")
        return
    rps = [w for w in workloads if w.metric == "rps"]
    if not rps:
        return
    fig, ax = plt.subplots(figsize=(max(6, 1.6 * len(rps)), 4))
    width = 0.8 / max(1, len(servers))
    for i, s in enumerate(servers):
        ys = [(summary.get(s.name, {}).get(w.name) or {}).get("requests_per_s") or 0 for w in rps]
        ax.bar([x + i * width for x in range(len(rps))], ys, width, label=s.name)
    ax.set_xticks([x + width * (len(servers) - 1) / 2 for x in range(len(rps))])
    ax.set_xticklabels([w.name for w in rps], rotation=20, ha="right")
    ax.set_ylabel("requests/s (median)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path)
    say(f"chart: {path.relative_to(ROOT)}")


def host_info() -> dict:
    cpu = platform.processor() or "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"cpu": cpu, "cpus": os.cpu_count(), "kernel": platform.release(), "python": platform.python_version()}


def git_commit() -> str:
    try:
        rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
        dirty = subprocess.run(["git", "status", "--porcelain"], cwd=ROOT, capture_output=True, text=True)
        return rev.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")
    except OSError:
        return "unknown"


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


def on_sigterm(signum, frame):
    raise KeyboardInterrupt


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="about 2 s per figure, 1 repetition")
    ap.add_argument("--servers", help="comma-separated, from: " + ", ".join(s.name for s in SERVERS))
    ap.add_argument("--workloads", help="comma-separated, from: " + ", ".join(w.name for w in WORKLOADS))
    ap.add_argument("--reps", type=int, help="repetitions of each figure (default 3, or 1 with --quick)")
    ap.add_argument("--duration", type=float, help="seconds measured per figure (default 10, or 2 with --quick)")
    ap.add_argument("--warmup", type=float, help="seconds of warm-up per figure (default 1, or 0.5 with --quick)")
    ap.add_argument("--no-build", action="store_true", help="use the binaries already built")
    args = ap.parse_args()

    signal.signal(signal.SIGTERM, on_sigterm)
    try:
        servers = pick(args.servers, SERVERS, "server", lambda s: s.default)
        workloads = pick(args.workloads, WORKLOADS, "workload", lambda w: True)
        settings = Settings(
            duration=args.duration or (2.0 if args.quick else 10.0),
            warmup=args.warmup if args.warmup is not None else (0.5 if args.quick else 1.0),
            reps=args.reps or (1 if args.quick else 3),
            quick=args.quick,
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
        if not args.no_build:
            build(servers)
        return bench(servers, workloads, settings)
    except BenchError as e:
        print(f"bench: error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("bench: interrupted", file=sys.stderr)
        return 130


def bench(servers: list[Server], workloads: list[Workload], s: Settings) -> int:
    started = dt.datetime.now()
    stamp = started.strftime("%Y%m%d-%H%M%S")
    log_dir = BENCH_DIR / "logs" / stamp
    # For each server, the workloads of each protocol it speaks.
    plan = {
        srv.name: [(proto, wls) for proto in srv.endpoints if (wls := [w for w in workloads if w.proto == proto])]
        for srv in servers
    }
    figures = sum(len(wls) for entries in plan.values() for _, wls in entries)
    per_figure = s.warmup + s.duration
    say(
        f"{len(servers)} server(s), {figures} figure(s) per round, {s.reps} round(s): "
        f"about {figures * s.reps * per_figure / 60:.1f} min of load"
    )
    runs: list[dict] = []
    for rep in range(s.reps):
        # Rotate the server order each round so none always goes first.
        order = servers[rep % len(servers) :] + servers[: rep % len(servers)]
        for srv in order:
            for proto, wls in plan[srv.name]:
                proc = None
                try:
                    proc = ServerProcess(srv, proto, log_dir)
                    say(f"round {rep + 1}/{s.reps}: {srv.name} ({proto}) on {proc.addr}")
                    for wl in wls:
                        runs.append(run_one(proc, srv, proto, wl, rep, s))
                except BenchError as e:
                    say(f"error: {srv.name} ({proto}): {e}")
                    runs.append({"server": srv.name, "proto": proto, "rep": rep, "error": str(e)})
                finally:
                    if proc is not None:
                        proc.stop()

    summary = summarize(runs)
    meta = {
        "started": started.isoformat(timespec="seconds"),
        "quick": s.quick,
        "duration_s": s.duration,
        "warmup_s": s.warmup,
        "reps": s.reps,
        "server_cpu": SERVER_CPU,
        "client_cpu": CLIENT_CPU,
        "loadavg_limit": LOADAVG_LIMIT,
        "other_cpu_limit_percent": OTHER_CPU_LIMIT,
        "host": host_info(),
        "commit": git_commit(),
        "servers": [{"name": x.name, "description": x.description, "reference": x.reference} for x in servers],
        "workloads": [
            {"name": w.name, "title": w.title, "proto": w.proto, "metric": w.metric, "tool": w.tool} for w in workloads
        ],
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    out_json = RESULTS / f"{stamp}.json"
    out_json.write_text(json.dumps({"meta": meta, "summary": summary, "runs": runs}, indent=2) + "\n")
    table = markdown(meta, summary, servers, workloads)
    (RESULTS / "latest.md").write_text(table)
    chart(RESULTS / f"{stamp}.png", summary, servers, workloads)
    print()
    print(table)
    say(f"wrote {out_json.relative_to(ROOT)} and {(RESULTS / 'latest.md').relative_to(ROOT)}")
    failed = [r for r in runs if "error" in r]
    return 1 if failed else 0


def run_one(proc: ServerProcess, srv: Server, proto: str, wl: Workload, rep: int, s: Settings) -> dict:
    load = loadavg()
    t0, (busy0, steal0), server0, client0 = time.monotonic(), cpu_stat(), proc.cpu_seconds(), children_cpu()
    if wl.tool == "wrk":
        result = run_wrk(proc.addr, wl, s)
    else:
        result = run_ucall_load(proc.addr, wl, srv.endpoints[proto].expect, s)
    t1, (busy1, steal1), server1, client1 = time.monotonic(), cpu_stat(), proc.cpu_seconds(), children_cpu()
    if proc.proc.poll() is not None:
        raise BenchError(f"{proc.name} exited ({proc.proc.returncode}) during {wl.name}")
    # These cover the whole load run, warm-up included.
    wall = t1 - t0
    server = server1 - server0 if server0 is not None and server1 is not None else None
    result["server_cpu_percent"] = 100 * server / wall if server is not None else None
    other = (busy1 - busy0) - (server or 0.0) - (client1 - client0)
    result["other_cpu_percent"] = max(0.0, 100 * other / wall)
    result["steal_percent"] = 100 * (steal1 - steal0) / wall
    disturbed = load > LOADAVG_LIMIT or result["other_cpu_percent"] > OTHER_CPU_LIMIT
    key, _ = METRICS[wl.metric]
    flag = (
        f"  DISTURBED (load average {load:.2f}, other processes {result['other_cpu_percent']:.0f} % CPU)"
        if disturbed
        else ""
    )
    errs = f", {result['errors']} errors" if result.get("errors") else ""
    say(
        f"  {wl.name:<24} {fmt_value(wl.metric, result.get(key)):>12} {wl.metric}"
        f"  (p50 {fmt_opt(result.get('latency_p50_us'), '.1f')} µs, {result['requests_per_s']:,.0f} req/s{errs}){flag}"
    )
    return {
        "server": srv.name,
        "workload": wl.name,
        "proto": proto,
        "tool": wl.tool,
        "rep": rep,
        "loadavg_before": load,
        "disturbed": disturbed,
        "result": result,
    }


if __name__ == "__main__":
    sys.exit(main())
