# SPDX-License-Identifier: Apache-2.0
"""Child processes: each leads a process group of its own, and none outlives the run."""

from __future__ import annotations

import ipaddress
import os
import queue
import re
import resource
import shutil
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING

from ucallbench.config import ROOT, SERVER_CPU

if TYPE_CHECKING:
    from ucallbench.servers import Server

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


# ---------------------------------------------------------------- child processes
#
# Every process run.py starts (servers, load generators, builds, the peers' set-up) leads a
# process group of its own and is recorded in _children until the whole group is gone.
# However run.py ends (done, an exception, a time limit, SIGINT, SIGTERM, SIGHUP, SIGQUIT),
# kill_children() kills each group that is left: main() calls it in a finally clause and
# atexit once more. Each child also runs under `setpriv --pdeathsig KILL`, so that the kernel
# kills it when run.py dies by SIGKILL, which no handler sees.


class Interrupted(KeyboardInterrupt):
    """A signal asked run.py to stop."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)
SETPRIV = shutil.which("setpriv")
_children: dict[int, subprocess.Popen] = {}  # process group id -> its leader
# While a child is being started or stopped a signal only sets `pending`, raised once done,
# so that no child escapes the records; once cleaning up, signals are ignored.
_signals = {"critical": 0, "pending": None, "cleaning": False}


def on_stop_signal(signum, frame) -> None:
    if _signals["cleaning"]:
        return
    if _signals["critical"]:
        _signals["pending"] = signum
        return
    raise Interrupted(signum)


class critical:
    """A section that a stop signal does not interrupt; it is raised at the end instead."""

    def __enter__(self) -> None:
        _signals["critical"] += 1

    def __exit__(self, *exc) -> None:
        _signals["critical"] -= 1
        signum = _signals["pending"]
        if not _signals["critical"] and signum is not None and not _signals["cleaning"]:
            _signals["pending"] = None
            raise Interrupted(signum)  # in place of an exception under way, if any


def spawn(cmd: list[str], **kw) -> subprocess.Popen:
    """Starts `cmd` from the repository root as the leader of a new process group."""
    argv = [SETPRIV, "--pdeathsig", "KILL", *cmd] if SETPRIV else list(cmd)
    with critical():
        proc = subprocess.Popen(argv, cwd=ROOT, start_new_session=True, **kw)
        _children[proc.pid] = proc
    return proc


def stop_group(proc: subprocess.Popen, grace: float = 0.0) -> None:
    """Ends the process group `proc` leads: SIGTERM and `grace` seconds, then SIGKILL."""
    with critical():
        if proc.poll() is None and grace > 0:
            try:
                os.killpg(proc.pid, signal.SIGTERM)
                proc.wait(timeout=grace)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                pass
        # Whatever is left in the group, the leader included, and what a finished leader
        # left behind.
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            proc.wait(timeout=10.0)
        except subprocess.TimeoutExpired:
            say(f"process {proc.pid} did not die on SIGKILL")
        _children.pop(proc.pid, None)


def kill_children() -> None:
    """Kills every process group run.py started that is still recorded."""
    _signals["cleaning"] = True
    for proc in list(_children.values()):
        stop_group(proc)


def run_group(cmd: list[str], timeout: float | None = None, capture: bool = False, **kw) -> subprocess.CompletedProcess:
    """Runs `cmd` to its end (or `timeout`, a BenchError) in its own process group."""
    if capture:
        kw.update(stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    kw.setdefault("stdin", subprocess.DEVNULL)
    proc = spawn(cmd, **kw)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        raise BenchError(f"no result within {timeout:g} s (stopped): {' '.join(cmd)[:300]}") from None
    finally:
        stop_group(proc)
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


def run_checked(cmd: list[str], **kw) -> None:
    say("$ " + " ".join(cmd))
    res = run_group(cmd, **kw)
    if res.returncode != 0:
        raise BenchError(f"command failed ({res.returncode}): {' '.join(cmd)}")


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

    # UCall servers say it on stderr ("ucall: listening on http://HOST:PORT (...)"), the
    # peers on stdout ("listening on HOST:PORT"): both are read.
    LISTENING = re.compile(r"listening on (?:[a-z]+://)?(\S+):(\d+)")

    def __init__(self, server: Server, proto: str, log_dir: Path):
        self.name = f"{server.name}/{proto}"
        ep = server.endpoints[proto]
        argv = [str(ROOT / ep.argv[0]), *ep.argv[1:]]
        log_dir.mkdir(parents=True, exist_ok=True)
        self.log_path = log_dir / f"{server.name}-{proto}.log"
        self.log = open(self.log_path, "w")
        self.lines: queue.Queue[str | None] = queue.Queue()
        self.proc = spawn(
            ["taskset", "-c", str(SERVER_CPU), *argv],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
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
        """SIGTERM to the server's process group, SIGKILL to what is left after 3 s."""
        stop_group(self.proc, grace=3.0)
        self.reader.join(timeout=2.0)
        self.log.close()
