# SPDX-License-Identifier: Apache-2.0
"""A Python server with streaming procedures (generators, docs/streaming.md) for the JS
client's stream tests.

    python js/test/apps/stream_server.py --host 127.0.0.1 --port 0 [--tls-cert C --tls-key K --tls-port 0]
"""

import argparse
import asyncio
import threading
import time

import numpy as np

from ucall import RPCError, Server

parser = argparse.ArgumentParser()
parser.add_argument("--host", default="127.0.0.1")
parser.add_argument("--port", type=int, default=0)
parser.add_argument("--threads", type=int, default=1)
parser.add_argument("--engine", default="auto")
parser.add_argument("--tls-cert", default=None)
parser.add_argument("--tls-key", default=None)
parser.add_argument("--tls-port", type=int, default=None)
args = parser.parse_args()

server = Server(
    host=args.host,
    port=args.port,
    threads=args.threads,
    engine=args.engine,
    tls_cert=args.tls_cert,
    tls_key=args.tls_key,
    tls_port=args.tls_port,
)
lock = threading.Lock()
stopped: list = []  # tags of the generators whose `finally` ran


@server
def count(n: int):
    for i in range(n):
        yield i
    return "done"


@server
async def words(text: str):
    for word in text.split():
        await asyncio.sleep(0.001)
        yield word


@server
def broken(n: int):
    for i in range(n):
        yield i
    raise RPCError(-32010, "ran dry", {"after": n})


@server
def endless(tag: str):
    try:
        while True:
            yield tag
            time.sleep(0.002)
    finally:
        with lock:
            stopped.append(tag)


@server
def frames(x: np.ndarray, n: int):
    for i in range(n):
        yield x * i
    return {"frames": n, "last": x * (n - 1), "raw": b"end"}


@server
def chunks(n: int):
    """Bytes items whatever the params: base64 to a JSON caller, attachments to a binary one."""
    for i in range(n):
        yield bytes([i]) * 3
    return n


@server
def was_stopped(tag: str) -> bool:
    with lock:
        return tag in stopped


@server
def plain(a: int) -> int:
    return a


server.run()  # "ucall: listening on http://HOST:PORT (...)" on stderr
