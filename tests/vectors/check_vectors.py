# SPDX-License-Identifier: Apache-2.0
"""Checks that every JSON-RPC test vector is well-formed (see README.md).

    python3 tests/vectors/check_vectors.py [DIR]

Exits 0 when every file in DIR (default: the `jsonrpc` folder next to this script)
follows the format, 1 otherwise, listing every problem found. Standard library only;
the Python suite imports `load_vectors` from here so that both read files the same way.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
import sys
from pathlib import Path

import vector_files
from vector_files import VectorError

VECTOR_DIR = Path(__file__).resolve().parent / "jsonrpc"

NAME_RE = re.compile(r"^(?:spec_(\d{2})|valid|invalid)_[a-z0-9]+(?:_[a-z0-9]+)*\.json$")
SPEC_SOURCE_PREFIX = "JSON-RPC 2.0 §7 "
REQUIRED_KEYS = {"description", "source", "reply"}
OPTIONAL_KEYS = {"request", "request_base64", "reply_text_contains", "error_message_contains", "error_exact"}


def _reject_duplicates(pairs):
    seen = {}
    for key, value in pairs:
        if key in seen:
            raise VectorError(f"duplicate member {key!r}")
        seen[key] = value
    return seen


def _reject_constant(name):
    raise ValueError(f"{name} is not JSON")


def strict_json_loads(text: str):
    """json.loads without the NaN/Infinity extensions and without duplicate members."""
    return json.loads(text, object_pairs_hook=_reject_duplicates, parse_constant=_reject_constant)


def _check_response(resp, where: str) -> list[str]:
    problems = []
    if not isinstance(resp, dict):
        return [f"{where}: a Response object must be a JSON object"]
    if resp.get("jsonrpc") != "2.0":
        problems.append(f'{where}: "jsonrpc" must be "2.0"')
    if "id" not in resp:
        problems.append(f'{where}: "id" is required in a Response object')
    elif isinstance(resp["id"], (bool, dict, list)):
        problems.append(f'{where}: "id" must be a string, a number or null')
    if ("result" in resp) == ("error" in resp):
        problems.append(f'{where}: exactly one of "result" and "error" is required')
    extra = set(resp) - {"jsonrpc", "id", "result", "error"}
    if extra:
        problems.append(f"{where}: unexpected members {sorted(extra)}")
    if "error" in resp:
        error = resp["error"]
        if not isinstance(error, dict):
            problems.append(f'{where}: "error" must be an object')
        else:
            code = error.get("code")
            if not isinstance(code, int) or isinstance(code, bool):
                problems.append(f'{where}: "error.code" must be an integer')
            if not isinstance(error.get("message"), str):
                problems.append(f'{where}: "error.message" must be a string')
            extra = set(error) - {"code", "message", "data"}
            if extra:
                problems.append(f"{where}: unexpected error members {sorted(extra)}")
    return problems


def error_objects(reply) -> list[dict]:
    """The "error" members of the Response object(s) in an expected reply."""
    responses = reply if isinstance(reply, list) else [reply] if isinstance(reply, dict) else []
    return [r["error"] for r in responses if isinstance(r, dict) and isinstance(r.get("error"), dict)]


def is_parse_error(reply) -> bool:
    """Whether the expected reply is the single -32700 error object."""
    return isinstance(reply, dict) and isinstance(reply.get("error"), dict) and reply["error"].get("code") == -32700


def check_vector(path: Path) -> tuple[dict, list[str]]:
    """Read one vector file. Returns (vector, problems); vector gains "request_bytes"."""
    name = path.name
    problems: list[str] = []
    if not NAME_RE.match(name):
        problems.append("file name must be spec_NN_name.json, valid_name.json or invalid_name.json (lower case)")
    try:
        raw = path.read_bytes()
        vector = strict_json_loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        return {}, problems + [f"not a valid UTF-8 JSON file: {exc}"]
    if not isinstance(vector, dict):
        return {}, problems + ["the file must hold one JSON object"]

    missing = REQUIRED_KEYS - set(vector)
    if missing:
        problems.append(f"missing members {sorted(missing)}")
    unknown = set(vector) - REQUIRED_KEYS - OPTIONAL_KEYS
    if unknown:
        problems.append(f"unknown members {sorted(unknown)}")

    description = vector.get("description")
    if not isinstance(description, str) or not description.strip() or "\n" in description:
        problems.append('"description" must be a non-empty one-line string')

    source = vector.get("source")
    if name.startswith("spec_"):
        if not isinstance(source, str) or not source.startswith(SPEC_SOURCE_PREFIX) or "'" not in source:
            problems.append(f'"source" of a spec_ vector must read "{SPEC_SOURCE_PREFIX}\'<example title>\'"')
    elif source != "project":
        problems.append('"source" must be "project" for valid_/invalid_ vectors')

    request_bytes = None
    if ("request" in vector) == ("request_base64" in vector):
        problems.append('exactly one of "request" and "request_base64" is required')
    elif "request" in vector:
        if not isinstance(vector["request"], str) or not vector["request"]:
            problems.append('"request" must be a non-empty string')
        else:
            request_bytes = vector["request"].encode("utf-8")
    else:
        encoded = vector["request_base64"]
        try:
            request_bytes = base64.b64decode(encoded, validate=True) if isinstance(encoded, str) else None
        except (binascii.Error, ValueError):
            request_bytes = None
        if not request_bytes:
            problems.append('"request_base64" must be non-empty standard base64')
        else:
            try:
                request_bytes.decode("utf-8")
                problems.append('"request_base64" is only for bytes that are not valid UTF-8; use "request"')
            except UnicodeDecodeError:
                pass

    reply = vector.get("reply")
    if "reply" in vector:
        if reply is None:
            pass
        elif isinstance(reply, list):
            if not reply:
                problems.append('"reply" must not be an empty array (use null for "no reply")')
            for i, resp in enumerate(reply):
                problems += _check_response(resp, f"reply[{i}]")
        else:
            problems += _check_response(reply, "reply")

    # The request must be valid JSON exactly when no parse error is expected.
    if request_bytes is not None and "reply" in vector:
        try:
            strict_json_loads(request_bytes.decode("utf-8"))
            parses = True
        except (UnicodeDecodeError, ValueError):
            parses = False
        if is_parse_error(reply) and parses:
            problems.append("a -32700 reply is expected but the request is valid JSON")
        if not is_parse_error(reply) and not parses:
            problems.append("the request is not valid JSON but the reply is not the -32700 error")
        if request_bytes.strip(b" \t\r\n") == b"":
            problems.append("the request must not be empty or only whitespace")

    contains = vector.get("reply_text_contains")
    if "reply_text_contains" in vector:
        if reply is None:
            problems.append('"reply_text_contains" makes no sense when no reply is expected')
        if not isinstance(contains, list) or not contains or not all(isinstance(s, str) and s for s in contains):
            problems.append('"reply_text_contains" must be a non-empty array of non-empty strings')

    errors = error_objects(reply)
    if "error_message_contains" in vector:
        substring = vector["error_message_contains"]
        if not isinstance(substring, str) or not substring:
            problems.append('"error_message_contains" must be a non-empty string')
        if not errors:
            problems.append('"error_message_contains" needs an error object in "reply"')
    if "error_exact" in vector:
        if not isinstance(vector["error_exact"], bool):
            problems.append('"error_exact" must be true or false')
        if not errors:
            problems.append('"error_exact" needs an error object in "reply"')

    vector["request_bytes"] = request_bytes
    vector["name"] = path.stem
    return vector, problems


def load_vectors(directory: Path = VECTOR_DIR) -> list[dict]:
    """Every vector in `directory`, sorted by file name. Raises VectorError if any is malformed."""
    return vector_files.load(directory, check_vector)


def check_directory(directory: Path) -> list[str]:
    """All problems found in `directory`, as printable lines."""
    report = vector_files.problems(directory, check_vector)
    spec_numbers = []
    for path in sorted(directory.glob("*.json")):
        match = NAME_RE.match(path.name)
        if match and match.group(1):
            spec_numbers.append(int(match.group(1)))
    if sorted(spec_numbers) != list(range(1, len(spec_numbers) + 1)):
        report.append(f"spec_NN numbers must be 01, 02, ... without gaps or repeats; found {sorted(spec_numbers)}")
    return report


def main(argv: list[str]) -> int:
    directory = Path(argv[1]) if len(argv) > 1 else VECTOR_DIR
    return vector_files.report(directory, check_directory(directory), "vector")


if __name__ == "__main__":
    sys.exit(main(sys.argv))
