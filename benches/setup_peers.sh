#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Installs the peer servers of `make bench` into isolated venvs and records what works:
#   benches/.venv-peers     FastAPI + uvicorn, granian, socketify, grpcio (+ tools), matplotlib, mcp
#   benches/.venv-ucall054  the prior-art ucall==0.5.4 from PyPI
#   benches/.venv-ray       Ray Serve, for benches/batching.py
# Writes target/bench/peers/status.json ({"fastapi": "ok", "ucall054": "failed: ...", ...})
# and generates grpcio's code for benches/peers/bench.proto into target/bench/peers/
# (benches/peers/grpc_stubs.py; the gRPC servers also run it on demand). A peer that cannot
# be installed is recorded as failed, never fatal: benches/run.py shows it as such.
# Safe to run again: a venv is rebuilt only when its requirements file changed.
set -uo pipefail
cd "$(dirname "$0")/.."

PY=${PYTHON:-python3}
OUT=target/bench/peers
mkdir -p "$OUT"
say() { printf '\033[1msetup-peers:\033[0m %s\n' "$*"; }
declare -A STATUS

# venv DIR REQUIREMENTS: create or refresh; prints nothing, returns pip's status.
venv() {
    local dir=$1 req=$2 stamp="$1/.requirements.sha256" sum
    sum=$(sha256sum "$req" | cut -d' ' -f1)
    if [ -x "$dir/bin/python" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$sum" ]; then
        return 0
    fi
    say "installing $req into $dir (a few minutes the first time)"
    rm -rf "$dir"
    "$PY" -m venv "$dir" || return 1
    "$dir/bin/python" -m pip install -q --disable-pip-version-check -r "$req" >"$OUT/$(basename "$dir").pip.log" 2>&1 || return 1
    echo "$sum" >"$stamp"
}

# check NAME PYTHON CODE: record whether CODE runs.
check() {
    local err
    if err=$(timeout 60 "$2" -c "$3" 2>&1); then
        STATUS[$1]=ok
    else
        STATUS[$1]="failed: $(printf '%s' "$err" | tail -n1 | tr -d '"\\' | cut -c1-160)"
    fi
}

if venv benches/.venv-peers benches/peers/requirements.txt; then
    P=benches/.venv-peers/bin/python
    check fastapi "$P" "import fastapi, uvicorn, uvloop, httptools"
    check granian "$P" "import granian"
    check socketify "$P" "import socketify"
    check matplotlib "$P" "import matplotlib"
    check grpcio "$P" "import grpc, grpc_tools"
    check mcp "$P" "import mcp.server, uvicorn"
    if [ "${STATUS[grpcio]}" = ok ] && ! "$P" benches/peers/grpc_stubs.py "$OUT" >"$OUT/protoc.log" 2>&1; then
        STATUS[grpcio]="failed: bench.proto did not compile (see $OUT/protoc.log)"
    fi
else
    reason="failed: pip install -r benches/peers/requirements.txt (see $OUT/.venv-peers.pip.log)"
    for name in fastapi granian socketify matplotlib grpcio; do STATUS[$name]=$reason; done
fi

if venv benches/.venv-ucall054 benches/peers/requirements-ucall054.txt; then
    check ucall054 benches/.venv-ucall054/bin/python "import ucall.posix, ucall.uring"
else
    STATUS[ucall054]="failed: pip install ucall==0.5.4 (see $OUT/.venv-ucall054.pip.log)"
fi

# Ray Serve, the peer of benches/batching.py (dynamic batching): a large install of its own.
if venv benches/.venv-ray benches/batch_apps/requirements-ray.txt; then
    check ray benches/.venv-ray/bin/python "import ray.serve"
else
    STATUS[ray]="failed: pip install -r benches/batch_apps/requirements-ray.txt (see $OUT/.venv-ray.pip.log)"
fi

{
    printf '{'
    sep=""
    for name in "${!STATUS[@]}"; do
        printf '%s"%s": "%s"' "$sep" "$name" "${STATUS[$name]}"
        sep=", "
    done
    printf '}\n'
} >"$OUT/status.json"
for name in "${!STATUS[@]}"; do say "$name: ${STATUS[$name]}"; done
exit 0
