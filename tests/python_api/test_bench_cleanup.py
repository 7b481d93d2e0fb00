# SPDX-License-Identifier: Apache-2.0
"""benches/run.py leaves no process behind, however it is stopped.

Each test starts run.py on one tiny workload (the UCall Python server, which `make python`
builds, and a stand-in load generator that starts a child of its own and waits), stops
run.py with a signal while the server and the load generator run, and checks that every
process run.py started is gone. No peer, no release build and no network beyond loopback.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import REPO_ROOT

RUN_PY = REPO_ROOT / "benches" / "run.py"
ROUND = re.compile(r"round 1/1: ucall-python \(http\) on \S+, pid (\d+)")

pytestmark = pytest.mark.skipif(
    (os.cpu_count() or 1) < 2 or shutil.which("taskset") is None,
    reason="benches/run.py needs two CPUs and taskset",
)

# Stands in for ucall-load: records its pid, starts a child in its process group, waits.
FAKE_LOAD = """#!/bin/sh
sleep 120 &
echo "$$ $!" > "$BENCH_TEST_PIDS"
wait
"""


def stat_of(pid: int) -> tuple[str, int] | None:
    """(state, start time) of a process, or None once it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rfind(")") + 2 :].split()
    return fields[0], int(fields[19])


def descendants(root: int) -> set[int]:
    children: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                text = Path(entry.path, "stat").read_text()
            except OSError:
                continue
            ppid = int(text[text.rfind(")") + 2 :].split()[1])
            children.setdefault(ppid, []).append(int(entry.name))
    found, todo = set(), [root]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def alive(processes: dict[int, int]) -> list[int]:
    """The processes (pid -> start time) still running: not gone, not a zombie, not reused."""
    out = []
    for pid, started in processes.items():
        now = stat_of(pid)
        if now is not None and now[0] != "Z" and now[1] == started:
            out.append(pid)
    return out


@pytest.mark.timeout(30)
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGKILL])
def test_no_process_survives_run_py(signum: int, tmp_path: Path) -> None:
    fake = tmp_path / "fake-load"
    fake.write_text(FAKE_LOAD)
    fake.chmod(0o755)
    pids_file = tmp_path / "load.pids"
    env = dict(os.environ, BENCH_TEST_PIDS=str(pids_file))
    cmd = [
        sys.executable, str(RUN_PY), "--no-build", "--servers", "ucall-python", "--workloads", "sum-32conn",
        "--reps", "1", "--warmup", "0", "--duration", "60", "--load-bin", str(fake),
    ]  # fmt: skip
    processes: dict[int, int] = {}  # pid -> start time, of run.py's descendants
    try:
        with subprocess.Popen(
            cmd, cwd=REPO_ROOT, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, text=True,
        ) as run:  # fmt: skip
            assert run.stdout is not None
            output: list[str] = []
            try:
                server = None
                while server is None:
                    line = run.stdout.readline()
                    assert line, "run.py ended before starting the server:\n" + "".join(output)
                    output.append(line)
                    m = ROUND.search(line)
                    if m:
                        server = int(m.group(1))
                deadline = time.monotonic() + 10
                while not (pids_file.exists() and len(pids_file.read_text().split()) == 2):
                    assert time.monotonic() < deadline, "the load generator did not start"
                    time.sleep(0.02)
                load, load_child = (int(x) for x in pids_file.read_text().split())
                for pid in descendants(run.pid) | {server, load, load_child}:
                    now = stat_of(pid)
                    if now is not None:
                        processes[pid] = now[1]
                assert {server, load, load_child} <= set(alive(processes))

                run.send_signal(signum)
                code = run.wait(timeout=15)
            finally:
                if run.poll() is None:
                    run.kill()
                    run.wait()
            output.append(run.stdout.read())
        expected = -signal.SIGKILL if signum == signal.SIGKILL else 128 + signum
        assert code == expected, "".join(output)

        # A SIGKILLed run.py cannot clean up: the kernel kills its direct children
        # (setpriv --pdeathsig), and not their own children.
        must_end = processes if signum != signal.SIGKILL else {p: processes[p] for p in (server, load)}
        deadline = time.monotonic() + 5
        while alive(must_end) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert alive(must_end) == [], f"still running after run.py ended: {alive(must_end)}"
    finally:
        for pid in alive(processes):  # whatever the test started through run.py and is left
            os.kill(pid, signal.SIGKILL)
