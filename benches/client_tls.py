# SPDX-License-Identifier: Apache-2.0
"""The Python clients over HTTPS: rustls (the native transport) beside Python's ssl.

    python benches/client_tls.py [--calls 1000] [--samples 5] [--append FILE]
                                             (make bench-client-tls; make bench appends its table)

The Rust ``sum_server`` serves HTTPS on CPU 0 with a throwaway certificate (made with
the openssl command in a temporary folder); each client runs in a process of its own
on CPU 1 and makes ``--calls`` calls of ``sum`` per sample, verifying the certificate
against the throwaway CA:

* ``Client`` sequential, one call at a time; ``AsyncClient``, the calls gathered;
* ``native``: ``cacert=`` (rustls in ``ucall-client``); ``python-ssl``: the same
  settings as an ``ssl_context=`` (Python's ``ssl``, as every TLS call went before).

Prints calls/s and the client's CPU µs per call (all its threads). Every process it
starts is stopped by its PID.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from client_bench import CLIENT_CPU, ROOT, Server

CLIENTS = [(kind, tls) for kind in ("sequential", "async") for tls in ("python-ssl", "native")]


def worker(kind: str, tls: str, port: int, ca: str, calls: int, samples: int) -> dict:
    from ucall.client import AsyncClient, Client, tls_context

    options = {"ssl_context": tls_context(cacert=ca)} if tls == "python-ssl" else {"cacert": ca}
    url = f"https://127.0.0.1:{port}"

    if kind == "async":
        loop = asyncio.new_event_loop()
        client = AsyncClient(url, timeout=60, **options)

        async def gathered() -> None:
            replies = await asyncio.gather(*(client.sum(i, 1) for i in range(calls)))
            if [r.json for r in replies] != [i + 1 for i in range(calls)]:
                raise SystemExit("wrong sums")

        def sample() -> None:
            loop.run_until_complete(gathered())

    else:
        client = Client(url, timeout=60, **options)

        def sample() -> None:
            for i in range(calls):
                if client.sum(i, 1).json != i + 1:
                    raise SystemExit("wrong sum")

    sample()  # warm-up: the connection open, the handshake done
    cpu, wall = time.process_time(), time.perf_counter()
    for _ in range(samples):
        sample()
    seconds, cpu = time.perf_counter() - wall, time.process_time() - cpu
    if kind == "async":
        loop.run_until_complete(client.close())
        loop.close()
    else:
        client.close()
    return {"calls": calls * samples, "seconds": seconds, "cpu_seconds": cpu}


def certificates(folder: Path) -> None:
    """``ca.pem`` and a ``cert.pem``/``key.pem`` for 127.0.0.1 it signs."""

    def openssl(*args: str) -> None:
        subprocess.run(["openssl", *args], check=True, capture_output=True, timeout=60)

    ec = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-days", "1")
    openssl("req", "-x509", *ec, "-keyout", str(folder / "ca.key"), "-out", str(folder / "ca.pem"),
            "-subj", "/CN=bench ca", "-addext", "basicConstraints=critical,CA:TRUE",
            "-addext", "keyUsage=critical,keyCertSign")
    openssl("req", *ec[:5], "-keyout", str(folder / "key.pem"), "-out", str(folder / "leaf.csr"), "-subj", "/CN=bench")
    (folder / "leaf.ext").write_text("subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n")
    openssl("x509", "-req", "-in", str(folder / "leaf.csr"), "-CA", str(folder / "ca.pem"), "-CAkey",
            str(folder / "ca.key"), "-CAcreateserial", "-out", str(folder / "cert.pem"), "-days", "1",
            "-extfile", str(folder / "leaf.ext"))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=1000, help="calls per sample")
    parser.add_argument("--samples", type=int, default=5, help="measured samples per client")
    parser.add_argument("--append", type=Path, help="add the table to this Markdown file")
    parser.add_argument("--worker", nargs=2, help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--ca", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(worker(*args.worker, args.port, args.ca, args.calls, args.samples)))
        return 0

    subprocess.run(["cargo", "build", "--release", "--quiet", "-p", "ucall-examples", "--bin", "sum_server"],
                   check=True, cwd=ROOT)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        certificates(folder)
        server = Server([str(ROOT / "target/release/sum_server"), "--port", "0", "--engine", "poll",
                         "--tls-cert", str(folder / "cert.pem"), "--tls-key", str(folder / "key.pem")])
        try:
            for kind, tls in CLIENTS:
                argv = [sys.executable, __file__, "--worker", kind, tls, "--port", str(server.port),
                        "--ca", str(folder / "ca.pem"), "--calls", str(args.calls), "--samples", str(args.samples)]
                env = dict(os.environ, PYTHONPATH=str(ROOT / "python"))
                done = subprocess.run(["taskset", "-c", str(CLIENT_CPU), *argv], capture_output=True, text=True,
                                      timeout=600, env=env)
                if done.returncode != 0:
                    rows.append(f"| {kind} | {tls} | failed: {(done.stderr.strip().splitlines() or ['?'])[-1]} | |")
                    continue
                figures = json.loads(done.stdout.strip().splitlines()[-1])
                rate = figures["calls"] / figures["seconds"]
                cpu = 1e6 * figures["cpu_seconds"] / figures["calls"]
                rows.append(f"| {'Client, sequential' if kind == 'sequential' else 'AsyncClient, gathered'}"
                            f" | {tls} | {rate:,.0f} | {cpu:,.1f} |")
                print(rows[-1], flush=True)
        finally:
            server.stop()
    lines = [
        f"{args.calls:,} calls of `sum` over HTTPS per sample, {args.samples} samples, the Rust `sum_server` on "
        f"CPU 0, each client in a process of its own on CPU {CLIENT_CPU}; native is rustls, python-ssl an "
        "`ssl_context=` (Python's `ssl`).",
        "",
        "| client | TLS | calls/s | client CPU µs/call |",
        "|---|---|---:|---:|",
        *rows,
    ]
    print("\n" + "\n".join(lines))
    if args.append:
        with args.append.open("a") as brief:
            brief.write("\n### Python clients over HTTPS (benches/client_tls.py)\n\n" + "\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
