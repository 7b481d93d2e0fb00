# SPDX-License-Identifier: Apache-2.0
"""Fault injection behind a load balancer, on loopback: the recipe of deploy/ under fire.

Three backends (``ucall serve scale_app:server --workers 1``) run behind HAProxy, then
behind nginx, with the configurations of deploy/. A bounded client offers calls at a
steady rate, each with a unique key that the backend appends to its ledger before it
answers. Meanwhile the faults come, one after the other:

- a rolling restart: each backend in turn stopped with SIGTERM (it drains: rpc.health
  fails at once, it serves on for its drain_delay, then stops) and started again. HAProxy
  sees the readiness check fail and sends it nothing new; nginx, which has no active
  checks in its open-source build, finds the port closed once the drain ends and tries
  the next backend (nothing was sent, so even a POST moves on);
- SIGKILL of one backend (its whole process group), started again 2 s later;
- SIGSTOP of one backend for 3 s, then SIGCONT;
- a reload of the load balancer.

The report gives calls offered and answered, errors by kind and by fault window,
latency percentiles inside and outside the windows, how long the balancer took to mark a
killed backend down and to send it a call once started again, and the ledger check. The
run passes when every answered call is in a ledger exactly once, no key ran twice, and no
call failed during the rolling restart.

    python tests/scale/scale_test.py --balancer both --rate 300 --seconds 60   # make scale-test
    python tests/scale/scale_test.py --balancer haproxy --rate 100 --seconds 25  # make test
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import http.client
import json
import os
import select
import shutil
import signal
import socket
import string
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fault_run import check_ledger, drive, log, percentile  # noqa: E402

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
DEPLOY = ROOT / "deploy"
CHECK_INTER_MS = 200  # HAProxy's check interval here: a backend is marked down in about 0.5 s
DRAIN_DELAY = 1.0  # longer than two check intervals and a reply
CALL_TIMEOUT = 10.0
CLIENT_THREADS = 24


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def in_netns(netns: str | None) -> list[str]:
    """The command prefix that runs a program in a network namespace (``ip netns exec``
    execs it, so the process keeps its pid)."""
    return ["ip", "netns", "exec", netns] if netns else []


# ------------------------------------------------------------------ backends


class Backend:
    """``ucall serve scale_app:server --workers 1`` in a process group of its own."""

    def __init__(
        self, name: str, port: int, ledgers: Path, work: Path, host: str = "127.0.0.1", netns: str | None = None
    ) -> None:
        self.name = name
        self.port = port
        self.host = host
        self.netns = netns  # a network namespace to run in (the chaos test's)
        self.ledgers = ledgers
        self.work = work
        self.proc: subprocess.Popen[bytes] | None = None
        self.started_at = 0.0
        self.pids: set[int] = set()

    def start(self) -> None:
        env = dict(
            os.environ,
            UCALL_LEDGER_DIR=str(self.ledgers),
            UCALL_BACKEND_NAME=self.name,
            PYTHONPATH=os.pathsep.join([str(ROOT / "python"), str(HERE)]),
        )
        command = [
            *in_netns(self.netns),
            sys.executable,
            "-m",
            "ucall",
            "serve",
            "scale_app:server",
            "--host",
            self.host,
        ]
        command += ["--port", str(self.port), "--workers", "1", "--drain-delay", str(DRAIN_DELAY)]
        with open(self.work / f"{self.name}.log", "ab") as out:
            self.proc = subprocess.Popen(command, cwd=HERE, stdout=out, stderr=out, env=env, start_new_session=True)
        self.pids.add(self.proc.pid)
        self.started_at = time.monotonic()

    def wait_serving(self, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited: {(self.work / f'{self.name}.log').read_text()[-2000:]}")
            with contextlib.suppress(OSError, ValueError):
                conn = http.client.HTTPConnection(self.host, self.port, timeout=1)
                conn.request("GET", "/rpc.health")
                if conn.getresponse().status == 200:
                    conn.close()
                    return
                conn.close()
            time.sleep(0.05)
        raise RuntimeError(f"{self.name} did not serve within {timeout} s")

    def signal_group(self, number: int) -> None:
        assert self.proc is not None
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, number)

    def stop(self, timeout: float = 15) -> None:
        """SIGTERM to the supervisor (a graceful drain); returns once it exited."""
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.signal_group(signal.SIGKILL)
            self.proc.wait(5)

    def kill_all(self) -> None:
        """At the end: every process this backend ever had, by pid (the workers' pids are
        in their ledger files' names)."""
        for path in self.ledgers.glob(f"{self.name}-*.ledger"):
            self.pids.add(int(path.stem.rsplit("-", 1)[1]))
        if self.proc is not None and self.proc.poll() is None:
            self.signal_group(signal.SIGCONT)
            self.stop(5)
        for pid in self.pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        if self.proc is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(5)


# ------------------------------------------------------------------ balancers


class Balancer:
    name = ""
    proc: subprocess.Popen[bytes] | None = None

    def __init__(self, backends: list[Backend], work: Path, host: str = "127.0.0.1", netns: str | None = None) -> None:
        self.backends = backends
        self.work = work / self.name
        self.work.mkdir(parents=True, exist_ok=True)
        self.host = host
        self.netns = netns
        self.http_port = free_port() if netns is None else 8545
        self.tcp_port = free_port() if netns is None else 8546
        self.status: dict[str, list[tuple[float, str]]] = collections.defaultdict(list)

    def start(self) -> None:
        raise NotImplementedError

    def reload(self) -> None:
        raise NotImplementedError

    def wait_in_service(self, backend: Backend, timeout: float = 15) -> None:
        """Until the balancer sends calls to ``backend`` again."""

    def watch(self, stop: threading.Event) -> None:
        """Record when the balancer marks each backend up or down (where it tells)."""

    def wait_listening(self, timeout: float = 15) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError):
                socket.create_connection((self.host, self.http_port), timeout=1).close()
                return
            time.sleep(0.05)
        raise RuntimeError(f"{self.name} did not listen")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)


