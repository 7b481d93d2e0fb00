# SPDX-License-Identifier: Apache-2.0
"""`make demo`, Python part: a decorator server on a free port, called over HTTP, REST and raw TCP."""

import json
import socket
import urllib.request

from ucall import RPCError, Server

server = Server(port=0)


@server
def sum(a: int, b: int) -> int:
    return a + b


@server.method("text.shout")
def shout(text: str, times: int = 1) -> str:
    return (text.upper() + "!") * times


@server
def divide(a: float, b: float) -> float:
    if b == 0:
        raise RPCError(-32001, "division by zero", {"a": a})
    return a / b


def post(body: object) -> str:
    request = urllib.request.Request(server.url, data=json.dumps(body).encode())
    with urllib.request.urlopen(request, timeout=5) as reply:
        return reply.read().decode()


def show(title: str, text: str) -> None:
    print(f"\033[1m{title}\033[0m\n  {text}")


with server:
    print(f"server: {server}")
    show("sum by name", post({"jsonrpc": "2.0", "method": "sum", "params": {"a": 1, "b": 2}, "id": 1}))
    show("text.shout by position", post({"jsonrpc": "2.0", "method": "text.shout", "params": ["hi", 2], "id": 2}))
    show("a wrong type", post({"jsonrpc": "2.0", "method": "sum", "params": {"a": "1", "b": 2}, "id": 3}))
    show("an RPCError", post({"jsonrpc": "2.0", "method": "divide", "params": [1, 0], "id": 4}))
    with urllib.request.urlopen(f"{server.url}/sum?a=20&b=22", timeout=5) as reply:
        show("REST GET /sum?a=20&b=22", reply.read().decode())
    with socket.create_connection(("127.0.0.1", server.port), timeout=5) as sock:
        sock.sendall(b'{"jsonrpc":"2.0","method":"sum","params":[40,2],"id":5}\n')
        show("raw TCP", sock.makefile().readline().strip())
print("demo (Python): ok")
