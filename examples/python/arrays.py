# SPDX-License-Identifier: Apache-2.0
"""A numpy array there and back over every transport, as raw attachments (docs/wire.md).

    python examples/python/arrays.py            # serve, call over each transport, stop
    python examples/python/arrays.py --serve --port 8545 [--tls-cert C --tls-key K --tls-port 8546]

The first form starts its own server (with a throwaway certificate for TLS, made by the
`openssl` command), sends a 1.6 MB float32 array over HTTP, raw TCP and WebSocket, plain
and TLS, and checks that the same array comes back, and that a generator's frames stream
back as arrays too (docs/streaming.md). The second only serves, for other clients
(js/examples/arrays.mjs). curl and other plain JSON clients get base64 instead.
"""

import argparse
import subprocess
import tempfile
from pathlib import Path

import numpy as np

from ucall import Server
from ucall.client import Client


last_call = {"in_place": False}


def echo(x: np.ndarray) -> np.ndarray:
    # From an attachment `x` views the bytes where they lie in the receive buffer
    # (read-only, no copy); from a plain JSON caller's base64 it is a new, writable array.
    # Returned, it is written back from that memory.
    last_call["in_place"] = not x.flags.writeable
    return x


def scale(x: np.ndarray, factor: float) -> np.ndarray:
    return x * factor


def frames(x: np.ndarray, n: int):
    # A streamed result: each frame goes as an attachment of its own message.
    for i in range(n):
        yield x * i


def in_place() -> bool:
    """Whether the last echo's `x` viewed its attachment in the receive buffer: how a
    client in another language (js/examples/arrays.mjs) sees that its array travelled as
    an attachment, not as base64."""
    return last_call["in_place"]


def make_server(port: int, **options) -> Server:
    server = Server(port=port, **options)
    server(echo)
    server(scale)
    server(frames)
    server(in_place)
    return server


def throwaway_certificate(folder: str) -> tuple[str, str]:
    """A self-signed certificate for 127.0.0.1: for this example only, never for serving."""
    cert, key = str(Path(folder, "cert.pem")), str(Path(folder, "key.pem"))
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
         "-days", "1", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
         "-addext", "basicConstraints=critical,CA:FALSE",
         "-keyout", key, "-out", cert],
        check=True, capture_output=True,
    )  # fmt: skip
    return cert, key


def round_trips() -> None:
    x = np.random.default_rng(7).standard_normal((400, 1000), dtype=np.float32)  # 1.6 MB
    with tempfile.TemporaryDirectory() as folder:
        cert, key = throwaway_certificate(folder)
        # One port for plain HTTP, raw TCP and WebSocket; TLS on a second one.
        with make_server(0, tls_cert=cert, tls_key=key, tls_port=0) as server:
            plain, tls = f"127.0.0.1:{server.port}", f"127.0.0.1:{server.tls_port}"
            for url in [f"http://{plain}", f"tcp://{plain}", f"ws://{plain}",
                        f"https://{tls}", f"tls://{tls}", f"wss://{tls}"]:  # fmt: skip
                with Client(url, cacert=cert if url.startswith(("https", "tls", "wss")) else None) as client:
                    back = client.echo(x).numpy
                    doubled = client.scale(x, 2.0).numpy
                    same = back.dtype == x.dtype and np.array_equal(back, x) and np.array_equal(doubled, 2 * x)
                    scheme, in_place = url.split(":")[0], last_call["in_place"]
                    streamed = list(client.stream("frames", x, 3))
                    frames_equal = all(np.array_equal(frame, x * i) for i, frame in enumerate(streamed))
                    print(
                        f"{scheme}: {back.dtype} {back.shape} equal: {same}, an attachment viewed in place: {in_place},"
                        f" {len(streamed)} streamed frames equal: {frames_equal}"
                    )
            # A client that asks for plain JSON gets the same array, as base64 of its .npy.
            with Client(f"http://{plain}", binary=False) as client:
                same = np.array_equal(client.echo(x).numpy, x)
                print(f"json/base64: equal: {same}, an attachment viewed in place: {last_call['in_place']}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--serve", action="store_true", help="only serve, until Ctrl-C or SIGTERM")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8545)
    parser.add_argument("--tls-cert")
    parser.add_argument("--tls-key")
    parser.add_argument("--tls-port", type=int)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--engine", default="auto")
    args = parser.parse_args()
    if args.serve:
        tls = {"tls_cert": args.tls_cert, "tls_key": args.tls_key, "tls_port": args.tls_port} if args.tls_cert else {}
        make_server(args.port, host=args.host, threads=args.threads, engine=args.engine, **tls).run()
    else:
        round_trips()
