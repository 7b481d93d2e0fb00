# SPDX-License-Identifier: Apache-2.0
"""Building what the servers need and installing the peers."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

from ucallbench import config
from ucallbench.config import BENCH_DIR, GRPC_LOAD_BIN, PEERS_STATUS, ROOT, TARGET
from ucallbench.processes import BenchError, run_checked, say
from ucallbench.servers import TLS_DIR, Server
from ucallbench.workloads import Workload


def build(servers: list[Server]) -> None:
    packages = ["ucall-bench"]
    sources = []
    capi_sources = []
    manifests = []  # Cargo projects of their own (peers with a lock file), built into target/release
    for s in servers:
        for step in s.build:
            kind, _, what = step.partition(":")
            if kind == "cargo" and what not in packages:
                packages.append(what)
            elif kind == "c" and what not in sources:
                sources.append(what)
            elif kind == "manifest" and what not in manifests:
                manifests.append(what)
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
    for manifest in manifests:
        # A peer that does not build is a row saying so (not_runnable), not a failed run.
        try:
            run_checked(["cargo", "build", "--release", "--locked", "--manifest-path", manifest], env=env)
        except BenchError as e:
            say(f"{manifest} did not build: {e}")
    # Only what this step builds: a peer's interpreter comes with setup_peers, which runs
    # next (a peer that failed to install gets its reason in its row, see not_runnable).
    for s in servers:
        for ep in s.endpoints.values():
            exe = ROOT / ep.argv[0]
            if not s.peer and not exe.exists():
                raise BenchError(f"{s.name}: {exe} was not built")
    if not config.LOAD_BIN.exists():
        raise BenchError(f"{config.LOAD_BIN} was not built")


def build_grpc(servers: list[Server]) -> None:
    """The gRPC load generator, for servers with a gRPC endpoint; their rows say so if it fails."""
    if not any(ep.dialect == "grpc" for s in servers for ep in s.endpoints.values()):
        return
    env = dict(os.environ, CARGO_TARGET_DIR=str(TARGET))
    try:
        run_checked(
            ["cargo", "build", "--release", "-p", "ucall-bench", "--features", "grpc", "--bin", "ucall-load-grpc"],
            env=env,
        )
    except BenchError as e:
        say(f"the gRPC load generator did not build: {e}")


def peer_status() -> dict[str, str]:
    try:
        return json.loads(PEERS_STATUS.read_text())
    except (OSError, ValueError):
        return {}


def make_certificate(servers: list[Server], workloads: list[Workload]) -> None:
    """A fresh self-signed certificate for the servers' TLS endpoints (openssl)."""
    if not any("https" in s.endpoints for s in servers) or not any(w.proto == "https" for w in workloads):
        return
    if not shutil.which("openssl"):
        say("openssl is missing: the TLS workloads will fail (apt-get install openssl)")
        return
    TLS_DIR.mkdir(parents=True, exist_ok=True)
    run_checked(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-keyout",
            str(TLS_DIR / "key.pem"),
            "-out",
            str(TLS_DIR / "cert.pem"),
            "-days",
            "2",
            "-nodes",
            "-subj",
            "/CN=localhost",
            "-addext",
            "subjectAltName=IP:127.0.0.1,DNS:localhost",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def setup_peers(servers: list[Server]) -> None:
    """Installs the peers the chosen servers need (benches/setup_peers.sh; quick when done)."""
    if any(s.needs for s in servers):
        run_checked(["bash", "benches/setup_peers.sh"])


def not_runnable(srv: Server, status: dict[str, str]) -> str | None:
    """Why a server cannot run here, or None."""
    if srv.needs:
        state = status.get(srv.needs, "failed: not installed (benches/setup_peers.sh did not run)")
        if state != "ok":
            return state
    for ep in srv.endpoints.values():
        if ep.dialect == "grpc" and not GRPC_LOAD_BIN.exists():
            return "failed: ucall-load-grpc was not built"
        # A peer built here (jsonrpsee) that did not build is its row's failure; UCall's own
        # servers must build, and fail the run when they cannot start.
        if srv.peer and not srv.needs and not (ROOT / ep.argv[0]).exists():
            return f"failed: {ep.argv[0]} was not built"
    return None
