#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Fails when the AddressSanitizer logs of `make test-c`'s spec-server run hold a report.

    sanitizer_logs.py LOG_DIR SERVER_EXITS

LOG_DIR holds ASan's log_path files, log.<executable>.<pid> (log_exe_name=1); SERVER_EXITS
the lines "PID STATUS HOW" that tests/python/conftest.py writes as it stops each server.

ASan (log_path) creates its file only when it starts a report: the first write, or the
report's decorator asking whether the file is a terminal, opens it, and the report's first
line follows at once. A report therefore always has text, and:
- a file with text is a report: the check fails and prints it;
- an empty file was opened by a process that ended before writing its first line. When the
  suite had to kill that server (SIGKILL after it did not stop within the time), a report
  was cut short and the check fails. Otherwise (the server exited by itself, or the process
  is not one of the suite's servers) nothing was reported: the check lists the file with
  what the ledger says of its process, and passes.
"""

from __future__ import annotations

import sys
from pathlib import Path


def main(log_dir: Path, exits_file: Path) -> int:
    exits: dict[int, tuple[str, str]] = {}
    if exits_file.is_file():
        for line in exits_file.read_text().splitlines():
            pid, status, how = line.split()
            exits[int(pid)] = (status, how)
    failed = False
    for log in sorted(log_dir.glob("log.*")):
        pid = int(log.name.rsplit(".", 1)[-1])
        status, how = exits.get(pid, ("?", "not one of the suite's servers"))
        text = log.read_text(errors="replace")
        if text:
            print(f"== {log} (server {pid}: exit status {status}, {how})\n{text}", file=sys.stderr)
            failed = True
        elif how == "killed":
            print(f"{log}: empty, and server {pid} was killed: its report was cut short", file=sys.stderr)
            failed = True
        else:
            print(f"{log}: empty, written by no report (process {pid}: exit status {status}, {how})")
    if failed:
        print("sanitizer reports above", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1]), Path(sys.argv[2])))
