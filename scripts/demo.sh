#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Start an example server on a free port, call it over HTTP, REST and raw TCP, stop it.
set -euo pipefail
server=${1:-target/release/sum_server}
log=$(mktemp)
"$server" --port 0 --threads 2 >"$log" 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null; rm -f "$log"' EXIT
# The start-up line, on stderr: "ucall: listening on http://127.0.0.1:PORT (...)".
for _ in $(seq 50); do grep -q "ucall: listening on" "$log" && break; sleep 0.1; done
line=$(grep "ucall: listening on" "$log") || { cat "$log"; exit 1; }
port=$(sed -E 's/.*:([0-9]+) .*/\1/' <<<"$line")
echo "server: $line"
show() { printf '\n\033[1m$ %s\033[0m\n' "$1"; eval "$1"; echo; }
show "curl -s http://127.0.0.1:$port -d '{\"jsonrpc\":\"2.0\",\"method\":\"sum\",\"params\":{\"a\":1,\"b\":2},\"id\":1}'"
show "curl -s http://127.0.0.1:$port -d '[{\"jsonrpc\":\"2.0\",\"method\":\"sum\",\"params\":[40,2],\"id\":1},{\"jsonrpc\":\"2.0\",\"method\":\"echo\",\"params\":[\"héllo\"],\"id\":\"x\"}]'"
show "curl -s 'http://127.0.0.1:$port/sum?a=20&b=22'"
show "curl -s http://127.0.0.1:$port -d '{\"jsonrpc\":\"2.0\",\"method\":\"nope\",\"id\":7}'"
show "printf '{\"jsonrpc\":\"2.0\",\"method\":\"sum\",\"params\":[1,2],\"id\":1}\\n' | python3 -c 'import socket,sys; s=socket.create_connection((\"127.0.0.1\",$port)); s.sendall(sys.stdin.buffer.read()); print(s.makefile().readline(), end=\"\")'  # raw TCP"
echo "demo: ok"
