# SPDX-License-Identifier: Apache-2.0
"""A server that describes itself: `python examples/python/described_server.py [--port 8545]`.

Its type hints and docstrings become the OpenRPC document (`rpc.discover`,
http://localhost:8545/openrpc.json), the OpenAPI 3.1 document of the REST routes
(http://localhost:8545/openapi.json) and a page that lists and calls the methods
(http://localhost:8545/docs). `ucall --port 8545 --list` prints the methods.
"""

from __future__ import annotations

import argparse
import dataclasses
import enum
import math
from typing import Literal, Optional, TypedDict

from ucall import RPCError, Server


@dataclasses.dataclass
class Point:
    """A point in the plane."""

    x: float
    y: float


class Tone(enum.Enum):
    """How to greet."""

    WARM = "warm"
    FORMAL = "formal"


class Range(TypedDict):
    low: float
    high: float


DIVISION_BY_ZERO = RPCError(1, "division by zero")
# JSON has no infinity: a result past the largest float is the caller's error, declared.
OUT_OF_RANGE = RPCError(2, "the result is beyond the largest number")


def sum(a: int, b: int = 0) -> int:
    """Add two integers.

    `b` may be left out: it counts as 0."""
    return a + b


def divide(a: float, b: float) -> float:
    """Divide a by b."""
    if b == 0:
        raise DIVISION_BY_ZERO
    return _finite(a / b)


def scale(point: Point, factor: float = 2.0) -> Point:
    """Scale a point about the origin."""
    return Point(_finite(point.x * factor), _finite(point.y * factor))


def _finite(number: float) -> float:
    if not math.isfinite(number):
        raise OUT_OF_RANGE
    return number


def greet(name: str, tone: Tone = Tone.WARM) -> str:
    """Greet someone."""
    return f"Hello, {name}!" if tone is Tone.WARM else f"Good day, {name}."


def clamp(value: float, range: Range) -> float:
    """Bring a value into a range."""
    return min(max(value, range["low"]), range["high"])


def checksum(data: bytes) -> int:
    """The sum of the bytes, modulo 256."""
    total = 0
    for byte in data:
        total += byte
    return total % 256


def pick(options: list[str], end: Literal["first", "last"] = "first", fallback: Optional[str] = None) -> Optional[str]:
    """The first or last option, or the fallback when there is none."""
    if not options:
        return fallback
    return options[0] if end == "first" else options[-1]


def make_server(port: int = 8545, host: str = "127.0.0.1", engine: str = "auto") -> Server:
    server = Server(port=port, host=host, engine=engine, title="Described example", version="1.2.0")
    server.route(sum, examples=[{"params": {"a": 1, "b": 2}, "result": 3}, {"params": [40, 2], "result": 42}])
    server.route(divide, examples=[{"params": {"a": 1, "b": 4}, "result": 0.25}], errors=[DIVISION_BY_ZERO, OUT_OF_RANGE])
    server.route(
        scale,
        examples=[{"params": {"point": {"x": 1, "y": -2}, "factor": 3}, "result": {"x": 3, "y": -6}}],
        errors=[OUT_OF_RANGE],
    )
    server.route(greet, examples=[{"params": {"name": "Ada"}, "result": "Hello, Ada!"}])
    server.route(clamp, examples=[{"params": {"value": 12, "range": {"low": 0, "high": 10}}, "result": 10}])
    server.route(checksum, examples=[{"params": {"data": b"\x01\x02\x03"}, "result": 6}])
    server.route(pick, examples=[{"name": "last", "params": {"options": ["a", "b"], "end": "last"}, "result": "b"}])
    return server


# What `ucall serve` runs; nothing binds until it runs.
server = make_server()

if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=8545)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--engine", default="auto")
    args = parser.parse_args()
    server = make_server(port=args.port, host=args.host, engine=args.engine)
    server.run()  # says "ucall: listening on http://..." on stderr once serving
