# SPDX-License-Identifier: Apache-2.0
"""The UCall Python server of the binary section of `make bench` (`python -m ucallbench
binary`): `echo_bytes(data: bytes)` and `echo_array(x: numpy.ndarray)`, each returning its
argument, one thread. Params and results travel as base64 in plain JSON, or as attachments
of binary messages (docs/wire.md).

    .venv/bin/python benches/ucall_binary_app.py [--port 0] [--engine poll]

Prints "listening on HOST:PORT" once serving; SIGINT or SIGTERM stops it.
"""

from __future__ import annotations

import argparse

import numpy as np

from ucall import Server

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--port", type=int, default=0)
parser.add_argument("--engine", default="poll")
args = parser.parse_args()
server = Server(host="127.0.0.1", port=args.port, threads=1, engine=args.engine)


@server
def echo_bytes(data: bytes) -> bytes:
    return data


@server
def echo_array(x: np.ndarray) -> np.ndarray:
    return x


if __name__ == "__main__":
    server.run(ready=lambda s: print(f"listening on 127.0.0.1:{s.port} (engine {s.engine})", flush=True))