class HAProxy(Balancer):
    name = "haproxy"

    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update(
            HAPROXY_SOCKET=str(self.work / "admin.sock"),
            UCALL_HTTP_BIND=f"{self.host}:{self.http_port}",
            UCALL_TCP_BIND=f"{self.host}:{self.tcp_port}",
            UCALL_CHECK_INTER=f"{CHECK_INTER_MS}ms",
        )
        for i, backend in enumerate(self.backends, 1):
            env[f"UCALL_BACKEND_{i}"] = f"{backend.host}:{backend.port}"
        return env

    def start(self) -> None:
        with open(self.work / "haproxy.log", "ab") as out:
            # -W: master-worker, so that SIGUSR2 reloads; -db: in the foreground.
            self.proc = subprocess.Popen(
                [*in_netns(self.netns), "haproxy", "-W", "-db", "-f", str(DEPLOY / "haproxy.cfg")],
                stdout=out,
                stderr=out,
                env=self.env(),
            )
        self.wait_listening()

    def reload(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGUSR2)

    def states(self) -> dict[str, str]:
        """``show stat`` of the runtime API: the status of each server of ucall_http."""
        with socket.socket(socket.AF_UNIX) as sock:
            sock.settimeout(1)
            sock.connect(str(self.work / "admin.sock"))
            sock.sendall(b"show stat\n")
            data = b""
            while chunk := sock.recv(65536):
                data += chunk
        lines = data.decode().splitlines()
        header = lines[0].lstrip("# ").split(",")
        at, name, status = header.index("pxname"), header.index("svname"), header.index("status")
        found = {}
        for line in lines[1:]:
            cells = line.split(",")
            if len(cells) > status and cells[at] == "ucall_http" and cells[name] not in ("FRONTEND", "BACKEND"):
                found[cells[name]] = cells[status]
        return found

    def server_name(self, backend: Backend) -> str:
        return f"s{self.backends.index(backend) + 1}"

    def watch(self, stop: threading.Event) -> None:
        last: dict[str, str] = {}
        while not stop.wait(0.02):
            with contextlib.suppress(OSError, ValueError, IndexError):
                for server, state in self.states().items():
                    word = "UP" if state.startswith("UP") else "DOWN" if state.startswith("DOWN") else state
                    if last.get(server) != word:
                        last[server] = word
                        self.status[server].append((time.monotonic(), word))

    def wait_in_service(self, backend: Backend, timeout: float = 15) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError, ValueError, IndexError):
                if self.states().get(self.server_name(backend), "").startswith("UP"):
                    # "UP 1/2" is still down; a plain UP is in service.
                    if self.states()[self.server_name(backend)] == "UP":
                        return
            time.sleep(0.02)
        raise RuntimeError(f"haproxy did not mark {backend.name} up within {timeout} s")


