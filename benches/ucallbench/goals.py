# SPDX-License-Identifier: Apache-2.0
"""The speed goals: which ratios of which figures, and the bound each must meet."""

from __future__ import annotations

from dataclasses import dataclass

from ucallbench.servers import Server
from ucallbench.workloads import Workload, skip_reason

# ---------------------------------------------------------------- the speed goals

# The project's speed goals, as (comparison, bound): a ratio must be >= or <= the bound.
# None: the goal names the ratio to watch but no bound for it.
TARGETS: dict[str, tuple[str, float] | None] = {
    "rust/reference p50": None,
    "rust/reference rps": None,
    "uring/reference rps": (">=", 1.0),  # io_uring reaches the C epoll reference with 32 connections
    "uring/poll p50": ("<=", 1.0),  # io_uring at least as fast as poll on every workload
    "uring/poll rps": (">=", 1.0),
    "c/rust p50": ("<=", 1.05),  # the C API within 5 % of the Rust API: at most 5 % slower
    "c/rust rps": (">=", 0.95),
    "python/reference rps": (">=", 0.5),
    "python/socketify rps": (">=", 4.0),
    "python/fastapi rps": (">=", 20.0),
    "python/reference p50": ("<=", 1.5),
    "python echo GB/s": (">=", 1.0),
    "tls/plain rps": (">=", 0.70),
    "ws/http rps": (">=", 1.0),
}
# The WebSocket row of a peer whose HTTP figures are in another row (one process serves both).
WS_HTTP_ROWS = {"fastapi-ws": "fastapi-rest"}


@dataclass(frozen=True)
class Ratio:
    goal: str  # the goal's words
    num: tuple[str, str]  # (server, workload)
    den: tuple[str, str] | None  # (server, workload); None: the payload throughput of num in GB/s
    target: str  # a key of TARGETS, or "" for a ratio shown for comparison only


def goal_ratios(servers: list[Server], workloads: list[Workload]) -> list[Ratio]:
    """The ratios the speed goals name, among the servers and workloads of a run."""
    names = {s.name: s for s in servers}
    wl_names = {w.name: w for w in workloads}

    def runs(server: str, workload: str) -> bool:
        srv, wl = names.get(server), wl_names.get(workload)
        return srv is not None and wl is not None and skip_reason(srv, wl.proto, wl) != ""

    def kind(workload: str) -> str:
        return "p50" if wl_names[workload].metric == "p50" else "rps"

    def keep(rows: list[Ratio]) -> list[Ratio]:
        return [r for r in rows if runs(*r.num) and (r.den is None or runs(*r.den))]

    rows = []
    for rust in ("ucall-rust-poll", "ucall-rust-uring"):
        for w in ("sum-1conn", "sum-32conn"):
            if w in wl_names:
                goal = f"Rust / C reference, {w}"
                target = (
                    "uring/reference rps"
                    if rust.endswith("uring") and kind(w) == "rps"
                    else f"rust/reference {kind(w)}"
                )
                rows.append(Ratio(goal, (rust, w), ("c-reference", w), target))
    for poll, uring in (
        ("ucall-rust-poll", "ucall-rust-uring"),
        ("ucall-c-poll", "ucall-c-uring"),
        ("ucall-python", "ucall-python-uring"),
    ):
        for w in ("sum-1conn", "sum-32conn", "sum-32conn-pipe16", "sum-newconn", "echo-1.6MB"):
            if w in wl_names:
                rows.append(Ratio(f"uring / poll, {w}", (uring, w), (poll, w), f"uring/poll {kind(w)}"))
    for c, rust in (("ucall-c-poll", "ucall-rust-poll"), ("ucall-c-uring", "ucall-rust-uring")):
        for w in workloads:
            if c in names and skip_reason(names[c], w.proto, w) is None:
                goal = f"C API / Rust API, {w.name}"
                rows.append(Ratio(goal, (c, w.name), (rust, w.name), f"c/rust {kind(w.name)}"))
    for py in ("ucall-python", "ucall-python-uring"):
        for other, label, w, target in (
            ("c-reference", "C reference", "sum-32conn", "python/reference rps"),
            ("socketify", "socketify", "sum-32conn", "python/socketify rps"),
            ("fastapi-rest", "FastAPI", "sum-32conn", "python/fastapi rps"),
            ("c-reference", "C reference", "sum-1conn", "python/reference p50"),
        ):
            rows.append(Ratio(f"Python / {label}, {w}", (py, w), (other, w), target))
        goal = "Python bytes echo, echo-1.6MB: payload × req/s"
        rows.append(Ratio(goal, (py, "echo-1.6MB"), None, "python echo GB/s"))
    for srv in servers:
        target = "tls/plain rps" if srv.kind == "ucall" else ""
        rows.append(
            Ratio("TLS / plaintext, 32 connections", (srv.name, "tls-sum-32conn"), (srv.name, "sum-32conn"), target)
        )
    for srv in servers:
        target = "ws/http rps" if srv.kind == "ucall" else ""
        http = WS_HTTP_ROWS.get(srv.name, srv.name)
        rows.append(
            Ratio("WebSocket / HTTP, 32 connections", (srv.name, "ws-sum-32conn"), (http, "sum-32conn"), target)
        )
    return keep(rows)


def fmt_target(target: str) -> str:
    bound = TARGETS.get(target)
    if not target:
        return "(peer, for comparison)"
    if bound is None:
        return "no bound set"
    unit = " GB/s" if "GB/s" in target else ""
    return f"{'≥' if bound[0] == '>=' else '≤'} {bound[1]:g}{unit}"


def ratio_id(r: Ratio) -> str:
    return f"{r.num[0]}/{r.num[1]} : {r.den[0]}/{r.den[1]}" if r.den else f"{r.num[0]}/{r.num[1]}"
