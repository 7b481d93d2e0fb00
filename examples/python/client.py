# SPDX-License-Identifier: Apache-2.0
"""Calling a server from Python: Client, batches, raw TCP, WebSocket and AsyncClient."""

import asyncio

from ucall import RPCError, Server
from ucall.client import AsyncClient, Client

server = Server(port=0)


@server
def sum(a: int, b: int) -> int:
    return a + b


@server
async def slow_double(x: int) -> int:
    await asyncio.sleep(0.05)
    return 2 * x


async def many(port: int) -> list[int]:
    async with AsyncClient(port=port) as client:  # 20 calls in flight on one connection
        responses = await asyncio.gather(*(client.slow_double(i) for i in range(20)))
        return [r.json for r in responses]


with server:
    with Client(port=server.port) as client:
        print("by name:", client.sum(a=1, b=2).json)
        print("by position:", client.sum(1, 2).json)
        with client.batch() as batch:  # one round trip
            first, second = batch.sum(1, 1), batch.sum(2, 2)
        print("batch:", first.json, second.json)
        try:
            client.sum(a="one", b=2).json
        except RPCError as error:
            print("error:", error.code, error.message)
    with Client(port=server.port, use_http=False) as tcp:
        print("raw TCP:", tcp.sum(20, 22).json)
    with Client(f"ws://127.0.0.1:{server.port}") as ws:  # wss:// (and https://) for TLS
        print("WebSocket:", ws.sum(40, 2).json)
    print("async:", asyncio.run(many(server.port)))
