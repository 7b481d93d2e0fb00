# SPDX-License-Identifier: Apache-2.0
"""Where things are, which CPU each side gets, how long a figure lasts: the settings every module shares."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TARGET = ROOT / "target"
BENCH_DIR = TARGET / "bench"
RESULTS = ROOT / "benches" / "results"
LOAD_BIN = TARGET / "release" / "ucall-load"
GRPC_LOAD_BIN = TARGET / "release" / "ucall-load-grpc"
BODIES = BENCH_DIR / "bodies"
PEERS_DIR = ROOT / "benches" / "peers"
# Written by benches/setup_peers.sh with the generated gRPC code.
PEERS_STATUS = BENCH_DIR / "peers" / "status.json"
PEERS_PY = "benches/.venv-peers/bin/python"
UCALL054_PY = "benches/.venv-ucall054/bin/python"
UCALL054_NO_LISTS = "unsupported: no list or object params (-32602)"

SERVER_CPU = 0
CLIENT_CPU = 1
# Chosen so that `make bench` ends within 20 minutes and `make bench-quick` within 2 on a
# two-core machine, with every server of the table.
FULL_DURATION, FULL_WARMUP = 1.2, 0.4
QUICK_DURATION, QUICK_WARMUP = 0.5, 0.25
LOADAVG_LIMIT = 2.5
# Also disturbed: other processes used more than this share of one CPU during the run.
OTHER_CPU_LIMIT = 25.0
# A load generator this busy may be what limits the figure, not the server.
CLIENT_BOUND_CPU = 90.0
DEFAULT_BODY = '{"jsonrpc":"2.0","method":"sum","params":{"a":1,"b":2},"id":1}'
SUM_REPLY = '"result":3'
