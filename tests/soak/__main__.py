# SPDX-License-Identifier: Apache-2.0
"""Soak test: many connections over HTTP, raw TCP, WebSocket and TLS against the shared test
server (Rust, C or Python), on each engine, with every reply checked and the server's RSS,
file descriptors and threads sampled every second.

    python tests/soak [--seconds 600 | --forever] [--servers rust,c,python] [--engines poll,uring]

Writes target/soak/soak.md (the table) and target/soak/<server>-<engine>.png (the plot).
Exits non-zero when any run fails. `make soak` builds the servers and runs this.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import report
from soak import soak

ROOT = Path(__file__).resolve().parents[2]
SERVERS = {
    "rust": [str(ROOT / "target/release/spec_server")],
    "c": [str(ROOT / "target/c/spec_server_release")],
    "python": [str(ROOT / "tests/python_api/spec_server.sh")],
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=600, help="length of each run (default 600)")
    parser.add_argument("--forever", action="store_true", help="run until interrupted (one server and engine)")
    parser.add_argument("--servers", default="rust,c,python")
    parser.add_argument("--engines", default="poll,uring")
    parser.add_argument("--idle", type=int, default=200, help="idle connections held open (default 200)")
    parser.add_argument("--out", type=Path, default=ROOT / "target/soak")
    for name, command in SERVERS.items():
        parser.add_argument(f"--{name}", default=command[0], help=f"the {name} test server (default {command[0]})")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    results = []
    for server in args.servers.split(","):
        for engine in args.engines.split(","):
            def progress(sample, run, server=server, engine=engine):
                if int(sample.seconds) % 10 == 0:
                    print(f"soak {server}/{engine} {sample.seconds:5.0f}s  rss {sample.rss_kib / 1024:6.1f} MiB  "
                          f"fds {sample.fds:4}  threads {sample.threads:3}  requests {sample.requests:8}  "
                          f"failures {len(run.failures)}", flush=True)

            result = soak(server, [getattr(args, server)], engine, args.seconds, args.idle,
                          args.out / f"{server}-{engine}.log", args.forever, progress)
            report.plot(result, args.out / f"{server}-{engine}.png")
            results.append(result)
            print(f"soak {server}/{engine}: {'pass' if result.passed else 'FAIL: ' + '; '.join(result.problems)}",
                  flush=True)
    text = report.table(results)
    (args.out / "soak.md").write_text(text)
    print(text)
    return 0 if all(r.passed for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
