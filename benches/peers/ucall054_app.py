# SPDX-License-Identifier: Apache-2.0
"""The prior-art `ucall==0.5.4` package from PyPI (its own venv): JSON-RPC over HTTP
with the procedures registered through its decorator, one thread.

    python ucall054_app.py posix|uring

Written at module level, as that package's own examples are: it keeps no reference to
the registered callables, so they must outlive the call to `run()` by other means.
"""


import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import procs  # noqa: E402
from serve import HOST, free_port  # noqa: E402

ENGINE = sys.argv[1] if len(sys.argv) > 1 else "posix"
if ENGINE == "uring":
    from ucall.uring import Server
else:
    from ucall.posix import Server

PORT = free_port()
# The constructor binds and listens.
server = Server(hostname=HOST, port=PORT, max_threads=1, max_callbacks=16)


# ucall 0.5.4 binds parameters by the names of the Python function.
@server
def sum(a: int, b: int) -> int:  # noqa: A001
    return a + b


@server
def echo(data: str) -> str:
    return data


@server
def fibonacci(n: int) -> int:
    return procs.fibonacci(n)


@server
def hash_complex(obj: dict) -> str:
    return procs.hash_complex(obj)


@server
def std_dev(values: list) -> float:
    return procs.std_dev(values)


@server
def average_container(values: list) -> float:
    return procs.average_container(values)


@server
def gen_rand_ints(min: int, max: int, count: int) -> list:  # noqa: A002
    return procs.gen_rand_ints(min, max, count)


# run() keeps the GIL, so no thread could report readiness later: say it now.
print(f"listening on {HOST}:{PORT} (ucall 0.5.4 from PyPI, {ENGINE}, 1 thread)", flush=True)
server.run()
