# SPDX-License-Identifier: Apache-2.0
"""The UCall Python server `make bench` measures: `sum`, `echo` and the rpc.hpp set,
with the results of examples/rust/src/bin/bench_server.rs and benches/peers/procs.py.

    .venv/bin/python benches/ucall_python_app.py --port 0 --engine poll
    .venv/bin/python benches/ucall_python_app.py --port 0 --tls-cert cert.pem --tls-key key.pem

HTTP, raw TCP and WebSocket share the port; with --tls-cert and --tls-key it speaks TLS.
`echo` takes and returns `bytes`: base64 on the wire, decoded and encoded again by UCall.
Prints "listening on HOST:PORT" once serving; SIGINT or SIGTERM stops it.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent / "peers"))

import procs  # noqa: E402  (the shared definitions)
from ucall import Server  # noqa: E402

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--host", default="127.0.0.1")
parser.add_argument("--port", type=int, default=8545)
parser.add_argument("--threads", type=int, default=1)
parser.add_argument("--engine", default="auto")
parser.add_argument("--tls-cert", help="PEM certificate chain: the port speaks TLS")
parser.add_argument("--tls-key", help="PEM private key of --tls-cert")
args = parser.parse_args()
if (args.tls_cert is None) != (args.tls_key is None):
    parser.error("--tls-cert and --tls-key go together")

server = Server(
    port=args.port,
    host=args.host,
    threads=args.threads,
    engine=args.engine,
    tls_cert=args.tls_cert,
    tls_key=args.tls_key,
)


@dataclass
class Complex:
    """The struct argument of hash_complex, as in the Rust server."""

    id: int
    name: str
    flag1: bool
    flag2: bool
    vals: list[int]


@server
def sum(a: int, b: int) -> int:  # noqa: A001 - the wire name
    return a + b


@server
def echo(data: bytes) -> bytes:
    return data


@server
def fibonacci(n: int) -> int:
    return procs.fibonacci(n)


@server
def hash_complex(obj: Complex) -> str:
    return procs.hash_complex(obj.__dict__)


@server
def std_dev(values: list[float]) -> float:
    return procs.std_dev(values)


@server
def average_container(values: list[int]) -> float:
    return procs.average_container(values)


@server
def gen_rand_ints(min: int, max: int, count: int) -> list[int]:  # noqa: A002 - the wire names
    return procs.gen_rand_ints(min, max, count)


if __name__ == "__main__":
    tls = ", TLS" if args.tls_cert else ""
    server.run(
        ready=lambda s: print(f"listening on {args.host}:{s.port} (engine {s.engine}{tls})", flush=True),
    )
