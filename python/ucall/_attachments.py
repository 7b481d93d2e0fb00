# SPDX-License-Identifier: Apache-2.0
"""Binary messages (docs/wire.md) as the clients write and read them, without I/O.

A request's params are packed with ``pack``: bytes, bytearrays, memoryviews, numpy arrays
and PIL images become placeholders naming attachments, collected in ``Attachments``,
which lays them out (each at a multiple of 64 in the section) and hands out the body as a
list of buffers to write one after another (the arrays' own memory, not a copy). A reply
body is read back with ``decode``: its placeholders become numpy arrays viewing the body
where they lie, or ``bytes``.
"""

from __future__ import annotations

import ctypes
import json
import struct
from pathlib import Path
from typing import Any

from ucall import _codec
from ucall.exceptions import ProtocolError

#: Attachments start at multiples of this in the section, the section at one in the body.
ALIGN = 64
#: The first byte of a binary message on raw TCP and WebSocket.
MAGIC = 0xC1
#: magic, version, flags, the JSON text's length, the body's length (little-endian).
PREFIX = struct.Struct("<BBHIQ")
CONTENT_TYPE = "application/vnd.ucall.binary"
#: A streamed reply's HTTP body of messages framed as on raw TCP (docs/wire.md §3.1).
STREAM_CONTENT_TYPE = "application/vnd.ucall.binary-stream"
JSON_LENGTH_HEADER = "UCall-JSON-Length"
SUBPROTOCOL = "ucall.binary.v1"
MARKER = "$ucall"
#: What marks, in a published JSON Schema, a value an attachment may carry (docs/wire.md §5).
SCHEMA_MARK = "x-ucall-attachment"

#: The dtypes of docs/wire.md §2, by name (numpy's own ``dtype.name`` for each), and size:
#: one table, ``wire_dtypes.json``, which the test vectors' reading of the format loads too.
DTYPES: dict[str, int] = json.loads((Path(__file__).parent / "wire_dtypes.json").read_text())

_ZEROS = bytes(ALIGN)


def view(memory: Any) -> memoryview:
    """A read-only ``memoryview`` of an attachment's bytes where they lie (an
    ``_ucall.AttachmentMemory``: in the connection's input, or the copy a waiting call's
    params were kept in). The view holds ``memory``, and so does anything made from it (a
    numpy array's base is the view): the bytes stay alive and unchanged while any is
    referenced, after the handler has returned too."""
    length = len(memory)
    if length == 0:
        return memoryview(b"")
    block = (ctypes.c_ubyte * length).from_address(memory.address)
    # What keeps the bytes alive: the block holds it, the view the block.
    setattr(block, "memory", memory)  # noqa: B010 (ctypes arrays take attributes; their type does not say so)
    return memoryview(block).cast("B").toreadonly()


