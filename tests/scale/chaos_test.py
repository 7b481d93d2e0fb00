# SPDX-License-Identifier: Apache-2.0
"""Network faults across network namespaces: the scale test off loopback.

Every piece gets a network namespace of its own: three backends (``ucall serve
scale_app:server --workers 1``), the balancer (HAProxy, then nginx, configured by deploy/)
and the client (this program's threads, which move into it). The balancer's namespace has
a veth link to each backend and one to the client, and forwards between them::

    client 198.18.0.2 ── 198.18.0.1 balancer 198.18.N.1 ── 198.18.N.2 backend N (N = 1..3)

(198.18.0.0/15 is the range set aside for benchmarking networks; nothing of it leaves these
namespaces.) While the client offers calls at a steady rate, each with a key its backend
appends to a ledger before answering, the faults come one after the other:

- packet loss: nftables' ``numgen random mod N 0 drop`` on backend 1's link (both ways),
  then on the client's link (this kernel has no netem);
- a slow link: ``tc tbf`` shapes backend 1's link to a low rate;
- a partition: backend 2's end of its link set down (``ip link set down``: no FIN, no RST
  reaches anyone), then up again;
- backend 3 frozen (SIGSTOP) for 3 s, then SIGCONT;
- backend 2 killed (SIGKILL), started again 2 s later;
- the balancer reloaded.

It passes when no answered call is missing from a ledger, no key ran twice, every failed
call says whether it may have run (and none that says it did not is in a ledger), and the
time to detect a dead backend and to put it back are within the bounds that follow from
deploy/'s settings (`Bounds`). Where network namespaces cannot be made (not root, no
CAP_NET_ADMIN, no ``ip``/``nft``) it says so and exits 77, never 0.

    python tests/scale/chaos_test.py --balancer both --rate 200 --seconds 60   # make chaos
    python tests/scale/chaos_test.py --short                                    # make test
"""

from __future__ import annotations

import argparse
import collections
import ctypes
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fault_run import check_ledger, drive, log, percentile  # noqa: E402
import scale_test  # noqa: E402
from scale_test import Backend, Balancer, Client, HAProxy, Nginx, Window  # noqa: E402

SKIPPED = 77  # the exit code of a run that could not make its namespaces (as automake's)
CLONE_NEWNET = 0x40000000
PREFIX = f"ucall-chaos-{os.getpid()}-"  # names of this run's namespaces
CLIENT_NS, BALANCER_NS = f"{PREFIX}client", f"{PREFIX}balancer"
BALANCER_ADDRESS = "198.18.0.1"


def backend_ns(i: int) -> str:
    return f"{PREFIX}b{i}"


def backend_address(i: int) -> str:
    return f"198.18.{i}.2"


@dataclass
class Bounds:
    """What deploy/ promises, from its settings (the test's check interval is shorter than
    deploy/haproxy.cfg's 500 ms default, as in the scale test: UCALL_CHECK_INTER)."""

    # HAProxy: "inter" between checks, "fall 2", "rise 2", "timeout check 1s".
    inter: float = scale_test.CHECK_INTER_MS / 1000
    fall: int = 2
    rise: int = 2
    timeout_check: float = 1.0
    # nginx: proxy_connect_timeout 1s, fail_timeout=2s.
    connect_timeout: float = 1.0
    fail_timeout: float = 2.0
    slack: float = 1.0  # a loaded 2-core host's scheduling, and the watcher's 20 ms polls

    def haproxy_detect(self) -> float:
        # Each failing check ends by its time-out at the latest, one interval apart.
        return self.fall * (self.inter + self.timeout_check) + self.slack

    def haproxy_recover(self) -> float:
        return (self.rise + 1) * self.inter + self.slack

    def nginx_recover(self) -> float:
        # A failed server is tried again once fail_timeout has passed, on the next call.
        return self.fail_timeout + self.connect_timeout + self.slack


# ------------------------------------------------------------------ namespaces


