# SPDX-License-Identifier: Apache-2.0
"""grpcio's code for bench.proto (bench_pb2.py, bench_pb2_grpc.py), generated with
grpcio-tools into a build directory (target/bench/peers, ignored by git) when it is missing
or older than bench.proto: a fresh clone's bench makes it on first use.

    python grpc_stubs.py OUT_DIR

Run by an interpreter with grpcio-tools (benches/.venv-peers, benches/setup_peers.sh);
grpc_app.py calls `ensure` before it imports the code.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

PROTO = Path(__file__).resolve().parent / "bench.proto"
NAMES = ("bench_pb2.py", "bench_pb2_grpc.py")


def stale(out: Path) -> bool:
    """Whether the code in `out` is missing or older than bench.proto."""
    made = [out / name for name in NAMES]
    if not all(path.exists() for path in made):
        return True
    return min(path.stat().st_mtime for path in made) < PROTO.stat().st_mtime


def ensure(out: str | Path) -> None:
    """Generates the code into `out` when `stale`; each file is renamed into place whole, so
    a server starting meanwhile imports the old code or the new, never half of one."""
    out = Path(out)
    if not stale(out):
        return
    from grpc_tools import protoc

    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=out) as tmp:
        argv = ["protoc", f"-I{PROTO.parent}", f"--python_out={tmp}", f"--grpc_python_out={tmp}", str(PROTO)]
        status = protoc.main(argv)
        if status != 0:
            raise RuntimeError(f"grpc_tools.protoc failed with status {status} on {PROTO}")
        for name in NAMES:
            os.replace(Path(tmp, name), out / name)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    ensure(sys.argv[1])
