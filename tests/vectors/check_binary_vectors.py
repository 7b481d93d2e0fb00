# SPDX-License-Identifier: Apache-2.0
"""Checks that every binary-message vector is well-formed and agrees with docs/wire.md.

    python3 tests/vectors/check_binary_vectors.py

Exits 0 when every file in `binary/` follows the format (tests/vectors/README.md, "Binary
vectors") and its expected reply is what binary_wire.py, a reading of docs/wire.md, makes
of its bytes for the `hex` procedure; 1 otherwise, listing every problem. Standard library
only; the suites import `load_binary_vectors` so that all read the files the same way.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import binary_wire as wire
import vector_files
from check_vectors import _check_response, error_objects, strict_json_loads

BINARY_DIR = Path(__file__).resolve().parent / "binary"

NAME_RE = re.compile(r"^(?:valid|invalid)_[a-z0-9]+(?:_[a-z0-9]+)*\.json$")
COMMON_KEYS = {"description", "source", "reply"}
# One of three shapes, told apart by which members are present.
BODY_KEYS = {"json", "attachments", "section_length", "error_message_contains"}
MESSAGE_KEYS = {"message_hex", "tcp_after", "websocket_reply"}
HTTP_KEYS = {"http_headers", "body_hex", "http_status"}


def _hex(value, what: str, problems: list[str]) -> bytes:
    try:
        return bytes.fromhex(value) if isinstance(value, str) else b""
    except ValueError:
        problems.append(f'"{what}" must be hex digits')
        return b""


def _body_vector(vector: dict, problems: list[str]) -> None:
    text = vector.get("json")
    if not isinstance(text, str) or not text:
        problems.append('"json" must be a non-empty string')
        return
    attachments = vector.get("attachments")
    if not isinstance(attachments, list):
        problems.append('"attachments" must be an array')
        return
    placed = []
    for i, item in enumerate(attachments):
        if not isinstance(item, dict) or set(item) != {"offset", "hex"}:
            problems.append(f"attachments[{i}] must be an object with offset and hex")
            continue
        offset = item["offset"]
        if not isinstance(offset, int) or offset < 0 or offset % wire.ALIGN:
            problems.append(f"attachments[{i}].offset must be a non-negative multiple of 64")
            continue
        placed.append((offset, _hex(item["hex"], f"attachments[{i}].hex", problems)))
    length = vector.get("section_length")
    if length is not None and (not isinstance(length, int) or length < 0):
        problems.append('"section_length" must be a non-negative integer')
        length = None
    section = wire.section(placed, length)
    json_text = text.encode("utf-8")
    vector["json_bytes"] = json_text
    vector["section"] = section
    vector["body"] = wire.body(json_text, section)
    vector["tcp_message"] = wire.message(json_text, section)


def _expected_by_reference(vector: dict) -> object:
    """What a `hex` call (or batch of them) in this body vector must be answered, read by binary_wire."""
    try:
        request = json.loads(vector["json_bytes"])
    except ValueError:
        return {"jsonrpc": "2.0", "error": {"code": -32700}, "id": None}

    def answer(call):
        if not isinstance(call, dict):
            return {"jsonrpc": "2.0", "error": {"code": -32600}, "id": None}
        if call.get("method") != "hex":
            return None
        params = call["params"]
        value = params[0] if isinstance(params, list) else params["data"]
        try:
            if wire.is_placeholder(value):
                result = wire.resolve(value, vector["section"]).hex()
            else:
                import base64

                result = base64.b64decode(value).hex()
        except wire.WireError as error:
            return {"jsonrpc": "2.0", "error": {"code": error.code}, "id": call.get("id")}
        return {"jsonrpc": "2.0", "result": result, "id": call.get("id")} if "id" in call else "silent"

    if isinstance(request, list):
        return [answer(call) for call in request]
    return answer(request)


def _codes(reply) -> object:
    """A reply with error objects reduced to their codes (the comparison rule of the README)."""
    if isinstance(reply, list):
        return [_codes(r) for r in reply]
    if isinstance(reply, dict) and isinstance(reply.get("error"), dict):
        return {**reply, "error": {"code": reply["error"].get("code")}}
    return reply


def check_binary_vector(path: Path) -> tuple[dict, list[str]]:
    """Read one binary vector. Returns (vector, problems); the vector gains the bytes to send."""
    problems: list[str] = []
    if not NAME_RE.match(path.name):
        problems.append("file name must be valid_name.json or invalid_name.json (lower case)")
    try:
        vector = strict_json_loads(path.read_text("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        return {}, problems + [f"not a valid UTF-8 JSON file: {exc}"]
    if not isinstance(vector, dict):
        return {}, problems + ["the file must hold one JSON object"]
    vector["name"] = path.stem
    keys = set(vector) - {"name"}
    missing = COMMON_KEYS - keys
    if missing:
        problems.append(f"missing members {sorted(missing)}")
    if vector.get("source") != "project":
        problems.append('"source" must be "project"')
    description = vector.get("description")
    if not isinstance(description, str) or not description.strip() or "\n" in description:
        problems.append('"description" must be a non-empty one-line string')
    reply = vector.get("reply")
    if isinstance(reply, list):
        for i, resp in enumerate(reply):
            problems += _check_response(resp, f"reply[{i}]")
    elif reply is not None:
        problems += _check_response(reply, "reply")

    shapes = [s for s in (BODY_KEYS, MESSAGE_KEYS, HTTP_KEYS) if keys & s]
    if len(shapes) != 1:
        return vector, problems + [
            "give the members of exactly one shape: json/attachments, message_hex or http_headers"
        ]
    shape = shapes[0]
    unknown = keys - COMMON_KEYS - shape
    if unknown:
        problems.append(f"unknown members {sorted(unknown)}")
    if shape is BODY_KEYS:
        vector["kind"] = "body"
        _body_vector(vector, problems)
        if "error_message_contains" in vector and not error_objects(reply):
            problems.append('"error_message_contains" needs an error object in "reply"')
        if "body" in vector and not problems:
            expected = _expected_by_reference(vector)
            if expected == "silent":
                expected = None
            if expected is not None and _codes(reply) != _codes(expected):
                problems.append(f"the reference reading answers {expected}, the vector says {reply}")
    elif shape is MESSAGE_KEYS:
        vector["kind"] = "message"
        vector["tcp_message"] = _hex(vector.get("message_hex"), "message_hex", problems)
        if vector.get("tcp_after") not in ("open", "closed"):
            problems.append('"tcp_after" must be "open" or "closed"')
        if len(vector["tcp_message"]) < wire.PREFIX_LEN:
            problems.append("a message has at least the 16-byte prefix")
    else:
        vector["kind"] = "http"
        headers = vector.get("http_headers")
        if not isinstance(headers, dict) or not all(isinstance(v, str) for v in headers.values()):
            problems.append('"http_headers" must map names to strings')
        vector["http_body"] = _hex(vector.get("body_hex"), "body_hex", problems)
        if vector.get("http_status") not in (200, 400):
            problems.append('"http_status" must be 200 or 400')
    return vector, problems


def load_binary_vectors(directory: Path = BINARY_DIR) -> list[dict]:
    """Every binary vector, sorted by file name. Raises VectorError if any is malformed."""
    return vector_files.load(directory, check_binary_vector)


def dtype_table_problems(wire_md: Path = Path(__file__).resolve().parents[2] / "docs" / "wire.md") -> list[str]:
    """Where docs/wire.md's dtype table (each row: two `name` | size cells) and the one
    table the package and binary_wire read (python/ucall/wire_dtypes.json) differ."""
    documented = {}
    for line in wire_md.read_text().splitlines():
        for name, size in re.findall(r"\|\s*`([a-z0-9]+)`[^|]*\|\s*(\d+)\s*", line):
            documented[name] = int(size)
    if documented == wire.DTYPES:
        return []
    return [f"docs/wire.md's dtypes {documented} differ from wire_dtypes.json's {wire.DTYPES}"]


def check_binary_directory(directory: Path = BINARY_DIR) -> list[str]:
    """All problems found in `directory` (and in the dtype table), as printable lines."""
    return vector_files.problems(directory, check_binary_vector) + dtype_table_problems()


def main() -> int:
    return vector_files.report(BINARY_DIR, check_binary_directory(), "binary vector")


if __name__ == "__main__":
    sys.exit(main())
