# SPDX-License-Identifier: Apache-2.0
"""The comparison rule of tests/vectors/README.md, as assertions."""

from __future__ import annotations

from check_vectors import strict_json_loads


def _kind(value) -> str:
    # bool before int: in Python True == 1, in JSON they differ.
    for python_type, name in ((bool, "bool"), (int, "int"), (float, "float"), (str, "string"),
                              (list, "array"), (dict, "object"), (type(None), "null")):
        if isinstance(value, python_type):
            return name
    raise TypeError(f"not a JSON value: {value!r}")


def differences(expected, actual, path: str = "$") -> list[str]:
    """Where `actual` differs from `expected`; integers and floats are different kinds."""
    ek, ak = _kind(expected), _kind(actual)
    if ek != ak:
        return [f"{path}: expected {ek} {expected!r}, got {ak} {actual!r}"]
    if ek == "array":
        if len(expected) != len(actual):
            return [f"{path}: expected {len(expected)} elements, got {len(actual)}: {actual!r}"]
        out = []
        for i, (e, a) in enumerate(zip(expected, actual)):
            out += differences(e, a, f"{path}[{i}]")
        return out
    if ek == "object":
        missing, extra = set(expected) - set(actual), set(actual) - set(expected)
        out = []
        if missing:
            out.append(f"{path}: missing members {sorted(missing)}")
        if extra:
            out.append(f"{path}: unexpected members {sorted(extra)} in {actual!r}")
        for key in sorted(set(expected) & set(actual)):
            out += differences(expected[key], actual[key], f"{path}.{key}")
        return out
    if expected != actual:
        return [f"{path}: expected {expected!r}, got {actual!r}"]
    return []


def _response_differences(expected, actual, vector: dict, path: str) -> list[str]:
    if not (isinstance(expected, dict) and "error" in expected):
        return differences(expected, actual, path)
    if not isinstance(actual, dict):
        return [f"{path}: expected an error Response object, got {actual!r}"]
    out = []
    if set(actual) != {"jsonrpc", "error", "id"}:
        out.append(f"{path}: members must be jsonrpc, error, id; got {sorted(actual)}: {actual!r}")
    for key in ("jsonrpc", "id"):
        if key in actual:
            out += differences(expected[key], actual[key], f"{path}.{key}")
    error = actual.get("error")
    if not isinstance(error, dict):
        return out + [f"{path}.error: expected an object, got {error!r}"]
    if vector.get("error_exact"):
        return out + differences(expected["error"], error, f"{path}.error")
    out += differences(expected["error"]["code"], error.get("code"), f"{path}.error.code")
    message = error.get("message")
    if not isinstance(message, str):
        out.append(f"{path}.error.message: expected a string, got {message!r}")
    elif "error_message_contains" in vector and vector["error_message_contains"] not in message:
        out.append(f"{path}.error.message: {message!r} does not contain {vector['error_message_contains']!r}")
    unknown = set(error) - {"code", "message", "data"}
    if unknown:
        out.append(f"{path}.error: unexpected members {sorted(unknown)}")
    return out


def reply_differences(vector: dict, reply_text: str) -> list[str]:
    """Differences between a reply text and the vector's expected reply."""
    try:
        actual = strict_json_loads(reply_text)
    except ValueError as exc:
        return [f"the reply is not strict JSON ({exc}): {reply_text[:500]!r}"]
    expected = vector["reply"]
    if isinstance(expected, list):
        if not isinstance(actual, list):
            out = [f"$: expected a batch reply (array of {len(expected)}), got {actual!r}"]
        elif len(actual) != len(expected):
            out = [f"$: expected {len(expected)} responses, got {len(actual)}: {actual!r}"]
        else:
            out = []
            for i, (e, a) in enumerate(zip(expected, actual)):
                out += _response_differences(e, a, vector, f"$[{i}]")
    else:
        out = _response_differences(expected, actual, vector, "$")
    for substring in vector.get("reply_text_contains", []):
        if substring not in reply_text:
            out.append(f"the reply text does not contain {substring!r}: {reply_text[:500]!r}")
    return out


def assert_reply_matches(vector: dict, reply: bytes | str) -> None:
    text = reply.decode("utf-8") if isinstance(reply, (bytes, bytearray)) else reply
    problems = reply_differences(vector, text)
    assert not problems, "\n".join([f"reply to {vector['name']} differs:"] + problems + [f"reply text: {text[:1000]}"])


def assert_error(reply, code: int, id=None, message_contains: str | None = None) -> None:
    """`reply` is a single error Response object with this code and id."""
    vector = {"name": "inline", "reply": {"jsonrpc": "2.0", "error": {"code": code, "message": ""}, "id": id}}
    if message_contains is not None:
        vector["error_message_contains"] = message_contains
    problems = _response_differences(vector["reply"], reply, vector, "$")
    assert not problems, "\n".join(problems)


def assert_result(reply, result, id) -> None:
    """`reply` is a single success Response object with this result and id."""
    problems = differences({"jsonrpc": "2.0", "result": result, "id": id}, reply)
    assert not problems, "\n".join(problems)
