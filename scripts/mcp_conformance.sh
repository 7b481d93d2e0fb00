#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Run @modelcontextprotocol/conformance's server scenarios (pinned in tests/node) against
# UCall's MCP endpoint: the Python server with the tools of tests/node/mcp_conformance_app.py
# on a free loopback port. Scenarios UCall is expected to fail, and why, are listed in
# tests/node/mcp-conformance-baseline.yml; any other failure (or a listed one that passes)
# fails the run.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
port=$("$PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
PYTHONPATH=tests/node "$PY" -m ucall serve mcp_conformance_app:server --port "$port" >/dev/null &
server=$!
trap 'kill "$server" 2>/dev/null || true; wait "$server" 2>/dev/null || true' EXIT
for _ in $(seq 100); do
    (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break
    sleep 0.1
done
node tests/node/node_modules/.bin/conformance server --url "http://127.0.0.1:$port/mcp" \
    --expected-failures tests/node/mcp-conformance-baseline.yml
