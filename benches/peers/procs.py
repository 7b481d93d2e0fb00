# SPDX-License-Identifier: Apache-2.0
"""The benchmark procedures in Python, defined exactly as in
examples/rust/src/bin/bench_server.rs so that every server computes the same results.

Also a minimal JSON-RPC 2.0 dispatcher (single calls and batches) for the HTTP servers
that have none of their own (granian, socketify). Standard library only.
"""

from __future__ import annotations

import json
import math
import random


def sum_(a: int, b: int) -> int:
    return a + b


def echo(data):
    return data


def fibonacci(n: int) -> int:
    # Naive recursion on purpose: the workload is the CPU time it takes.
    return n if n < 2 else fibonacci(n - 1) + fibonacci(n - 2)


def hash_complex(obj: dict) -> str:
    rev = list(reversed(obj["vals"]))
    out = []
    for i, ch in enumerate(obj["name"].encode()):
        v = rev[i % 12]
        out.append(format(ch + v if obj["flag1"] else ch * v, "x"))
    if obj["flag2"]:
        out.append(format(obj["id"], "x"))
    return "".join(out)


def std_dev(values: list[float]) -> float:
    if not values:
        return 0.0
    n = len(values)
    mean = sum(values) / n
    return math.sqrt(sum((x - mean) * (x - mean) for x in values) / n)


def average_container(values: list[int]) -> float:
    return sum(values) / len(values) if values else 0.0


def gen_rand_ints(min: int, max: int, count: int) -> list[int]:  # noqa: A002 - the wire names
    return [random.randint(min, max) for _ in range(count)]


PROCEDURES = {
    "sum": sum_,
    "echo": echo,
    "fibonacci": fibonacci,
    "hash_complex": hash_complex,
    "std_dev": std_dev,
    "average_container": average_container,
    "gen_rand_ints": gen_rand_ints,
}


def _call(req) -> dict | None:
    if not isinstance(req, dict) or req.get("jsonrpc") != "2.0" or not isinstance(req.get("method"), str):
        return {"jsonrpc": "2.0", "id": None, "error": {"code": -32600, "message": "Invalid Request"}}
    fn = PROCEDURES.get(req["method"])
    rid = req.get("id")
    if fn is None:
        out = {"jsonrpc": "2.0", "id": rid, "error": {"code": -32601, "message": "Method not found"}}
    else:
        params = req.get("params", {})
        try:
            result = fn(**params) if isinstance(params, dict) else fn(*params)
            out = {"jsonrpc": "2.0", "id": rid, "result": result}
        except (TypeError, KeyError, ValueError) as e:
            out = {"jsonrpc": "2.0", "id": rid, "error": {"code": -32602, "message": f"Invalid params: {e}"}}
    return out if "id" in req else None


def handle_jsonrpc(body: bytes) -> bytes:
    """One HTTP body in, one HTTP body out (empty for notifications only)."""
    try:
        req = json.loads(body)
    except ValueError:
        return b'{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"Parse error"}}'
    if isinstance(req, list):
        if not req:
            return b'{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"Invalid Request"}}'
        outs = [o for o in map(_call, req) if o is not None]
        return json.dumps(outs, separators=(",", ":")).encode() if outs else b""
    out = _call(req)
    return json.dumps(out, separators=(",", ":")).encode() if out is not None else b""
