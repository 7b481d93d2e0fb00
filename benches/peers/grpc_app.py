# SPDX-License-Identifier: Apache-2.0
"""grpcio servers for bench.proto, one process: `sync` (a thread pool) or `asyncio`
(grpc.aio).

    python grpc_app.py sync|asyncio GENERATED_DIR

GENERATED_DIR holds bench_pb2.py and bench_pb2_grpc.py, generated from bench.proto with
grpcio-tools (grpc_stubs.py) when they are missing or older than it.
"""

from __future__ import annotations

import sys
from concurrent import futures
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
MODE = sys.argv[1] if len(sys.argv) > 1 else "sync"
GENERATED = sys.argv[2] if len(sys.argv) > 2 else "."
sys.path.insert(0, GENERATED)

import grpc  # noqa: E402
import grpc_stubs  # noqa: E402

grpc_stubs.ensure(GENERATED)
import bench_pb2 as pb  # noqa: E402
import bench_pb2_grpc as rpc  # noqa: E402
import procs  # noqa: E402
from serve import HOST  # noqa: E402


def _complex(m) -> dict:
    return {"id": m.id, "name": m.name, "flag1": m.flag1, "flag2": m.flag2, "vals": list(m.vals)}


class Sync(rpc.BenchServicer):
    def Sum(self, req, ctx):
        return pb.IntReply(value=req.a + req.b)

    def Echo(self, req, ctx):
        return req

    def Fibonacci(self, req, ctx):
        return pb.IntReply(value=procs.fibonacci(req.n))

    def HashComplex(self, req, ctx):
        return pb.StringReply(value=procs.hash_complex(_complex(req)))

    def StdDev(self, req, ctx):
        return pb.DoubleReply(value=procs.std_dev(list(req.values)))

    def AverageContainer(self, req, ctx):
        return pb.DoubleReply(value=procs.average_container(list(req.values)))

    def GenRandInts(self, req, ctx):
        return pb.Ints(values=procs.gen_rand_ints(req.min, req.max, req.count))


class Async(rpc.BenchServicer):
    """The same procedures as coroutines."""


for _name in ("Sum", "Echo", "Fibonacci", "HashComplex", "StdDev", "AverageContainer", "GenRandInts"):

    def _make(fn):
        async def method(self, req, ctx):
            return fn(self, req, ctx)

        return method

    setattr(Async, _name, _make(getattr(Sync, _name)))

OPTIONS = [("grpc.max_receive_message_length", 64 << 20), ("grpc.max_send_message_length", 64 << 20)]


def serve_sync() -> None:
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4), options=OPTIONS)
    rpc.add_BenchServicer_to_server(Sync(), server)
    port = server.add_insecure_port(f"{HOST}:0")
    server.start()
    print(f"listening on {HOST}:{port} (grpcio sync, thread pool of 4)", flush=True)
    server.wait_for_termination()


async def serve_async() -> None:
    server = grpc.aio.server(options=OPTIONS)
    rpc.add_BenchServicer_to_server(Async(), server)
    port = server.add_insecure_port(f"{HOST}:0")
    await server.start()
    print(f"listening on {HOST}:{port} (grpcio asyncio)", flush=True)
    await server.wait_for_termination()


if __name__ == "__main__":
    if MODE == "asyncio":
        import asyncio

        asyncio.run(serve_async())
    else:
        serve_sync()