def run(*command: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, check=check, capture_output=True, text=True, timeout=30)


def cannot_make_namespaces() -> str | None:
    """Why this host cannot run the test, or None."""
    if os.geteuid() != 0:
        return "not root: network namespaces and veth links need CAP_NET_ADMIN and CAP_SYS_ADMIN"
    for tool in ("ip", "nft", "tc", "haproxy", "nginx"):
        if shutil.which(tool) is None:
            return f"{tool} is missing (make setup installs iproute2, nftables, haproxy, nginx)"
    probe = f"{PREFIX}probe"
    made = run("ip", "netns", "add", probe, check=False)
    if made.returncode != 0:
        return f"ip netns add failed: {made.stderr.strip()}"
    try:
        veth = run("ip", "-n", probe, "link", "add", "name", "v0", "type", "veth", "peer", "name", "v1", check=False)
        if veth.returncode != 0:
            return f"veth links cannot be made: {veth.stderr.strip()}"
        nft = run("ip", "netns", "exec", probe, "nft", "add", "table", "inet", "probe", check=False)
        if nft.returncode != 0:
            return f"nftables does not work in a namespace: {nft.stderr.strip()}"
    finally:
        run("ip", "netns", "del", probe, check=False)
    return None


class Network:
    """The namespaces and links, made at once and deleted by ``close`` (always called)."""

    def __init__(self) -> None:
        self.made: list[str] = []

    def make(self) -> None:
        self.forget_dead_runs()
        for ns in [CLIENT_NS, BALANCER_NS] + [backend_ns(i) for i in (1, 2, 3)]:
            run("ip", "netns", "add", ns)
            self.made.append(ns)
            run("ip", "-n", ns, "link", "set", "lo", "up")
        run("ip", "netns", "exec", BALANCER_NS, "sysctl", "-qw", "net.ipv4.ip_forward=1")
        self._link(CLIENT_NS, "198.18.0.2", "lc", "198.18.0.1")
        for i in (1, 2, 3):
            self._link(backend_ns(i), backend_address(i), f"lb{i}", f"198.18.{i}.1")

    @staticmethod
    def forget_dead_runs() -> None:
        """Namespaces a run killed by SIGKILL left behind (named after its pid) go."""
        for line in run("ip", "netns", "list").stdout.splitlines():
            name = line.split()[0] if line.strip() else ""
            pid = name.removeprefix("ucall-chaos-").split("-")[0]
            if name.startswith("ucall-chaos-") and pid.isdigit() and not Path(f"/proc/{pid}").exists():
                run("ip", "netns", "del", name, check=False)

    def _link(self, far_ns: str, far_address: str, near_name: str, near_address: str) -> None:
        """A veth link from the balancer's namespace (``near_name``) to ``far_ns`` (eth0),
        the far end routing everything through the balancer."""
        run(
            "ip",
            "-n",
            BALANCER_NS,
            "link",
            "add",
            "name",
            near_name,
            "type",
            "veth",
            "peer",
            "name",
            "eth0",
            "netns",
            far_ns,
        )
        run("ip", "-n", BALANCER_NS, "addr", "add", f"{near_address}/24", "dev", near_name)
        run("ip", "-n", BALANCER_NS, "link", "set", near_name, "up")
        run("ip", "-n", far_ns, "addr", "add", f"{far_address}/24", "dev", "eth0")
        self.link_up(far_ns, near_address)

    @staticmethod
    def link_up(ns: str, gateway: str) -> None:
        run("ip", "-n", ns, "link", "set", "eth0", "up")
        # A link set down loses its routes; the default one comes back by hand.
        run("ip", "-n", ns, "route", "replace", "default", "via", gateway)

    @staticmethod
    def link_down(ns: str) -> None:
        run("ip", "-n", ns, "link", "set", "eth0", "down")

    @staticmethod
    def loss(ns: str, one_in: int) -> None:
        """Drop one packet in ``one_in`` at random, both ways, on the namespace's link."""
        nft = ["ip", "netns", "exec", ns, "nft"]
        run(*nft, "add", "table", "inet", "chaos")
        for chain, hook in (("incoming", "input"), ("outgoing", "output")):
            run(*nft, "add", "chain", "inet", "chaos", chain, f"{{ type filter hook {hook} priority 0; }}")
            run(
                *nft,
                "add",
                "rule",
                "inet",
                "chaos",
                chain,
                "iifname" if hook == "input" else "oifname",
                "eth0",
                "numgen",
                "random",
                "mod",
                str(one_in),
                "0",
                "drop",
            )

    @staticmethod
    def no_loss(ns: str) -> None:
        run("ip", "netns", "exec", ns, "nft", "delete", "table", "inet", "chaos")

    @staticmethod
    def shape(ns: str, rate: str) -> None:
        run(
            "tc",
            "-n",
            ns,
            "qdisc",
            "add",
            "dev",
            "eth0",
            "root",
            "tbf",
            "rate",
            rate,
            "burst",
            "16kb",
            "latency",
            "200ms",
        )

    @staticmethod
    def unshape(ns: str) -> None:
        run("tc", "-n", ns, "qdisc", "del", "dev", "eth0", "root")

    def enter_client(self) -> None:
        """This thread (and the threads it starts from now on) into the client's namespace:
        the calls, and the checks that a backend serves, go out over its link."""
        libc = ctypes.CDLL(None, use_errno=True)
        fd = os.open(f"/run/netns/{CLIENT_NS}", os.O_RDONLY)
        try:
            if libc.setns(fd, CLONE_NEWNET) != 0:
                raise OSError(ctypes.get_errno(), "setns into the client's namespace")
        finally:
            os.close(fd)

    def close(self) -> None:
        for ns in reversed(self.made):
            run("ip", "netns", "del", ns, check=False)
        self.made.clear()


