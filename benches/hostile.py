#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Hostile clients against one server at a time, with a well-behaved client measured meanwhile.

    .venv/bin/python benches/hostile.py [--servers ucall-rust-poll,ucall-python,...]
                                        [--kinds garbage,pipeline-abandon,...] [--seconds 6]

For each server (names from benches/run.py, pinned to CPU 0) and each kind of hostile
client, threads of this process (on CPU 1) play that client in a loop for `--seconds`
while `ucall-load` (also on CPU 1) calls `sum` over one keep-alive connection. The table
says whether the server lived, how the well-behaved client fared (answers, errors, p50,
p99, max), and the server's resident memory, open files and threads before and after.

Kinds (a connection each time, then a close or a reset):
- garbage: random bytes;
- slow-head: a request head a byte at a time, never finished;
- short-body: a head announcing 5 MB, then up to 100 KB of it;
- echo-cut: a 0.1-2 MB `echo` cut anywhere while sent or while its reply is read;
- websocket: an upgrade, then fragments, pings, bad UTF-8, unmasked or unknown frames;
- tcp-stream: raw TCP requests with a truncated or garbled last one;
- pipeline-abandon: 10-2,000 pipelined valid `sum` calls, never read;
- flood: 200 connections opened at once, held, then dropped.

Slow peers that hold their connections (each held `HOLD` seconds, then dropped; the
server's bounds and time-outs for each are in docs/reliability.md, "Slow and hostile
peers", and tests/ check them):
- slow-read, slow-read-tcp, slow-read-ws: 4 KB `echo` calls over HTTP, raw TCP or
  WebSocket, sent until the server stops taking them, replies never read;
- pipeline-stall: pipelined `sum` calls over HTTP, the first reply read, then no more;
- slowloris: 50 connections each with a request head that gains a header line every
  200 ms and never ends;
- ws-no-close: a WebSocket that breaks the protocol (an unmasked frame) so that the
  server closes with 1002, then never answers the Close, reads nothing and sends Pings.

Pipelines, floods and held slow peers are valid requests in numbers no server answers
in time: they show overload (memory and the other client's latency), not bad input. The
RSS column "during" is read while the hostile clients hold their connections; divided
by the connections held it bounds what one such peer costs. With io_uring, the
connections are registered files and do not show among the open files.
"""

from __future__ import annotations

import argparse
import atexit
import base64
import json
import os
import random
import signal
import socket
import struct
import sys
import threading
import time
from pathlib import Path

from ucallbench import config, measure, processes, servers

DEFAULT_SERVERS = ("ucall-rust-poll", "ucall-rust-uring", "ucall-python", "ucall-python-uring")
THREADS_PER_KIND = 2
HOLD = 2.0  # seconds a slow peer holds its connection
SLOWLORIS_HEADS = 50
SUM = b'{"jsonrpc":"2.0","method":"sum","params":[1,2],"id":1}'


def post(body: bytes) -> bytes:
    head = f"POST / HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    return head.encode() + body


def drop(sock: socket.socket) -> None:
    """Close, half the time with a reset (SO_LINGER 0) rather than a FIN."""
    if random.random() < 0.5:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()


def read_some(sock: socket.socket, at_most: int) -> None:
    got = 0
    while got < at_most:
        chunk = sock.recv(65536)
        if not chunk:
            return
        got += len(chunk)


def garbage(addr: tuple[str, int]) -> None:
    with socket.create_connection(addr, timeout=2) as sock:
        sock.sendall(os.urandom(random.randint(1, 5000)))
        if random.random() < 0.5:
            read_some(sock, 1)
        drop(sock)


def slow_head(addr: tuple[str, int]) -> None:
    with socket.create_connection(addr, timeout=2) as sock:
        for byte in b"POST / HTTP/1.1\r\nHost: x\r\nContent-Len":
            sock.send(bytes([byte]))
            time.sleep(0.01)
        drop(sock)


def short_body(addr: tuple[str, int]) -> None:
    with socket.create_connection(addr, timeout=2) as sock:
        head = b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5000000\r\n\r\n"
        sock.sendall(head + b"[" * random.randint(0, 100_000))
        drop(sock)


def echo_cut(addr: tuple[str, int]) -> None:
    with socket.create_connection(addr, timeout=5) as sock:
        data = base64.b64encode(os.urandom(random.randint(100_000, 2_000_000))).decode()
        request = post(json.dumps({"jsonrpc": "2.0", "method": "echo", "params": {"data": data}, "id": 1}).encode())
        if random.random() < 0.4:
            sock.sendall(request[: random.randint(0, len(request))])
        else:
            sock.sendall(request)
            read_some(sock, random.randint(0, len(request)))
        drop(sock)


def ws_frame(opcode: int, payload: bytes, fin: bool = True, masked: bool = True) -> bytes:
    first = (0x80 if fin else 0) | opcode
    mask_bit = 0x80 if masked else 0
    n = len(payload)
    if n < 126:
        head = bytes([first, mask_bit | n])
    elif n < 65536:
        head = bytes([first, mask_bit | 126]) + struct.pack(">H", n)
    else:
        head = bytes([first, mask_bit | 127]) + struct.pack(">Q", n)
    if not masked:
        return head + payload
    mask = os.urandom(4)
    return head + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload))


def websocket(addr: tuple[str, int]) -> None:
    with socket.create_connection(addr, timeout=2) as sock:
        key = base64.b64encode(os.urandom(16))
        sock.sendall(
            b"GET / HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            b"Sec-WebSocket-Key: " + key + b"\r\nSec-WebSocket-Version: 13\r\n\r\n"
        )
        read_some(sock, 1)
        frames = [
            ws_frame(1, SUM[:10], fin=False) + ws_frame(9, b"p") + ws_frame(0, SUM[10:]),
            ws_frame(1, b"\xff\xfe" + SUM),
            ws_frame(1, SUM, masked=False),
            ws_frame(random.randint(3, 7), os.urandom(20)),
            ws_frame(1, SUM) * 50 + ws_frame(8, b"\x03\xe8"),
            os.urandom(300),
        ]
        sock.sendall(random.choice(frames))
        read_some(sock, 1)
        drop(sock)


def tcp_stream(addr: tuple[str, int]) -> None:
    with socket.create_connection(addr, timeout=2) as sock:
        tail = SUM[: random.randint(0, len(SUM))] + (os.urandom(50) if random.random() < 0.3 else b"")
        sock.sendall(SUM * random.randint(1, 100) + tail)
        drop(sock)


def pipeline_abandon(addr: tuple[str, int]) -> None:
    with socket.create_connection(addr, timeout=2) as sock:
        sock.sendall(post(SUM) * random.randint(10, 2000))
        drop(sock)


def flood(addr: tuple[str, int]) -> None:
    held = []
    try:
        for _ in range(200):
            held.append(socket.create_connection(addr, timeout=2))
        time.sleep(0.2)
    finally:
        for sock in held:
            drop(sock)


def send_until_held_back(sock: socket.socket, request: bytes, limit: int = 64 << 20) -> int:
    """Write `request` again and again, reading nothing, until the server stops taking it
    (200 ms without progress); the bytes it took. Each copy is written whole (the rest of
    a partial write first): a copy cut short and followed by the next one would be a
    malformed request, which the server refuses or buffers as one unfinished text."""
    sock.setblocking(False)
    sent, at, stalled = 0, 0, None
    while sent < limit:
        try:
            n = sock.send(request[at:])
            sent += n
            at = (at + n) % len(request)
            stalled = None
        except BlockingIOError:
            stalled = stalled or time.monotonic()
            if time.monotonic() - stalled > 0.2:
                break
            time.sleep(0.005)
    sock.setblocking(True)
    return sent


def hold(sock: socket.socket, seconds: float = HOLD, ping: bytes = b"") -> None:
    """Keep the connection open, reading nothing (sending `ping` every 100 ms)."""
    until = time.monotonic() + seconds
    while time.monotonic() < until:
        time.sleep(0.1)
        if ping:
            sock.sendall(ping)


ECHO_4K = json.dumps({"jsonrpc": "2.0", "method": "echo", "params": {"data": "r" * 4000}, "id": 1}).encode()
WS_UPGRADE = (
    b"GET / HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
    b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
)


def slow_read(addr: tuple[str, int]) -> None:
    with socket.create_connection(addr, timeout=2) as sock:
        send_until_held_back(sock, post(ECHO_4K))
        hold(sock)
        drop(sock)


def slow_read_tcp(addr: tuple[str, int]) -> None:
    with socket.create_connection(addr, timeout=2) as sock:
        send_until_held_back(sock, ECHO_4K + b"\n")
        hold(sock)
        drop(sock)


def slow_read_ws(addr: tuple[str, int]) -> None:
    with socket.create_connection(addr, timeout=2) as sock:
        sock.sendall(WS_UPGRADE)
        send_until_held_back(sock, ws_frame(1, ECHO_4K))
        hold(sock)
        drop(sock)


def pipeline_stall(addr: tuple[str, int]) -> None:
    with socket.create_connection(addr, timeout=2) as sock:
        sock.sendall(post(SUM))
        read_some(sock, 1)
        send_until_held_back(sock, post(SUM) * 100)
        hold(sock)
        drop(sock)


def slowloris(addr: tuple[str, int]) -> None:
    held = []
    try:
        for _ in range(SLOWLORIS_HEADS):
            sock = socket.create_connection(addr, timeout=2)
            held.append(sock)
            sock.sendall(b"POST / HTTP/1.1\r\nHost: x\r\n")
        for line in range(int(HOLD / 0.2)):
            time.sleep(0.2)
            for sock in held:
                try:
                    sock.sendall(f"X-Drip-{line}: 1\r\n".encode())
                except OSError:
                    pass  # cut at the header time-out: the server's bound at work
    finally:
        for sock in held:
            drop(sock)


def ws_no_close(addr: tuple[str, int]) -> None:
    with socket.create_connection(addr, timeout=2) as sock:
        sock.sendall(WS_UPGRADE + ws_frame(1, SUM, masked=False))
        hold(sock, ping=ws_frame(9, b"p"))
        drop(sock)


KINDS = {
    "garbage": garbage,
    "slow-head": slow_head,
    "short-body": short_body,
    "echo-cut": echo_cut,
    "websocket": websocket,
    "tcp-stream": tcp_stream,
    "pipeline-abandon": pipeline_abandon,
    "flood": flood,
    "slow-read": slow_read,
    "slow-read-tcp": slow_read_tcp,
    "slow-read-ws": slow_read_ws,
    "pipeline-stall": pipeline_stall,
    "slowloris": slowloris,
    "ws-no-close": ws_no_close,
}
# Connections one hostile round holds at once (for the memory per peer).
HELD = {"flood": 200, "slowloris": SLOWLORIS_HEADS}


def status(pid: int) -> dict[str, int]:
    """RSS (KiB), open files and threads of process `pid`; empty once it is gone."""
    try:
        fields = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines())
        return {
            "rss": int(fields["VmRSS"].split()[0]),
            "files": len(os.listdir(f"/proc/{pid}/fd")),
            "threads": int(fields["Threads"]),
        }
    except (OSError, KeyError, ValueError):
        return {}


def attack(server: servers.Server, kind: str, seconds: float, light_call: measure.Call, threads: int) -> dict:
    proc = processes.ServerProcess(server, "http", config.BENCH_DIR / "logs")
    try:
        host, port = proc.addr.rsplit(":", 1)
        addr = (host, int(port))
        pid = proc.proc.pid
        before = status(pid)
        stop = time.monotonic() + seconds
        rounds = [0]

        def hostile() -> None:
            while time.monotonic() < stop:
                try:
                    KINDS[kind](addr)
                except OSError:
                    pass  # refused, reset or timed out: the server's choice, counted alike
                rounds[0] += 1

        players = [threading.Thread(target=hostile, daemon=True) for _ in range(threads)]
        for t in players:
            t.start()
        try:
            report = measure.load_seconds(proc.addr, light_call, 1, seconds)
        except processes.BenchError:
            report = {}  # the well-behaved client could not even start: shown as no calls
        during = status(pid)
        peak_files = during.get("files", -1)
        for t in players:
            t.join(timeout=10)
        time.sleep(1.0)  # what the server still holds once the hostile clients are gone
        after = status(pid)
        alive = proc.proc.poll() is None
        return {
            "server": server.name,
            "kind": kind,
            "hostile": rounds[0],
            "alive": alive,
            "light": report,
            "before": before,
            "after": after,
            "rss_during": during.get("rss", 0),
            "files_during": peak_files,
            "threads": threads,
        }
    finally:
        proc.stop()


def latency(us: float | None) -> str:
    if not us:
        return "—"
    return f"{us:,.0f} µs" if us < 1000 else f"{us / 1000:,.1f} ms"


def table(rows: list[dict], seconds: float) -> str:
    lines = [
        "### Hostile clients",
        "",
        f"`benches/hostile.py` at commit {measure.git_commit()}, {seconds:g} s per kind, "
        f"{rows[0]['threads'] if rows else THREADS_PER_KIND} hostile threads; the well-behaved client is `ucall-load`, 1 connection.",
        "",
        "| server | hostile kind | hostile rounds | server lived | calls answered | errors | p50 | p99 | max "
        "| RSS before → during → after | RSS per held peer | open files during → after | threads after |",
        "|---|---|---:|---|---:|---:|---:|---:|---:|---|---:|---|---:|",
    ]
    for r in rows:
        light = r["light"]
        lat = light.get("latency_us", {})
        errors = light.get("errors", {})
        n_errors = sum(v for v in errors.values() if isinstance(v, int)) if isinstance(errors, dict) else errors
        before, after = r["before"], r["after"]
        held = r["threads"] * HELD.get(r["kind"], 1)
        per_peer = max(r["rss_during"] - before.get("rss", 0), 0) / held
        lines.append(
            f"| `{r['server']}` | {r['kind']} | {r['hostile']:,} | {'yes' if r['alive'] else '**no**'} "
            f"| {light.get('requests', 0):,} | {n_errors} | {latency(lat.get('p50'))} | {latency(lat.get('p99'))} "
            f"| {latency(lat.get('max'))} | {before.get('rss', 0) / 1024:.1f} → {r['rss_during'] / 1024:.1f} → "
            f"{after.get('rss', 0) / 1024:.1f} MiB | {per_peer:,.0f} KiB "
            f"| {r['files_during']} → {after.get('files', '—')} | {after.get('threads', '—')} |"
        )
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--servers", default=",".join(DEFAULT_SERVERS), help="names from python -m ucallbench --help")
    ap.add_argument("--kinds", default=",".join(KINDS), help=f"of: {', '.join(KINDS)}")
    ap.add_argument("--seconds", type=float, default=6.0, help="per server and kind")
    ap.add_argument(
        "--threads",
        type=int,
        default=THREADS_PER_KIND,
        help="hostile threads per kind (each holds its connections at once)",
    )
    ap.add_argument("--append", type=Path, help="add the table to this Markdown file")
    args = ap.parse_args()
    for sig in processes.STOP_SIGNALS:
        signal.signal(sig, processes.on_stop_signal)
    atexit.register(processes.kill_children)
    known = {s.name: s for s in servers.SERVERS}
    names = [n.strip() for n in args.servers.split(",") if n.strip()]
    kinds = [k.strip() for k in args.kinds.split(",") if k.strip()]
    unknown = [n for n in names if n not in known] + [k for k in kinds if k not in KINDS]
    if unknown:
        print(f"hostile: unknown servers or kinds {unknown}", file=sys.stderr)
        return 2
    if not config.LOAD_BIN.exists():
        print(f"hostile: {config.LOAD_BIN} is missing: cargo build --release -p ucall-bench", file=sys.stderr)
        return 2
    os.sched_setaffinity(0, {config.CLIENT_CPU})
    light_call, _ = measure.sum_and_echo_calls()
    rows = []
    try:
        for name in names:
            for kind in kinds:
                processes.say(f"hostile: {name}: {kind} for {args.seconds:g} s")
                rows.append(attack(known[name], kind, args.seconds, light_call, args.threads))
    except processes.BenchError as e:
        print(f"hostile: error: {e}", file=sys.stderr)
        return 1
    finally:
        processes.kill_children()
    text = table(rows, args.seconds)
    print(text)
    if args.append:
        with open(args.append, "a") as out:
            out.write("\n" + text + "\n")
    return 0 if all(r["alive"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
