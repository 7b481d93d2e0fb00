# SPDX-License-Identifier: Apache-2.0
"""A Python server with typed procedures (bytes, numpy arrays) for the JS client's tests.

    python js/test/apps/rich_server.py --host 127.0.0.1 --port 0 [--cors-origin URL]...
"""

import argparse
import threading

import numpy as np

from ucall import RPCError, Server

parser = argparse.ArgumentParser()
parser.add_argument("--host", default="127.0.0.1")
parser.add_argument("--port", type=int, default=0)
parser.add_argument("--threads", type=int, default=1)
parser.add_argument("--engine", default="auto")
args = parser.parse_args()

server = Server(host=args.host, port=args.port, threads=args.threads, engine=args.engine)
refusals = {"left": 0}
lock = threading.Lock()


@server
def reverse(data: bytes) -> bytes:
    return data[::-1]


@server
def scale(array: np.ndarray, factor: float) -> np.ndarray:
    return array * factor


@server
def echo_array(array: np.ndarray) -> np.ndarray:
    return array


@server
def describe(array: np.ndarray) -> dict:
    return {"dtype": str(array.dtype), "shape": list(array.shape), "sum": float(array.sum())}


@server
def make(dtype: str, rows: int, cols: int, fortran: bool) -> np.ndarray:
    array = np.arange(rows * cols, dtype=dtype).reshape(rows, cols)
    return np.asfortranarray(array) if fortran else array


@server
def refuse_next(times: int) -> int:
    with lock:
        refusals["left"] = times
    return times


@server
def busy() -> str:
    """Refused (as an overloaded server would) while refusals are left, then run."""
    with lock:
        if refusals["left"] > 0:
            refusals["left"] -= 1
            raise RPCError(-32000, "busy, try again", {"executed": False})
    return "done"


server.run()  # "ucall: listening on http://HOST:PORT (...)" on stderr
