# SPDX-License-Identifier: Apache-2.0
"""Handlers that block or await do not stall the others."""

import asyncio
import time
from concurrent.futures import ThreadPoolExecutor

from ucall import Server
from ucall.client import Client

server = Server(port=0)


@server
def read_sensor(seconds: float) -> str:
    time.sleep(seconds)  # blocking I/O, a lock, a slow library...
    return "done"


@server
async def fetch(seconds: float) -> str:
    await asyncio.sleep(seconds)  # runs on the server's asyncio loop
    return "fetched"


@server
def ping() -> str:
    return "pong"


def call(method: str, *args: object) -> object:
    with Client(port=server.port) as client:
        return client.call(method, *args).json


with server, ThreadPoolExecutor(16) as pool:
    started = time.monotonic()
    blocked = [pool.submit(call, "read_sensor", 0.3) for _ in range(8)]
    awaited = [pool.submit(call, "fetch", 0.3) for _ in range(8)]
    time.sleep(0.05)
    asked = time.monotonic()
    print("ping while 16 calls wait:", call("ping"), f"in {1000 * (time.monotonic() - asked):.1f} ms")
    results = [f.result() for f in blocked + awaited]
    print(f"{results.count('done')} blocking calls done, {results.count('fetched')} async calls fetched")
    print(f"all in {time.monotonic() - started:.2f} s (each took 0.3 s)")