def align(n: int) -> int:
    """The first multiple of 64 at or after ``n``."""
    return -(-n // ALIGN) * ALIGN


_PLAIN = frozenset({int, float, str, bool, type(None)})


def is_binary(value: Any) -> bool:
    """Whether ``value`` (or a value nested in a list, tuple or dict) would be an attachment."""
    if type(value) in _PLAIN:
        return False
    if isinstance(value, (bytes, bytearray, memoryview)) or _codec.is_image(value):
        return True
    if _codec.is_ndarray(value):
        return _wire_dtype(value) is not None
    # (Called for every call's params: plain values are passed over without a call each.)
    if isinstance(value, dict):
        value = value.values()
    elif not isinstance(value, (list, tuple)):
        return False
    for item in value:
        if type(item) not in _PLAIN and is_binary(item):
            return True
    return False


def _wire_dtype(array: Any) -> str | None:
    """The wire name of ``array``'s element type, None for types the wire has no name for
    (strings, dates, records: those go as a base64 ``.npy``, as in plain JSON)."""
    dtype = array.dtype
    try:
        return _WIRE_NAMES[dtype]
    except KeyError:
        pass
    name = dtype.name  # (computed in Python by numpy: worth remembering)
    wire = name if name in DTYPES and dtype.kind in "biufc" else None
    if len(_WIRE_NAMES) < 64:
        _WIRE_NAMES[dtype] = wire
    return wire


#: The wire names of the dtypes met so far (a few; records may make more: bounded).
_WIRE_NAMES: dict[Any, str | None] = {}


def _marked(schema: Any) -> bool:
    if isinstance(schema, dict):
        return SCHEMA_MARK in schema or any(_marked(v) for v in schema.values())
    if isinstance(schema, list):
        return any(_marked(v) for v in schema)
    return False


def marked_params(document: Any) -> dict[str, frozenset[str | int]]:
    """For each method of an OpenRPC document, the params (by name and by position) whose
    schema marks a value that may travel as an attachment; nothing for a document that is
    not one."""
    marked: dict[str, frozenset[str | int]] = {}
    methods = document.get("methods") if isinstance(document, dict) else None
    for method in methods if isinstance(methods, list) else []:
        if not isinstance(method, dict) or not isinstance(method.get("name"), str):
            continue
        params = method.get("params")
        found: set[str | int] = set()
        for position, param in enumerate(params if isinstance(params, list) else []):
            if isinstance(param, dict) and _marked(param.get("schema")):
                found.update((position, param.get("name", position)))
        marked[method["name"]] = frozenset(found)
    return marked


class Attachments:
    """The attachments of one message, in the order ``pack`` met them."""

    def __init__(self) -> None:
        self.buffers: list[tuple[int, memoryview]] = []  # (section offset, bytes)
        self.size = 0  # the section's length so far

    def add(self, data: Any) -> tuple[int, int]:
        """Place ``data`` (a C-contiguous buffer) at the next aligned offset: (offset, length)."""
        view = memoryview(data).cast("B")
        offset = align(self.size)
        self.buffers.append((offset, view))
        self.size = offset + view.nbytes
        return offset, view.nbytes

    def placeholder(self, value: Any) -> dict[str, Any] | None:
        """The placeholder of a binary ``value``, its attachment added; None for any other."""
        if isinstance(value, (bytes, bytearray)):
            offset, length = self.add(value)
            return {MARKER: "bytes", "offset": offset, "length": length}
        if isinstance(value, memoryview):
            offset, length = self.add(value if value.c_contiguous else value.tobytes())
            return {MARKER: "bytes", "offset": offset, "length": length}
        if _codec.is_ndarray(value):
            dtype = _wire_dtype(value)
            if dtype is None:
                return None
            import numpy as np

            # C order and little-endian on the wire: anything else is copied into that form.
            wire = np.ascontiguousarray(value, dtype=value.dtype.newbyteorder("<"))
            offset, length = self.add(wire.reshape(-1).view(np.uint8) if wire.size else b"")
            return {
                MARKER: "ndarray",
                "offset": offset,
                "length": length,
                "dtype": dtype,
                "shape": list(value.shape),
            }
        if _codec.is_image(value):
            offset, length = self.add(_codec.image_bytes(value))
            return {MARKER: "bytes", "offset": offset, "length": length}
        return None

    def pack(self, value: Any) -> Any:
        """``value`` ready for JSON: binary values as placeholders, the rest as ``_codec.pack``."""
        placeholder = self.placeholder(value)
        if placeholder is not None:
            return placeholder
        if isinstance(value, dict):
            return {k: self.pack(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [self.pack(v) for v in value]
        return _codec.pack(value)

    def pack_params(self, params: Any, marked: frozenset[str | int] | None) -> Any:
        """``params`` packed, the ``marked`` ones (names or positions; None: all) with
        attachments, the others in their plain JSON form."""
        if marked is None:
            return self.pack(params)
        if isinstance(params, dict):
            return {k: self.pack(v) if k in marked else _codec.pack(v) for k, v in params.items()}
        if isinstance(params, (list, tuple)):
            return [self.pack(v) if i in marked else _codec.pack(v) for i, v in enumerate(params)]
        return _codec.pack(params)

    def body(self, json_text: bytes) -> list[Any]:
        """The body (docs/wire.md §1) as buffers to write in order: the JSON text, padding,
        then each attachment after the zeros that align it. Their total is ``body_length``."""
        parts: list[Any] = [json_text]
        if not self.buffers:
            return parts
        parts.append(_ZEROS[: align(len(json_text)) - len(json_text)])
        at = 0
        for offset, view in self.buffers:
            if offset > at:
                parts.append(_ZEROS[: offset - at])
            parts.append(view)
            at = offset + view.nbytes
        return parts

    def body_length(self, json_text: bytes) -> int:
        return align(len(json_text)) + self.size if self.buffers else len(json_text)

    def sources(self) -> list[Any]:
        """The attachments in order, for the native transport, which places each as ``add``
        did and writes it from its own memory when it is an immutable ``bytes`` or a
        C-contiguous numpy array; any other is copied once here (``tobytes()``)."""
        out: list[Any] = []
        for _, view in self.buffers:
            source: Any = view.obj
            if type(source) is bytes:
                whole = len(source) == view.nbytes
            else:
                whole = _codec.is_ndarray(source) and source.flags.c_contiguous and source.nbytes == view.nbytes
            out.append(source if whole else view.tobytes())
        return out


def prefix(json_length: int, body_length: int) -> bytes:
    """The 16 bytes before a body on raw TCP and WebSocket (docs/wire.md §3.2)."""
    return PREFIX.pack(MAGIC, 1, 0, json_length, body_length)


def parse_prefix(data: bytes | bytearray | memoryview) -> tuple[int, int]:
    """``(J, B)`` of a 16-byte prefix; ``ProtocolError`` for one this client cannot read."""
    magic, version, flags, json_length, body_length = PREFIX.unpack_from(data)
    if magic != MAGIC or version != 1 or flags != 0:
        raise ProtocolError(f"a binary message of an unknown version or flags ({version}, {flags})")
    if json_length > body_length or json_length < body_length < align(json_length):
        raise ProtocolError("a binary message whose JSON length does not fit its body")
    return json_length, body_length


def decode(body: Any, json_length: int) -> Any:
    """The JSON value of a binary reply body, the placeholders in its results (and in the
    params of a notification from the server: a stream's item) resolved
    (``ProtocolError`` for a broken body or placeholder). An ``ndarray`` is a numpy view of
    ``body`` (writable when ``body`` is a ``bytearray``, read-only over the native
    transport's ``BinaryBody``); a ``bytes`` attachment is ``bytes``."""
    if hasattr(body, "section_bytes"):  # the native transport's, its framing checked there
        text, section = body.text(), _native_section(body, json_length)
    else:
        view = memoryview(body)
        if json_length > len(view) or json_length < len(view) < align(json_length):
            raise ProtocolError("a binary reply whose JSON length does not fit its body")
        text = view[:json_length].tobytes()
        section = view[align(json_length) :] if len(view) > json_length else view[:0]
    try:
        data = json.loads(text)
    except ValueError as error:
        raise ProtocolError(f"a binary reply whose JSON text is not JSON: {error}") from None
    replies = data if isinstance(data, list) else [data]
    for reply in replies:
        if isinstance(reply, dict) and "result" in reply:
            reply["result"] = _resolve(reply["result"], section)
        elif isinstance(reply, dict) and "method" in reply and "params" in reply:
            reply["params"] = _resolve(reply["params"], section)
    return data


def _native_section(body: Any, json_length: int) -> Any:
    """The attachment section of a native ``BinaryBody``: a read-only numpy view of it
    where it lies; without numpy (no array can be made then) a copy of its bytes."""
    start = min(align(json_length), len(body))
    try:
        import numpy as np
    except ImportError:
        return memoryview(body.section_bytes(0, len(body) - start))
    return np.asarray(body)[start:]


def _resolve(value: Any, section: memoryview) -> Any:
    if isinstance(value, list):
        return [_resolve(v, section) for v in value]
    if not isinstance(value, dict):
        return value
    if MARKER not in value:
        return {k: _resolve(v, section) for k, v in value.items()}
    return _attachment(value, section)


def _natural(value: Any) -> bool:
    return type(value) is int and value >= 0


_MEMBERS = {"bytes": {MARKER, "offset", "length"}, "ndarray": {MARKER, "offset", "length", "dtype", "shape"}}


def _broken(why: str, placeholder: dict[str, Any]) -> ProtocolError:
    return ProtocolError(f"{why}: {json.dumps(placeholder)[:120]}")


def _attachment(placeholder: dict[str, Any], section: memoryview) -> Any:
    kind = placeholder[MARKER]
    if not isinstance(kind, str) or kind not in _MEMBERS or placeholder.keys() != _MEMBERS[kind]:
        raise _broken("a reply with an invalid placeholder", placeholder)
    offset, length = placeholder["offset"], placeholder["length"]
    if not (_natural(offset) and _natural(length) and offset % ALIGN == 0 and offset + length <= len(section)):
        raise _broken("a reply whose placeholder names bytes it does not carry", placeholder)
    data = section[offset : offset + length]
    if kind == "bytes":
        return data.tobytes()
    dtype, shape = placeholder["dtype"], placeholder["shape"]
    if not isinstance(dtype, str) or dtype not in DTYPES or not isinstance(shape, list):
        raise _broken("a reply with an invalid placeholder", placeholder)
    count = 1
    for n in shape:
        if not _natural(n):
            raise _broken("a reply with an invalid placeholder", placeholder)
        count *= n
    if count * DTYPES[dtype] != length:
        raise _broken("a reply whose array's shape and dtype do not make its length", placeholder)
    import numpy as np

    little = _LITTLE.get(dtype)
    if little is None:
        little = _LITTLE[dtype] = np.dtype(dtype).newbyteorder("<")
    return np.frombuffer(data, dtype=little, count=count).reshape(shape)


#: Each wire dtype as numpy's little-endian dtype, made once.
_LITTLE: dict[str, Any] = {}
