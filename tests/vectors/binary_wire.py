# SPDX-License-Identifier: Apache-2.0
"""A reference reading of docs/wire.md (binary messages), standard library only.

Suites use it to build the bytes of a binary vector for each transport and to check that
the vectors agree with the specification; it is written from the document alone, as any
client would be.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass
from pathlib import Path

ALIGN = 64
MAGIC = 0xC1
VERSION = 1
PREFIX = struct.Struct("<BBHIQ")  # magic, version, flags, JSON length, body length
PREFIX_LEN = PREFIX.size  # 16
CONTENT_TYPE = "application/vnd.ucall.binary"
JSON_LENGTH_HEADER = "UCall-JSON-Length"
SUBPROTOCOL = "ucall.binary.v1"
MARKER = "$ucall"

# dtype name -> item size in bytes (little-endian, C order): the package's one table (a data
# file, read here without importing the package), checked against docs/wire.md §2's table.
DTYPES: dict[str, int] = json.loads(
    (Path(__file__).resolve().parents[2] / "python" / "ucall" / "wire_dtypes.json").read_text()
)


class WireError(ValueError):
    """The bytes break a rule of docs/wire.md; `code` is the JSON-RPC code it earns."""

    def __init__(self, code: int, message: str):
        super().__init__(message)
        self.code = code


def align(n: int) -> int:
    """The first multiple of 64 at or after `n`."""
    return (n + ALIGN - 1) // ALIGN * ALIGN


def body(json_text: bytes, section: bytes) -> bytes:
    """A body: the JSON text, then (when there are attachments) zeros to a multiple of 64 and the section."""
    if not section:
        return json_text
    return json_text + bytes(align(len(json_text)) - len(json_text)) + section


def section(attachments: list[tuple[int, bytes]], length: int | None = None) -> bytes:
    """An attachment section holding each (offset, bytes), zeros elsewhere."""
    end = max((offset + len(data) for offset, data in attachments), default=0)
    out = bytearray(end if length is None else length)
    for offset, data in attachments:
        out[offset : offset + len(data)] = data
    return bytes(out)


def packed(attachments: list[bytes]) -> bytes:
    """A section holding `attachments` in order, each at the next multiple of 64."""
    offset, placed = 0, []
    for data in attachments:
        placed.append((offset, data))
        offset = align(offset + len(data))
    return section(placed)


def request(method: str, params, attachments: list[bytes], id: int = 1) -> tuple[bytes, bytes]:
    """(JSON text, section) of a call whose `params` name `attachments`, laid out as `packed` does."""
    text = json.dumps({"jsonrpc": "2.0", "method": method, "params": params, "id": id}).encode()
    return text, packed(attachments)


def ndarray_placeholder(array, offset: int = 0) -> dict:
    """The placeholder of `array` (NumPy's or alike: `nbytes`, `dtype.name`, `shape`) at `offset`."""
    return {
        "$ucall": "ndarray",
        "offset": offset,
        "length": array.nbytes,
        "dtype": array.dtype.name,
        "shape": list(array.shape),
    }


def message(json_text: bytes, section_bytes: bytes = b"") -> bytes:
    """A raw TCP message or WebSocket binary message: the 16-byte prefix, then the body."""
    payload = body(json_text, section_bytes)
    return PREFIX.pack(MAGIC, VERSION, 0, len(json_text), len(payload)) + payload


def split_body(payload: bytes, json_length: int) -> tuple[bytes, bytes]:
    """(JSON text, attachment section) of a body whose JSON part is `json_length` bytes."""
    if json_length > len(payload):
        raise WireError(-32700, "the JSON length exceeds the body")
    if len(payload) == json_length:
        return payload, b""
    start = align(json_length)
    if len(payload) < start:
        raise WireError(-32700, "the body ends inside the padding after the JSON text")
    return payload[:json_length], payload[start:]


def parse_prefix(data: bytes) -> tuple[int, int]:
    """(JSON length, body length) of the message starting `data` (at least 16 bytes)."""
    magic, version, flags, json_length, body_length = PREFIX.unpack_from(data)
    if magic != MAGIC:
        raise WireError(-32700, "not a binary message")
    if version != VERSION or flags != 0:
        raise WireError(-32700, "unsupported binary message version or flags")
    return json_length, body_length


def parse_message(data: bytes) -> tuple[bytes, bytes]:
    """(JSON text, section) of one whole raw TCP or WebSocket message."""
    json_length, body_length = parse_prefix(data)
    if len(data) - PREFIX_LEN != body_length:
        raise WireError(-32700, "the body length does not match the message")
    return split_body(data[PREFIX_LEN:], json_length)


@dataclass(frozen=True)
class Placeholder:
    kind: str  # "bytes" or "ndarray"
    offset: int
    length: int
    dtype: str | None = None
    shape: tuple[int, ...] | None = None


def _natural(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def is_placeholder(value) -> bool:
    """Whether a JSON value (parsed) is a placeholder object: an object with a "$ucall" member."""
    return isinstance(value, dict) and MARKER in value


def placeholder(value) -> Placeholder:
    """Read a placeholder object; WireError(-32602) when it breaks a rule."""
    kind = value.get(MARKER)
    if kind == "bytes":
        allowed = {MARKER, "offset", "length"}
    elif kind == "ndarray":
        allowed = {MARKER, "offset", "length", "dtype", "shape"}
    else:
        raise WireError(-32602, f"unknown placeholder kind {kind!r}")
    if set(value) != allowed:
        raise WireError(-32602, f"a {kind} placeholder has exactly the members {sorted(allowed)}")
    offset, length = value["offset"], value["length"]
    if not _natural(offset) or not _natural(length):
        raise WireError(-32602, "offset and length are non-negative integers")
    if offset % ALIGN:
        raise WireError(-32602, "offset is not a multiple of 64")
    if kind == "bytes":
        return Placeholder(kind, offset, length)
    dtype, shape = value["dtype"], value["shape"]
    if dtype not in DTYPES:
        raise WireError(-32602, f"unknown dtype {dtype!r}")
    if not isinstance(shape, list) or not all(_natural(d) for d in shape):
        raise WireError(-32602, "shape is an array of non-negative integers")
    count = 1
    for d in shape:
        count *= d
    if count * DTYPES[dtype] != length:
        raise WireError(-32602, "length is not the shape's element count times the dtype's size")
    return Placeholder(kind, offset, length, dtype, tuple(shape))


def resolve(value, section_bytes: bytes) -> bytes:
    """The bytes a placeholder names in `section_bytes`; WireError(-32602) when it cannot."""
    found = placeholder(value)
    if found.offset + found.length > len(section_bytes):
        raise WireError(-32602, "the attachment lies beyond the section")
    return section_bytes[found.offset : found.offset + found.length]


def hexdump(data: bytes) -> str:
    """`xxd`-style lines: offset, 16 bytes in hex, the printable ones."""
    lines = []
    for at in range(0, len(data), 16):
        row = data[at : at + 16]
        hexes = " ".join(row[i : i + 2].hex() for i in range(0, len(row), 2))
        text = "".join(chr(b) if 32 <= b < 127 else "." for b in row)
        lines.append(f"{at:08x}: {hexes:<39}  {text}")
    return "\n".join(lines)