# ------------------------------------------------------------------ faults


def timed(name: str, windows: list[Window], action: Callable[[Window], None]) -> None:
    window = Window(name, time.monotonic())
    windows.append(window)
    action(window)
    window.end = time.monotonic() + 0.5


def plan(
    net: Network, balancer: Balancer, backends: list[Backend], short: bool
) -> list[tuple[str, Callable[[Window], None]]]:
    b1, b2, b3 = backends

    def lossy(ns: str, one_in: int, seconds: float) -> Callable[[Window], None]:
        def action(window: Window) -> None:
            net.loss(ns, one_in)
            try:
                time.sleep(seconds)
            finally:
                net.no_loss(ns)

        return action

    def slow_link(window: Window) -> None:
        net.shape(b1.netns or "", "256kbit")
        try:
            time.sleep(3)
        finally:
            net.unshape(b1.netns or "")

    def partition(window: Window) -> None:
        window.facts["down_at"] = time.monotonic()
        window.facts["backend"] = b2
        net.link_down(b2.netns or "")
        time.sleep(4)
        net.link_up(b2.netns or "", "198.18.2.1")
        window.facts["back_at"] = time.monotonic()
        balancer.wait_in_service(b2)

    def freeze(window: Window) -> None:
        b3.signal_group(signal.SIGSTOP)
        time.sleep(3)
        b3.signal_group(signal.SIGCONT)
        balancer.wait_in_service(b3)

    def kill(window: Window) -> None:
        window.facts["down_at"] = time.monotonic()
        window.facts["backend"] = b2
        b2.signal_group(signal.SIGKILL)
        assert b2.proc is not None
        b2.proc.wait(5)
        time.sleep(2)
        b2.start()
        b2.wait_serving()
        window.facts["back_at"] = time.monotonic()  # serving again: from here it is the balancer's
        balancer.wait_in_service(b2)

    def reload(window: Window) -> None:
        balancer.reload()
        time.sleep(1.5)

    faults = [
        ("loss 1 in 10, backend 1's link", lossy(b1.netns or "", 10, 3)),
        ("partition of backend 2 (link down 4 s)", partition),
        ("SIGKILL backend 2, restarted 2 s later", kill),
    ]
    if not short:
        faults[1:1] = [
            ("loss 1 in 20, the client's link", lossy(CLIENT_NS, 20, 3)),
            ("backend 1's link shaped to 256 kbit/s", slow_link),
        ]
        faults += [("SIGSTOP backend 3 for 3 s", freeze), (f"{balancer.name} reload", reload)]
    return faults