class Nginx(Balancer):
    name = "nginx"

    def render(self) -> None:
        values = {
            "UCALL_PREFIX": str(self.work),
            "UCALL_HTTP_LISTEN": f"{self.host}:{self.http_port}",
            "UCALL_TCP_LISTEN": f"{self.host}:{self.tcp_port}",
        }
        for i, backend in enumerate(self.backends, 1):
            values[f"UCALL_BACKEND_{i}"] = f"{backend.host}:{backend.port}"
        # safe_substitute: nginx's own $variables stay as they are (envsubst with a list).
        text = string.Template((DEPLOY / "nginx.conf.template").read_text()).safe_substitute(values)
        (self.work / "nginx.conf").write_text(text)

    def start(self) -> None:
        self.render()
        with open(self.work / "nginx.out", "ab") as out:
            self.proc = subprocess.Popen(
                [
                    *in_netns(self.netns),
                    "nginx",
                    "-p",
                    str(self.work),
                    "-c",
                    str(self.work / "nginx.conf"),
                    "-g",
                    "daemon off;",
                ],
                stdout=out,
                stderr=out,
            )
        self.wait_listening()

    def reload(self) -> None:
        assert self.proc is not None
        self.render()
        self.proc.send_signal(signal.SIGHUP)


# ------------------------------------------------------------------ the client


@dataclass
class Outcome:
    key: str
    sent: float
    latency: float
    kind: str  # "ok", or the error's kind
    # What a failure says of the call: False where it could not have run (no byte of it
    # left this host, or the server's error says "executed": false).
    may_have_run: bool = False


