# SPDX-License-Identifier: Apache-2.0
"""FastAPI on uvicorn (uvloop, httptools), one process: the procedures as REST
endpoints (`POST /sum` with `{"a":1,"b":2}` answers `3`) and JSON-RPC over a
WebSocket at `/ws` (one text frame per request or batch).

    python fastapi_app.py
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import uvicorn  # noqa: E402
from fastapi import Body, FastAPI, WebSocket, WebSocketDisconnect  # noqa: E402
from pydantic import BaseModel  # noqa: E402

import procs  # noqa: E402
from serve import HOST, announce_when_ready, free_port  # noqa: E402

app = FastAPI()


class Complex(BaseModel):
    id: int
    name: str
    flag1: bool
    flag2: bool
    vals: list[int]


@app.post("/sum")
async def sum_(a: int = Body(), b: int = Body()) -> int:
    return a + b


@app.post("/echo")
async def echo(data: str = Body(embed=True)) -> str:
    return data


@app.post("/fibonacci")
async def fibonacci(n: int = Body(embed=True)) -> int:
    return procs.fibonacci(n)


@app.post("/hash_complex")
async def hash_complex(obj: Complex = Body(embed=True)) -> str:
    return procs.hash_complex(obj.model_dump())


@app.post("/std_dev")
async def std_dev(values: list[float] = Body(embed=True)) -> float:
    return procs.std_dev(values)


@app.post("/average_container")
async def average_container(values: list[int] = Body(embed=True)) -> float:
    return procs.average_container(values)


@app.post("/gen_rand_ints")
async def gen_rand_ints(min: int = Body(), max: int = Body(), count: int = Body()) -> list[int]:  # noqa: A002
    return procs.gen_rand_ints(min, max, count)


@app.websocket("/ws")
async def ws(socket: WebSocket) -> None:
    await socket.accept()
    try:
        while True:
            text = await socket.receive_text()
            await socket.send_text(procs.handle_jsonrpc(text.encode()).decode())
    except WebSocketDisconnect:
        pass


if __name__ == "__main__":
    # Optional: --tls-cert CERT --tls-key KEY serves HTTPS.
    args = dict(zip(sys.argv[1::2], sys.argv[2::2]))
    tls = {"ssl_certfile": args["--tls-cert"], "ssl_keyfile": args["--tls-key"]} if "--tls-cert" in args else {}
    port = free_port()
    announce_when_ready(port, "fastapi on uvicorn, uvloop + httptools, 1 process" + (", TLS" if tls else ""))
    uvicorn.run(
        app, host=HOST, port=port, loop="uvloop", http="httptools", log_level="warning", access_log=False, **tls
    )
