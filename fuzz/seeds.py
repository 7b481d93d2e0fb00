#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Writes the seed corpus of every fuzz target from the shared vectors.

    fuzz/seeds.py OUT_DIR

OUT_DIR/<target>/ gets the requests of tests/vectors/jsonrpc/*.json in the form the target
reads (a raw text, an HTTP request, a WebSocket frame, a query string...), then the files of
tests/vectors/fuzz/<target>/ (inputs that once failed, kept as regression vectors). libFuzzer
adds what it finds to OUT_DIR, which is a build output: only the vectors are in git.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from urllib.parse import quote

ROOT = Path(__file__).resolve().parents[1]
MASK = bytes([0x37, 0xFA, 0x21, 0x3D])


def requests() -> list[bytes]:
    found = []
    for path in sorted((ROOT / "tests/vectors/jsonrpc").glob("*.json")):
        request = json.loads(path.read_text()).get("request")
        if isinstance(request, str):
            found.append(request.encode())
    return found


def http_post(body: bytes, path: str = "/") -> bytes:
    return b"POST %s HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s" % (path.encode(), len(body), body)


def chunked(body: bytes) -> bytes:
    half = len(body) // 2
    parts = [body[:half], body[half:]]
    return b"".join(b"%x;ext=1\r\n%s\r\n" % (len(p), p) for p in parts if p) + b"0\r\nTrailer: v\r\n\r\n"


def ws_frame(payload: bytes, opcode: int = 1) -> bytes:
    n = len(payload)
    if n < 126:
        head = bytes([0x80 | opcode, 0x80 | n])
    elif n < 1 << 16:
        head = bytes([0x80 | opcode, 0x80 | 126]) + n.to_bytes(2, "big")
    else:
        head = bytes([0x80 | opcode, 0x80 | 127]) + n.to_bytes(8, "big")
    return head + MASK + bytes(b ^ MASK[i % 4] for i, b in enumerate(payload))


WS_UPGRADE = (
    b"GET / HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
    b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
)


def query(request: bytes) -> bytes | None:
    try:
        message = json.loads(request)
    except ValueError:
        return None
    if not isinstance(message, dict) or not isinstance(message.get("params"), dict):
        return None
    pairs = [f"{quote(str(k))}={quote(json.dumps(v))}" for k, v in message["params"].items()]
    return f"/{quote(str(message.get('method', '')))}?{'&'.join(pairs)}".encode()


def binary_inputs() -> list[bytes]:
    """The binary vectors' JSON texts and sections, as `binary_messages` reads them."""
    found = []
    for path in sorted((ROOT / "tests/vectors/binary").glob("*.json")):
        vector = json.loads(path.read_text())
        text = vector.get("json", "").encode()
        if not text or len(text) > 255:
            continue
        section = bytearray(vector.get("section_length", 0))
        for item in vector["attachments"]:
            data = bytes.fromhex(item["hex"])
            end = item["offset"] + len(data)
            section.extend(bytes(max(0, end - len(section))))
            section[item["offset"] : end] = data
        found.append(b"\x05" + bytes([len(text)]) + text + bytes(section))
    return found


def seeds() -> dict[str, list[bytes]]:
    texts = requests()
    split = b"\x05"  # the first byte of a split target: its split points
    return {
        "jsonrpc": texts,
        "jsonrpc_vs_serde": [b"\x00" + t for t in texts] + [b"\x01" + t for t in texts[:8]],
        "tcp_framing": [split + t for t in texts] + [split + b"\n".join(texts)],
        "http_head": [http_post(t) for t in texts[:16]] + [WS_UPGRADE, b"GET /sum?a=1&b=2 HTTP/1.0\r\n\r\n"],
        "chunked_body": [split + chunked(t) for t in texts],
        "ws_frames": [ws_frame(t) for t in texts] + [ws_frame(b"\x03\xe8bye", 8), ws_frame(b"", 9)],
        "rest_query": [q for q in map(query, texts) if q] + [b"/echo?data=%7B%22x%22%3A1%7D&&b", b"/%zz?a=+"],
        "session": [split + http_post(t) for t in texts]
        + [split + b"".join(texts)]
        + [split + b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n" + chunked(t) for t in texts[:8]]
        + [split + WS_UPGRADE + b"".join(ws_frame(t) for t in texts[:8])]
        + [split + b"GET /sum?a=1&b=2 HTTP/1.1\r\nHost: x\r\n\r\n" + http_post(texts[0])],
        "bytes_params": [b"", b"Zm9vYmFy", b"Zm9vYg==", b"Zm9vYg", b"AP8A/w==", b"QR==", b"Zm9 v"],
        "binary_messages": binary_inputs(),
    }


def main(out: Path) -> int:
    for target, inputs in seeds().items():
        directory = out / target
        directory.mkdir(parents=True, exist_ok=True)
        for i, data in enumerate(inputs):
            (directory / f"seed-{i:03}").write_bytes(data)
        vectors = ROOT / "tests/vectors/fuzz" / target
        if vectors.is_dir():
            for vector in sorted(vectors.iterdir()):
                shutil.copyfile(vector, directory / vector.name)
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