@dataclass
class Client:
    port: int
    rate: float
    seconds: float
    host: str = "127.0.0.1"
    outcomes: list[Outcome] = field(default_factory=list)
    replaced: int = 0  # idle keep-alive connections found closed before a call
    resent: int = 0  # calls sent again after a connection failed before the call left
    ended: float = 0.0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def run(self, tag: str) -> None:
        start = time.monotonic() + 0.2
        total = int(self.rate * self.seconds)
        end = start + self.seconds + 15  # a bound: slots still unsent then are not offered
        threads = [
            threading.Thread(target=self._drive, args=(tag, i, start, total, end), daemon=True)
            for i in range(CLIENT_THREADS)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(self.seconds + 40)
        self.ended = time.monotonic()

    def _drive(self, tag: str, index: int, start: float, total: int, end: float) -> None:
        conn: http.client.HTTPConnection | None = None
        for slot in range(index, total, CLIENT_THREADS):
            due = start + slot / self.rate
            now = time.monotonic()
            if now >= end:
                break
            if due > now:
                time.sleep(due - now)
            key = f"{tag}-{slot}"
            body = json.dumps({"jsonrpc": "2.0", "method": "record", "params": {"key": key}, "id": slot})
            sent = time.monotonic()
            kind = "ok"
            may_have_run = False
            if conn is not None and conn.sock is not None and closed_by_peer(conn.sock):
                # As urllib3 does before reusing a pooled connection: one the balancer
                # closed while idle (a reload does) is replaced, the call not yet sent.
                conn.close()
                conn = None
                with self.lock:
                    self.replaced += 1
            for attempt in (1, 2):
                phase = "on connect"
                try:
                    if conn is None:
                        conn = http.client.HTTPConnection(self.host, self.port, timeout=CALL_TIMEOUT)
                        conn.connect()
                    phase = "on send"
                    # http.client sends a small request in one send(): when that fails,
                    # nothing of the call left this host.
                    conn.request("POST", "/", body, {"Content-Type": "application/json"})
                    phase = "on reply"
                    reply = conn.getresponse()
                    data = reply.read()
                    if reply.status != 200:
                        kind = f"HTTP {reply.status}"
                        may_have_run = not refused_unrun(data)
                    else:
                        answer = json.loads(data)
                        if "error" in answer:
                            kind = f"JSON-RPC {answer['error'].get('code')}"
                            may_have_run = not refused_unrun(data)
                        elif answer.get("result") != key:
                            kind = "wrong result"
                    if reply.will_close:
                        conn.close()
                        conn = None
                except (OSError, http.client.HTTPException, ValueError) as error:
                    kind = f"{type(error).__name__} {phase}"
                    may_have_run = phase == "on reply"
                    if conn is not None:
                        conn.close()
                    conn = None
                    if phase != "on reply" and attempt == 1:
                        # Not sent: safe to send again, once, on a new connection.
                        with self.lock:
                            self.resent += 1
                        kind = "ok"
                        continue
                break
            with self.lock:
                self.outcomes.append(Outcome(key, sent, time.monotonic() - sent, kind, may_have_run))
        if conn is not None:
            conn.close()


def refused_unrun(body: bytes) -> bool:
    """Whether an error reply says the call did not run: a JSON-RPC error whose data has
    ``"executed": false`` (a balancer's own error page says nothing, so it may have)."""
    with contextlib.suppress(ValueError, AttributeError, TypeError):
        error = json.loads(body).get("error") or {}
        return (error.get("data") or {}).get("executed") is False
    return False


def closed_by_peer(sock: socket.socket) -> bool:
    """Whether an idle connection has something to read: the peer closed it (or sent what
    no request asked for); either way it is not fit to carry a call."""
    readable, _, _ = select.select([sock], [], [], 0)
    return bool(readable)


# ------------------------------------------------------------------ faults


@dataclass
class Window:
    name: str
    start: float
    end: float = 0.0
    facts: dict[str, Any] = field(default_factory=dict)


def rolling_restart(balancer: Balancer, backends: list[Backend], windows: list[Window]) -> None:
    window = Window("rolling restart (SIGTERM)", time.monotonic())
    windows.append(window)
    for backend in backends:
        backend.stop()
        backend.start()
        backend.wait_serving()
        balancer.wait_in_service(backend)
    window.end = time.monotonic()


def kill_one(balancer: Balancer, backend: Backend, windows: list[Window]) -> None:
    window = Window(f"SIGKILL {backend.name}", time.monotonic())
    windows.append(window)
    backend.signal_group(signal.SIGKILL)
    assert backend.proc is not None
    backend.proc.wait(5)
    time.sleep(2)
    restarted = time.monotonic()
    window.facts["killed_at"] = window.start
    window.facts["restarted_at"] = restarted
    backend.start()
    backend.wait_serving()
    balancer.wait_in_service(backend)
    window.end = time.monotonic() + 0.5


def stop_one(balancer: Balancer, backend: Backend, windows: list[Window]) -> None:
    window = Window(f"SIGSTOP {backend.name} 3 s", time.monotonic())
    windows.append(window)
    backend.signal_group(signal.SIGSTOP)
    time.sleep(3)
    backend.signal_group(signal.SIGCONT)
    balancer.wait_in_service(backend)
    window.end = time.monotonic() + 0.5


def reload_balancer(balancer: Balancer, windows: list[Window]) -> None:
    window = Window(f"{balancer.name} reload", time.monotonic())
    windows.append(window)
    balancer.reload()
    time.sleep(1.5)
    window.end = time.monotonic()


# ------------------------------------------------------------------ the run and its report


def run_one(kind: str, rate: float, seconds: float, work: Path) -> dict[str, Any]:
    ledgers = work / "ledgers"
    ledgers.mkdir(parents=True, exist_ok=True)
    backends = [Backend(f"{kind}-b{i}", free_port(), ledgers, work) for i in (1, 2, 3)]
    balancer: Balancer = HAProxy(backends, work) if kind == "haproxy" else Nginx(backends, work)
    windows: list[Window] = []
    client = Client(balancer.http_port, rate, seconds)
    faults: list[tuple[str, Callable[[], None]]] = [
        ("rolling restart", lambda: rolling_restart(balancer, backends, windows)),
        ("SIGKILL", lambda: kill_one(balancer, backends[1], windows)),
        ("SIGSTOP", lambda: stop_one(balancer, backends[2], windows)),
        ("reload", lambda: reload_balancer(balancer, windows)),
    ]
    began = drive(kind, backends, balancer, client, faults, seconds, windows)
    return report(kind, client, windows, balancer, ledgers, began)


def report(
    kind: str, client: Client, windows: list[Window], balancer: Balancer, ledgers: Path, began: float
) -> dict[str, Any]:
    outcomes = client.outcomes
    ran = check_ledger(ledgers, kind, outcomes)
    counts, where, answered, missing, twice = ran.counts, ran.where, ran.answered, ran.missing, ran.twice
    unanswered_ran = sum(1 for o in outcomes if o.kind != "ok" and counts[o.key] > 0)

    def window_of(o: Outcome) -> str | None:
        for w in windows:
            if w.start <= o.sent <= w.end:
                return w.name
        return None

    errors: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    inside, outside = [], []
    for o in outcomes:
        w = window_of(o)
        (inside if w else outside).append(o.latency)
        if o.kind != "ok":
            errors[w or "outside the fault windows"][o.kind] += 1
    facts = {}
    for w in windows:
        if "killed_at" in w.facts and isinstance(balancer, HAProxy):
            server = f"s{2}"
            downs = [t for t, s in balancer.status[server] if s == "DOWN" and t >= w.facts["killed_at"]]
            facts["kill to marked down (s)"] = round(downs[0] - w.facts["killed_at"], 3) if downs else None
        if "restarted_at" in w.facts:
            backend = f"{kind}-b2"
            firsts = [
                o.sent + o.latency
                for o in answered
                if o.sent >= w.facts["restarted_at"] and where.get(o.key, "").startswith(backend + "-")
            ]
            facts["restart to first success (s)"] = round(min(firsts) - w.facts["restarted_at"], 3) if firsts else None
    rolling = next((w.name for w in windows if w.name.startswith("rolling")), "")
    late = [w.name for w in windows if w.end > client.ended]
    result = {
        "balancer": kind,
        "offered": len(outcomes),
        "answered": len(answered),
        "errors by window": {w: dict(c) for w, c in errors.items()},
        "windows (s from start)": {w.name: [round(w.start - began, 2), round(w.end - began, 2)] for w in windows},
        "latency inside windows ms (p50, p99, max)": [round(1000 * percentile(inside, q), 2) for q in (0.5, 0.99, 1)],
        "latency outside windows ms (p50, p99, max)": [round(1000 * percentile(outside, q), 2) for q in (0.5, 0.99, 1)],
        **facts,
        "ledger: answered but not run": len(missing),
        "ledger: keys run more than once": len(twice),
        "ledger: failed calls that ran (not retried)": unanswered_ran,
        "failed during the rolling restart": sum(errors.get(rolling, {}).values()),
        "idle connections found closed and replaced": client.replaced,
        "calls sent again (the first try failed before sending)": client.resent,
        "fault windows past the end of the traffic": late,
    }
    result["passed"] = (
        not missing
        and not twice
        and result["failed during the rolling restart"] == 0
        and len(answered) > 0
        and not late  # a fault without traffic tests nothing
    )
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--balancer", choices=["haproxy", "nginx", "both"], default="both")
    parser.add_argument("--rate", type=float, default=300, help="calls offered per second")
    parser.add_argument("--seconds", type=float, default=60, help="how long the client offers calls")
    parser.add_argument("--keep", action="store_true", help="keep the work folder (logs, ledgers)")
    parser.add_argument("--json", type=Path, help="also write the report here")
    args = parser.parse_args()
    for tool in ("haproxy", "nginx"):
        if args.balancer in (tool, "both") and shutil.which(tool) is None:
            print(f"scale test: {tool} is missing: make setup installs it", file=sys.stderr)
            return 2
    work = Path(tempfile.mkdtemp(prefix="ucall-scale-"))
    results = []
    try:
        for kind in ("haproxy", "nginx") if args.balancer == "both" else (args.balancer,):
            log(f"{kind}: {args.rate:g} calls/s for {args.seconds:g} s")
            result = run_one(kind, args.rate, args.seconds, work)
            print(json.dumps(result, indent=2), flush=True)
            results.append(result)
    finally:
        if args.keep:
            log(f"work folder kept: {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    passed = all(r["passed"] for r in results)
    print(f"scale test: {'passed' if passed else 'FAILED'}", flush=True)
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
