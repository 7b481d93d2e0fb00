# SPDX-License-Identifier: Apache-2.0
"""From a function's signature and type hints to its description: JSON Schema (draft-07)
for each param and the result, summary and description from the docstring.

The schemas follow ``_signature.converter`` hint by hint, so that a value the schema
allows is one the server accepts. The core turns the descriptions into the OpenRPC and
OpenAPI documents and the ``/docs`` page.
"""

from __future__ import annotations

import collections.abc
import dataclasses
import enum
import inspect
import json
import typing
from typing import Any, Callable

from ucall import _codec, _signature

Schema = dict[str, Any]


class _Definitions:
    """Named schemas (dataclasses, TypedDicts, Enums, pydantic models), referred to by
    ``{"$ref": "#/definitions/NAME"}``: each class once, which also ends recursion."""

    def __init__(self) -> None:
        self.schemas: dict[str, Schema] = {}
        self.names: dict[Any, str] = {}

    def ref(self, cls: Any, build: Callable[[], Schema]) -> Schema:
        name = self.names.get(cls)
        if name is None:
            name = cls.__name__
            if name in self.schemas:  # another class of the same name
                name = f"{cls.__module__}.{cls.__qualname__}".replace("<", "_").replace(">", "_")
            self.names[cls] = name
            self.schemas[name] = {}  # taken, while its fields may refer to it
            self.schemas[name] = build()
        return {"$ref": f"#/definitions/{name}"}


def describe(
    name: str,
    func: Callable[..., Any],
    localns: dict[str, Any] | None = None,
    *,
    summary: str | None = None,
    description: str | None = None,
    examples: Any = None,
    errors: Any = None,
) -> dict[str, Any]:
    """The description of ``func`` registered as ``name``: the JSON form the core reads."""
    signature = inspect.signature(func)
    hints = typing.get_type_hints(_signature._annotated(func), localns=localns, include_extras=True)
    definitions = _Definitions()
    params = []
    kinds = set()
    for parameter in signature.parameters.values():
        if _signature._is_context(hints.get(parameter.name)):
            continue  # given by the server, not by the caller
        kinds.add(parameter.kind)
        if parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
            continue
        param: dict[str, Any] = {
            "name": parameter.name,
            "schema": schema(hints.get(parameter.name, inspect.Parameter.empty), localns, definitions),
            "required": parameter.default is inspect.Parameter.empty,
        }
        if parameter.default is not inspect.Parameter.empty:
            default = _json_value(parameter.default)
            if default is not _NO_JSON:
                param["default"] = default
        note = _annotated_note(hints.get(parameter.name))
        if note:
            param["description"] = note
        params.append(param)
    doc: dict[str, Any] = {"name": name, "params": params, "paramStructure": _structure(kinds)}
    if "return" in hints:
        doc["result"] = {"name": "result", "schema": schema(hints["return"], localns, definitions)}
    first, rest = _docstring(func)
    if summary or first:
        doc["summary"] = summary or first
    if description or rest:
        doc["description"] = description or rest
    if examples:
        doc["examples"] = [_example(e) for e in examples]
    if errors:
        doc["errors"] = [_error(e) for e in errors]
    if definitions.schemas:
        doc["definitions"] = definitions.schemas
    try:
        json.dumps(doc, allow_nan=False)
    except (TypeError, ValueError) as error:
        raise TypeError(f"the description of {name!r} has no JSON form (an example or error data?): {error}") from None
    return doc


def _structure(kinds: set[Any]) -> str:
    P = inspect.Parameter
    by_position = P.POSITIONAL_ONLY in kinds or P.VAR_POSITIONAL in kinds
    by_name = P.KEYWORD_ONLY in kinds or P.VAR_KEYWORD in kinds
    if by_position and not by_name:
        return "by-position"
    if by_name and not by_position:
        return "by-name"
    return "either"


def _docstring(func: Callable[..., Any]) -> tuple[str | None, str | None]:
    """The docstring's first paragraph as one line, and the rest."""
    text = inspect.getdoc(func)
    if not text or (inspect.isclass(func) and text == inspect.getdoc(type(func))):
        return None, None
    head, _, tail = text.strip().partition("\n\n")
    return " ".join(head.split()), tail.strip() or None


def _annotated_note(hint: Any) -> str | None:
    """A string in ``Annotated[T, "..."]``: the param's description."""
    if typing.get_origin(hint) is typing.Annotated:
        notes = [m for m in typing.get_args(hint)[1:] if isinstance(m, str)]
        return " ".join(notes) or None
    return None


