# SPDX-License-Identifier: Apache-2.0
"""The shared vectors' test server (tests/vectors/README.md) written with `ucall.Server`.

    python tests/python_api/spec_server.py --host 127.0.0.1 --port 0 --threads 2 --engine poll

Run the shared live-server suite against it with
`UCALL_SPEC_SERVER=tests/python_api/spec_server.sh python -m pytest -c tests/python/pytest.ini tests/python`.
"""

import argparse
import math
import sys
from typing import Any

from ucall import ErrorCode, RPCError, Server


def number(name: str, value: Any) -> Any:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise RPCError(ErrorCode.INVALID_PARAMS, f"Invalid params: parameter '{name}' must be a number")
    return value


def from_hex(text: str) -> bytes:
    """The bytes a hex text spells (the vectors' `unhex`)."""
    try:
        return bytes.fromhex(text)
    except ValueError:
        raise RPCError(ErrorCode.INVALID_PARAMS, "Invalid params: 'text' is not an even number of hex digits") from None


def build(args: argparse.Namespace) -> Server:
    server = Server(
        port=args.port,
        host=args.host,
        threads=args.threads,
        engine=args.engine,
        max_body_bytes=args.max_body_bytes,
        max_head_bytes=args.max_header_bytes,
        max_batch=args.max_batch,
        max_connections=args.max_connections,
        header_timeout=None if args.header_timeout_ms is None else args.header_timeout_ms / 1000,
        idle_timeout=None if args.idle_timeout_ms is None else args.idle_timeout_ms / 1000,
        tls_cert=args.tls_cert,
        tls_key=args.tls_key,
        tls_client_ca=args.tls_client_ca,
        tls_port=args.tls_port,
    )

    @server
    def subtract(minuend, subtrahend):  # type: ignore[no-untyped-def]
        return number("minuend", minuend) - number("subtrahend", subtrahend)

    @server
    def sum(*args, **kwargs):  # type: ignore[no-untyped-def]
        values = list(args) + list(kwargs.values())
        for index, value in enumerate(values):
            number(str(index), value)
        total = 0
        for value in values:
            total += value
        if isinstance(total, int) and not -(2**63) <= total < 2**63:
            raise RPCError(ErrorCode.INVALID_PARAMS, "Invalid params: the sum overflows 64 bits")
        if isinstance(total, float) and not math.isfinite(total):
            raise RPCError(ErrorCode.INVALID_PARAMS, "Invalid params: the sum is too large for a double")
        return total

    def anything(*args, **kwargs):  # type: ignore[no-untyped-def]
        return None

    for name in ("update", "notify_hello", "notify_sum"):
        server.route(anything, name=name)

    @server
    def get_data():  # type: ignore[no-untyped-def]
        return ["hello", 5]

    @server
    def echo(data):  # type: ignore[no-untyped-def]
        return data

    @server
    def hex(data: bytes) -> str:  # noqa: A001 (the vectors' name)
        return data.hex()

    # Results that are binary values (tests/vectors/README.md, "binary/replies"):
    # attachments for a caller that accepts binary replies, base64 for any other.
    @server
    def unhex(text: str) -> bytes:
        return from_hex(text)

    @server
    async def unhex_later(text: str) -> bytes:
        return from_hex(text)

    @server
    def floats(n: int) -> Any:
        import numpy as np

        return np.arange(n, dtype="<f4")

    # Streamed results (the stream vectors, docs/streaming.md).
    @server
    def count(n: int, fail: bool = False) -> Any:
        for i in range(n):
            yield i
        if fail:
            raise RPCError(-32001, "boom")
        return "done"

    @server
    def frames(n: int) -> Any:
        import numpy as np

        for i in range(n):
            yield np.arange(i, i + 4, dtype="<f4")
        return "done"

    @server
    def fail():  # type: ignore[no-untyped-def]
        raise RPCError(-32001, "boom", {"why": "asked to fail"})

    @server
    def panic():  # type: ignore[no-untyped-def]
        raise RuntimeError("asked to fail abnormally")

    return server


def main() -> None:
    parser = argparse.ArgumentParser(description="UCall test-vector server (Python)")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--engine", default="auto")
    for flag in ("max-body-bytes", "max-header-bytes", "max-batch", "max-connections"):
        parser.add_argument(f"--{flag}", type=int, default=None)
    parser.add_argument("--header-timeout-ms", type=int, default=None)
    parser.add_argument("--idle-timeout-ms", type=int, default=None)
    parser.add_argument("--tls-cert", default=None)
    parser.add_argument("--tls-key", default=None)
    parser.add_argument("--tls-client-ca", default=None)
    parser.add_argument("--tls-port", type=int, default=None)
    args = parser.parse_args()
    server = build(args)
    try:
        server.run()  # says the start-up line on stderr, as every UCall server does
    except OSError as error:
        print(f"error: {error}", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