# ------------------------------------------------------------------ the run and its report


def run_one(kind: str, rate: float, seconds: float, work: Path, net: Network, short: bool) -> dict[str, Any]:
    ledgers = work / "ledgers"
    ledgers.mkdir(parents=True, exist_ok=True)
    backends = [
        Backend(f"{kind}-b{i}", 8545, ledgers, work, host=backend_address(i), netns=backend_ns(i)) for i in (1, 2, 3)
    ]
    balancer: Balancer = (HAProxy if kind == "haproxy" else Nginx)(backends, work, BALANCER_ADDRESS, BALANCER_NS)
    windows: list[Window] = []
    client = Client(balancer.http_port, rate, seconds, host=BALANCER_ADDRESS)
    faults = [
        (name, lambda name=name, action=action: timed(name, windows, action))
        for name, action in plan(net, balancer, backends, short)
    ]
    began = drive(kind, backends, balancer, client, faults, seconds, windows)
    return report(kind, client, windows, balancer, ledgers, began)


def report(
    kind: str, client: Client, windows: list[Window], balancer: Balancer, ledgers: Path, began: float
) -> dict[str, Any]:
    outcomes = client.outcomes
    ran = check_ledger(ledgers, kind, outcomes)
    counts, where, answered, missing, twice = ran.counts, ran.where, ran.answered, ran.missing, ran.twice
    failed = [o for o in outcomes if o.kind != "ok"]
    # A failure that says the call did not run, and yet it ran, would be a lie.
    said_unrun_but_ran = [o.key for o in failed if not o.may_have_run and counts[o.key] > 0]
    bounds = Bounds()
    errors: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    for o in failed:
        name = next((w.name for w in windows if w.start <= o.sent <= w.end), "outside the fault windows")
        verdict = "may have run" if o.may_have_run else "did not run"
        errors[name][f"{o.kind} ({verdict})"] += 1
    timings: dict[str, dict[str, float | None]] = {}
    out_of_bounds: list[str] = []
    for w in windows:
        if "down_at" not in w.facts:
            continue
        backend: Backend = w.facts["backend"]
        server = f"s{balancer.backends.index(backend) + 1}"
        entry: dict[str, float | None] = {}
        if isinstance(balancer, HAProxy):
            downs = [t for t, s in balancer.status[server] if s == "DOWN" and t >= w.facts["down_at"]]
            entry["detected (s)"] = round(downs[0] - w.facts["down_at"], 3) if downs else None
            if entry["detected (s)"] is None or entry["detected (s)"] > bounds.haproxy_detect():
                out_of_bounds.append(f"{w.name}: detected {entry['detected (s)']} s > {bounds.haproxy_detect():.1f} s")
        firsts = [
            o.sent + o.latency
            for o in answered
            if o.sent >= w.facts["back_at"] and where.get(o.key, "").startswith(backend.name + "-")
        ]
        entry["recovered (s)"] = round(min(firsts) - w.facts["back_at"], 3) if firsts else None
        limit = bounds.haproxy_recover() if isinstance(balancer, HAProxy) else bounds.nginx_recover()
        if entry["recovered (s)"] is None or entry["recovered (s)"] > limit:
            out_of_bounds.append(f"{w.name}: recovered {entry['recovered (s)']} s > {limit:.1f} s")
        timings[w.name] = entry
    late = [w.name for w in windows if w.end > client.ended]
    inside = [o.latency for o in outcomes if any(w.start <= o.sent <= w.end for w in windows)]
    outside_calls = [o for o in outcomes if not any(w.start <= o.sent <= w.end for w in windows)]
    outside = [o.latency for o in outside_calls]
    slowest_outside = max(outside_calls, key=lambda o: o.latency, default=None)
    slowest_by_window = {
        w.name: round(max((o.latency for o in outcomes if w.start <= o.sent <= w.end), default=0), 3) for w in windows
    }
    result: dict[str, Any] = {
        "balancer": kind,
        "offered": len(outcomes),
        "answered": len(answered),
        "errors by window": {w: dict(c) for w, c in errors.items()},
        "windows (s from start)": {w.name: [round(w.start - began, 2), round(w.end - began, 2)] for w in windows},
        "latency inside windows ms (p50, p99, max)": [round(1000 * percentile(inside, q), 2) for q in (0.5, 0.99, 1)],
        "latency outside windows ms (p50, p99, max)": [round(1000 * percentile(outside, q), 2) for q in (0.5, 0.99, 1)],
        "slowest call by window (s)": slowest_by_window,
        "slowest call outside the windows (s from start, s)": [
            round(slowest_outside.sent - began, 2),
            round(slowest_outside.latency, 3),
        ]
        if slowest_outside
        else None,
        "dead backend: detected and recovered": timings,
        "bounds (s)": {
            "detect": round(bounds.haproxy_detect(), 2) if kind == "haproxy" else None,
            "recover": round(bounds.haproxy_recover() if kind == "haproxy" else bounds.nginx_recover(), 2),
        },
        "out of bounds": out_of_bounds,
        "ledger: answered but not run": len(missing),
        "ledger: keys run more than once": len(twice),
        "ledger: failures saying 'did not run' that ran": len(said_unrun_but_ran),
        "ledger: failures saying 'may have run' that ran": sum(1 for o in failed if o.may_have_run and counts[o.key]),
        "calls sent again (the first try failed before sending)": client.resent,
        "fault windows past the end of the traffic": late,
    }
    result["passed"] = (
        not missing and not twice and not said_unrun_but_ran and not out_of_bounds and len(answered) > 0 and not late
    )
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--balancer", choices=["haproxy", "nginx", "both"], default="both")
    parser.add_argument("--rate", type=float, default=200, help="calls offered per second")
    parser.add_argument("--seconds", type=float, default=60, help="how long the client offers calls")
    parser.add_argument("--short", action="store_true", help="make test's pass: HAProxy, loss, partition, kill")
    parser.add_argument("--keep", action="store_true", help="keep the work folder (logs, ledgers)")
    parser.add_argument("--json", type=Path, help="also write the report here")
    args = parser.parse_args()
    if args.short:
        args.balancer, args.rate, args.seconds = "haproxy", 100, 25
    why = cannot_make_namespaces()
    if why is not None:
        print(f"chaos test: SKIPPED, NOT RUN: {why}", file=sys.stderr, flush=True)
        print(f"chaos test: SKIPPED, NOT RUN: {why}", flush=True)
        return SKIPPED
    work = Path(tempfile.mkdtemp(prefix="ucall-chaos-"))
    os.chmod(work, 0o755)
    net = Network()
    results = []
    # Every process the run starts is stopped by pid in run_one's finally; the namespaces
    # go here, on SIGTERM and SIGINT too.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    try:
        net.make()
        net.enter_client()
        for kind in ("haproxy", "nginx") if args.balancer == "both" else (args.balancer,):
            log(f"{kind}: {args.rate:g} calls/s for {args.seconds:g} s, across network namespaces")
            result = run_one(kind, args.rate, args.seconds, work, net, args.short)
            print(json.dumps(result, indent=2), flush=True)
            results.append(result)
    finally:
        net.close()
        if args.keep:
            log(f"work folder kept: {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    passed = bool(results) and all(r["passed"] for r in results)
    print(f"chaos test: {'passed' if passed else 'FAILED'}", flush=True)
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