_NO_JSON = object()


def _json_value(value: Any) -> Any:
    """``value`` as it travels in JSON, or ``_NO_JSON`` when it has no JSON form."""
    try:
        packed = _codec.pack(value)
        json.dumps(packed, allow_nan=False)
        return packed
    except (TypeError, ValueError):
        return _NO_JSON


def _example(example: Any) -> dict[str, Any]:
    if not isinstance(example, dict) or "params" not in example:
        raise TypeError(f'an example is a dict with "params" (and "result", "name", "summary"), got {example!r}')
    unknown = set(example) - {"params", "result", "name", "summary"}
    if unknown:
        raise TypeError(f"an example has no member {sorted(unknown)[0]!r}")
    out = {k: _codec.pack(v) for k, v in example.items() if k in ("params", "result")}
    out.update({k: str(v) for k, v in example.items() if k in ("name", "summary")})
    return out


def _error(error: Any) -> dict[str, Any]:
    code = getattr(error, "code", None)
    if isinstance(code, int):
        out: dict[str, Any] = {"code": code, "message": getattr(error, "message", "") or str(error)}
        data = getattr(error, "data", None)
        if data is not None:
            out["data"] = _codec.pack(data)
        return out
    if isinstance(error, tuple) and len(error) == 2:
        return {"code": int(error[0]), "message": str(error[1])}
    if isinstance(error, dict) and "code" in error:
        out = {"code": int(error["code"]), "message": str(error.get("message", ""))}
        if "data" in error:
            out["data"] = _codec.pack(error["data"])
        return out
    raise TypeError(f"an error is an RPCError, a (code, message) pair or a dict with a code, got {error!r}")


# The core's one base64 rule as a pattern (`contentEncoding` alone is a note validators do
# not check): groups of four, then a final group of two or three characters whose last one
# leaves zero bits over (A, Q, g, w after one; every fourth letter after two), padded or
# not. tests/python_api/test_base64_rule.py checks pattern and decoder agree.
_BASE64 = {
    "type": "string",
    "contentEncoding": "base64",
    "pattern": "^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/][AQgw](?:==)?|[A-Za-z0-9+/]{2}[AEIMQUYcgkosw048]=?)?$",
}


# Marks a value a binary message may carry as an attachment (docs/wire.md) instead: `bytes`
# or `ndarray`, the placeholder kind. An annotation: validators ignore it.
ATTACHMENT = "x-ucall-attachment"


def schema(hint: Any, localns: dict[str, Any] | None = None, definitions: _Definitions | None = None) -> Schema:
    """The JSON Schema of the values ``_signature.converter(hint)`` accepts."""
    defs = definitions if definitions is not None else _Definitions()
    hint = _signature._strip_annotated(hint)
    if hint is inspect.Parameter.empty or hint is Any or hint is object:
        return {}
    if hint is None or hint is type(None):
        return {"type": "null"}
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin in _signature._UNION_TYPES:
        return {"anyOf": [schema(a, localns, defs) for a in args]}
    if origin is typing.Literal:
        return {"enum": [a.value if isinstance(a, enum.Enum) else a for a in args]}
    simple: dict[Any, Schema] = {
        int: {"type": "integer"},
        float: {"type": "number"},
        bool: {"type": "boolean"},
        str: {"type": "string"},
        bytes: {**_BASE64, ATTACHMENT: "bytes"},
        bytearray: {**_BASE64, ATTACHMENT: "bytes"},
        memoryview: {**_BASE64, ATTACHMENT: "bytes"},
    }
    if isinstance(hint, type) and hint in simple:
        return simple[hint]
    if _signature._is_numpy_array_type(hint) or _signature._is_numpy_array_type(origin):
        return {
            "anyOf": [
                {
                    "type": "array",
                    "description": "nested arrays of numbers, of one shape",
                    "items": {"type": ["number", "boolean", "array"]},
                },
                {**_BASE64, "contentMediaType": "application/x-npy", "description": "base64 of a .npy file"},
            ],
            ATTACHMENT: "ndarray",
        }
    if _signature._is_image_type(hint):
        return {
            **_BASE64,
            "contentMediaType": "image/png",
            "description": "base64 of an image file Pillow reads",
            ATTACHMENT: "bytes",
        }
    if hint in _signature._SEQUENCES or origin in _signature._SEQUENCES:
        return _array(args[0] if args else None, localns, defs)
    if hint in (set, frozenset) or origin in (set, frozenset, collections.abc.Set):
        return _array(args[0] if args else None, localns, defs)
    if hint is tuple or origin is tuple:
        if not args or (len(args) == 2 and args[1] is Ellipsis):
            return _array(args[0] if args else None, localns, defs)
        items = [] if args == ((),) else [schema(a, localns, defs) for a in args]
        return {
            "type": "array",
            "items": items,
            "minItems": len(items),
            "maxItems": len(items),
            "additionalItems": False,
        }
    if hint in _signature._MAPPINGS or origin in _signature._MAPPINGS:
        out: Schema = {"type": "object"}
        if len(args) > 1:
            out["additionalProperties"] = schema(args[1], localns, defs)
        if args and _signature._strip_annotated(args[0]) is int:
            out["propertyNames"] = {"pattern": "^-?[0-9]+$"}
        return out
    if _signature._is_typeddict(hint):
        return defs.ref(hint, lambda: _typeddict(hint, localns, defs))
    if dataclasses.is_dataclass(hint) and isinstance(hint, type):
        return defs.ref(hint, lambda: _dataclass(hint, localns, defs))
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return defs.ref(hint, lambda: _enum(hint))
    if _signature._is_pydantic_model(hint):
        return defs.ref(hint, lambda: _pydantic(hint, defs))
    if isinstance(hint, type):
        # Checked with isinstance on the decoded JSON value: only the JSON types it covers.
        kinds = [name for kind, name in _JSON_KINDS if _is_subclass(kind, hint)]
        return {"type": kinds if len(kinds) > 1 else kinds[0]} if kinds else {}
    raise TypeError(f"unsupported type hint {hint!r}")


