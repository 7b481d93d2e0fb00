# SPDX-License-Identifier: Apache-2.0
"""One server started for a stand-alone bench (middleware, tracing, MCP, fair share,
binary echo), waited for until it accepts, loaded by ucall-load, its CPU time per answered
call read from /proc, and stopped.

    with serving([sys.executable, "-m", "ucall", "serve", "app:server", "--port", str(port)], port) as server:
        row = cpu_per_call(server, port, "UCall (Python)", ["--body-json", body], seconds=5)
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ucallbench.config import LOAD_BIN, ROOT

TICKS = os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of `pid` so far (its threads included)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def wait_accepting(port: int, process: subprocess.Popen[str], seconds: float = 60) -> None:
    """Return once something accepts on `port`; raise if `process` exits first or `seconds` pass."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the server exited: {process.communicate()[1]}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"nothing listens on {port}")


def stop(process: subprocess.Popen[str]) -> None:
    process.terminate()
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


@contextlib.contextmanager
def serving(command: list[str], port: int, env: dict[str, str] | None = None) -> Iterator[subprocess.Popen[str]]:
    """The server `command` (listening on `port`) while the block runs; stopped after it."""
    server = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
    try:
        wait_accepting(port, server)
        yield server
    finally:
        stop(server)


def python_env(*folders: str | Path) -> dict[str, str]:
    """This environment with the repository's python/ and `folders` on PYTHONPATH: for
    `python -m ucall serve MODULE:server` of an app written to a temporary folder."""
    return dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT / "python"), *map(str, folders)]))


def ensure_load_bin() -> None:
    """Build ucall-load (release) when it is missing."""
    if not LOAD_BIN.exists():
        build = ["cargo", "build", "--release", "--quiet", "-p", "ucall-bench", "--bin", "ucall-load"]
        subprocess.run(build, cwd=ROOT, check=True)


def load(port: int, arguments: list[str], seconds: float, pin: int | None = None) -> dict[str, Any]:
    """ucall-load's report (--json) of `seconds` of load on 127.0.0.1:`port` (on CPU `pin`, if given)."""
    command = [str(LOAD_BIN), "--addr", f"127.0.0.1:{port}", *arguments, "--warmup", "0", "--json"]
    command += ["--duration", str(seconds)]
    if pin is not None:
        command = ["taskset", "-c", str(pin), *command]
    run = subprocess.run(command, capture_output=True, text=True, timeout=seconds + 60, check=True)
    return json.loads(run.stdout)  # type: ignore[no-any-return]


def cpu_per_call(
    server: subprocess.Popen[str], port: int, name: str, arguments: list[str], seconds: float, pin: int | None = None
) -> dict[str, Any]:
    """One row: calls/s and the server's CPU µs per answered call over `seconds` of load,
    after 1 s of warm-up."""
    load(port, arguments, 1.0, pin)
    before = cpu_seconds(server.pid)
    report = load(port, arguments, seconds, pin)
    used = cpu_seconds(server.pid) - before
    calls = report["calls_per_s"] * seconds
    return {
        "server": name,
        "calls_per_s": round(report["calls_per_s"]),
        "cpu_us_per_call": round(used / calls * 1e6, 2) if calls else None,
        "errors": report["errors"],
    }


def measure(
    name: str, command: list[str], port: int, arguments: list[str], seconds: float, env: dict[str, str] | None = None
) -> dict[str, Any]:
    """Start `command`, measure one row (`cpu_per_call`), stop it."""
    with serving(command, port, env) as server:
        return cpu_per_call(server, port, name, arguments, seconds)
