# SPDX-License-Identifier: Apache-2.0
"""The backend of the scale test: `record(key)` appends the key to this process's ledger
(a file of its own in UCALL_LEDGER_DIR, named after the backend and the pid) before it
answers, so that the test can tell which calls ran, where, and how often."""

from __future__ import annotations

import os

from ucall import Server

server = Server(threads=1)
_ledger: int | None = None


def _file() -> int:
    global _ledger
    if _ledger is None:  # opened in the worker process, on its first call
        name = f"{os.environ.get('UCALL_BACKEND_NAME', 'backend')}-{os.getpid()}.ledger"
        _ledger = os.open(os.path.join(os.environ["UCALL_LEDGER_DIR"], name), os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    return _ledger


@server
def record(key: str) -> str:
    # One write() per key: a line is whole in the file or absent, even if the process is
    # killed right after.
    os.write(_file(), f"{key}\n".encode())
    return key