_JSON_KINDS = (
    (bool, "boolean"),
    (int, "integer"),
    (float, "number"),
    (str, "string"),
    (list, "array"),
    (dict, "object"),
    (type(None), "null"),
)


def _is_subclass(kind: type, cls: type) -> bool:
    try:
        return issubclass(kind, cls)
    except TypeError:
        return True


def _array(item: Any, localns: dict[str, Any] | None, defs: _Definitions) -> Schema:
    out: Schema = {"type": "array"}
    if item is not None:
        out["items"] = schema(item, localns, defs)
    return out


def _object(cls: Any, properties: dict[str, Schema], required: list[str]) -> Schema:
    out: Schema = {"type": "object", "title": cls.__name__, "properties": properties}
    if required:
        out["required"] = required
    out["additionalProperties"] = False
    doc = _own_doc(cls)
    if doc and not doc.startswith(cls.__name__ + "("):  # not the dataclass's generated signature
        out["description"] = doc
    return out


def _own_doc(cls: Any) -> str | None:
    """The class's own docstring (not one it inherits, as ``dict``'s for a TypedDict)."""
    doc = cls.__dict__.get("__doc__")
    return inspect.cleandoc(doc) if isinstance(doc, str) and doc.strip() else None


def _dataclass(cls: Any, localns: dict[str, Any] | None, defs: _Definitions) -> Schema:
    hints = _signature._class_hints(cls, localns, include_extras=True)
    properties = {}
    required = []
    for field in dataclasses.fields(cls):
        if not field.init:
            continue
        properties[field.name] = schema(hints.get(field.name, Any), localns, defs)
        if field.default is not dataclasses.MISSING:
            default = _json_value(field.default)
            if default is not _NO_JSON:
                properties[field.name] = {**properties[field.name], "default": default}
        elif field.default_factory is dataclasses.MISSING:
            required.append(field.name)
    return _object(cls, properties, required)


def _typeddict(cls: Any, localns: dict[str, Any] | None, defs: _Definitions) -> Schema:
    hints = _signature._class_hints(cls, localns, include_extras=False)
    keys = getattr(cls, "__required_keys__", hints if getattr(cls, "__total__", True) else ())
    properties = {name: schema(hint, localns, defs) for name, hint in hints.items()}
    return _object(cls, properties, [name for name in hints if name in keys])


def _enum(cls: type[enum.Enum]) -> Schema:
    out: Schema = {"title": cls.__name__, "enum": [member.value for member in cls]}
    doc = _own_doc(cls)
    if doc and not doc.startswith("An enumeration"):
        out["description"] = doc
    return out


def _pydantic(cls: Any, defs: _Definitions) -> Schema:
    """pydantic's own schema of the model (its nested models become definitions too)."""
    generated: Schema = cls.model_json_schema(ref_template="#/definitions/{model}")
    for name, nested in generated.pop("$defs", {}).items():
        defs.schemas.setdefault(name, nested)
    return generated


__all__ = ["describe", "schema"]
