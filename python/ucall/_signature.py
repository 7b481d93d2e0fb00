# SPDX-License-Identifier: Apache-2.0
"""From a function's signature and type hints to the plan the native binder follows.

Each parameter becomes ``(name, kind, check, converter, has_default, default)``: ``kind``
is ``inspect.Parameter.kind``; ``check`` is one of the codes below. ``int``, ``float``,
``bool``, ``str``, ``bytes``, ``bytearray`` and un-annotated parameters are checked natively on the raw JSON; any
other hint gets a converter built here once, called with the decoded JSON value, which
returns the Python value or raises ``ConversionError``.
"""

from __future__ import annotations

import collections.abc
import dataclasses
import enum
import functools
import inspect
import re
import sys
import types
import typing
from typing import Any, Callable, Union

from ucall import _attachments, _codec
from ucall._ucall import AttachmentMemory, Context

ANY, INT, FLOAT, BOOL, STR, CUSTOM, BYTES, BYTEARRAY, NDARRAY, VIEW = range(10)

Converter = Callable[[Any], Any]
ParamSpec = tuple[str, int, int, Union[Converter, None], bool, Any]


class ConversionError(ValueError):
    """A value does not fit a type hint; the text says where and why."""

    def __init__(self, message: str, path: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.path = path

    def within(self, step: str) -> ConversionError:
        return ConversionError(self.message, step + self.path)

    def __str__(self) -> str:
        return f"{self.path.lstrip('.')}: {self.message}" if self.path else self.message


def describe(value: Any) -> str:
    """What kind of JSON value ``value`` is, for messages."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, dict):
        return "an object"
    return f"a {type(value).__qualname__}"


def _fail(expected: str, value: Any) -> ConversionError:
    return ConversionError(f"expected {expected}, got {describe(value)}")


def plan(func: Callable[..., Any], localns: dict[str, Any] | None = None) -> list[ParamSpec]:
    """The binding plan of ``func``. Raises ``TypeError`` for hints it cannot honour.

    ``localns`` resolves string hints naming local names (a function decorated inside
    another one, under ``from __future__ import annotations``).
    """
    what = _callable_name(func)
    try:
        signature = inspect.signature(func)
    except (TypeError, ValueError) as error:  # a builtin without a text signature, say
        raise TypeError(f"cannot read the signature of {what}: {error}") from None
    annotated = _annotated(func)
    try:
        hints = typing.get_type_hints(annotated, localns=localns, include_extras=True)
    except Exception as error:  # an unresolved forward reference, usually
        raise TypeError(_unresolved(what, "parameter", annotated, error)) from error
    specs: list[ParamSpec] = []
    seen_context = False
    for parameter in signature.parameters.values():
        hint = hints.get(parameter.name, inspect.Parameter.empty)
        if _is_context(hint):
            _check_context_param(what, parameter, seen_context)
            seen_context = True
            continue  # the call's context, given by the server: no RPC parameter
        try:
            check, converter = compile_hint(hint, localns)
        except TypeError as error:
            raise TypeError(f"{what}: parameter {parameter.name!r}: {error}") from None
        has_default = parameter.default is not inspect.Parameter.empty
        specs.append(
            (
                parameter.name,
                int(parameter.kind),
                check,
                converter,
                has_default,
                parameter.default if has_default else None,
            )
        )
    return specs


def context_param(func: Callable[..., Any], localns: dict[str, Any] | None = None) -> tuple[str, int | None] | None:
    """``func``'s parameter annotated ``ucall.Context``, if any (``plan`` has checked it):
    its name, and its place among the positional arguments when it has one (else it is
    passed by keyword)."""
    try:
        hints = typing.get_type_hints(_annotated(func), localns=localns, include_extras=True)
        parameters = inspect.signature(func).parameters.values()
    except Exception:  # noqa: BLE001 - plan() reports what cannot be read
        return None
    positional = 0
    for parameter in parameters:
        if _is_context(hints.get(parameter.name, inspect.Parameter.empty)):
            at = positional if parameter.kind == parameter.POSITIONAL_OR_KEYWORD else None
            return parameter.name, at
        if parameter.kind in (parameter.POSITIONAL_ONLY, parameter.POSITIONAL_OR_KEYWORD):
            positional += 1
    return None


def _is_context(hint: Any) -> bool:
    return _strip_annotated(hint) is Context


def _check_context_param(what: str, parameter: inspect.Parameter, seen: bool) -> None:
    """The server passes the context in the parameter's place or by its name, once."""
    if parameter.kind not in (parameter.POSITIONAL_OR_KEYWORD, parameter.KEYWORD_ONLY):
        raise TypeError(f"{what}: the ucall.Context parameter {parameter.name!r} must be passable by keyword")
    if seen:
        raise TypeError(f"{what}: more than one parameter is annotated ucall.Context")


def _unresolved(owner: str, kind: str, annotated: Any, error: Exception) -> str:
    """Why the string hints of ``annotated`` do not resolve, naming the ``kind`` (parameter,
    field) whose hint names what is missing."""
    match = re.fullmatch(r"name '(\w+)' is not defined", str(error))
    if not isinstance(error, NameError) or match is None:
        return f"cannot read the type hints of {owner}: {error}"
    missing = match.group(1)
    annotations = getattr(annotated, "__annotations__", {})
    users = [k for k, a in annotations.items() if isinstance(a, str) and re.search(rf"\b{missing}\b", a)]
    where = f"{kind} {users[0]!r} of {owner}" if users else owner
    return (
        f"the type hint of {where} names {missing!r}, which does not resolve: a type named in a string hint "
        "(from __future__ import annotations) must be importable at module level, or local where the decorator runs"
    )


def _callable_name(func: Callable[..., Any]) -> str:
    """``func`` for messages: its qualified name, else its repr (a callable object, a partial)."""
    name = getattr(func, "__qualname__", None)
    return name if isinstance(name, str) else repr(func)


def _annotated(func: Callable[..., Any]) -> Any:
    """What holds ``func``'s annotations: the function inside a partial, the ``__call__``
    of a callable object (``typing.get_type_hints`` reads neither)."""
    while isinstance(func, functools.partial):
        func = func.func
    if inspect.isroutine(func) or isinstance(func, type):
        return func
    return type(func).__call__


def compile_hint(hint: Any, localns: dict[str, Any] | None = None) -> tuple[int, Converter | None]:
    """The native check for ``hint``, or ``CUSTOM`` with a converter."""
    hint = _strip_annotated(hint)
    if hint is inspect.Parameter.empty or hint is Any or hint is object:
        return ANY, None
    natives = {int: INT, float: FLOAT, bool: BOOL, str: STR, bytes: BYTES, bytearray: BYTEARRAY}
    native = natives.get(hint) if isinstance(hint, type) else None
    if native is not None:
        return native, None
    if _is_numpy_array_type(hint) or _is_numpy_array_type(typing.get_origin(hint)):
        # The extension parses a flat array of floats itself and hands over its bytes.
        return NDARRAY, _to_ndarray
    if hint is memoryview:
        # An attachment reaches these as its memory where it lies, not as a copy.
        return VIEW, _to_memoryview
    if _is_image_type(hint):
        return VIEW, _to_image
    return CUSTOM, converter(hint, localns)


def _strip_annotated(hint: Any) -> Any:
    while typing.get_origin(hint) is typing.Annotated:
        hint = typing.get_args(hint)[0]
    return hint


def _identity(value: Any) -> Any:
    return value


def _to_int(value: Any) -> int:
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    raise _fail("an integer", value)


def _to_float(value: Any) -> float:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    raise _fail("a number", value)


def _to_bool(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    raise _fail("a boolean", value)


def _to_str(value: Any) -> str:
    if isinstance(value, str):
        return value
    raise _fail("a string", value)


def _to_none(value: Any) -> None:
    if value is None:
        return None
    raise _fail("null", value)


def _to_bytes(value: Any) -> bytes:
    if isinstance(value, bytes):  # an attachment of a binary message (docs/wire.md)
        return value
    if not isinstance(value, str):
        raise _fail("a base64 string", value)
    try:
        return _codec.b64decode(value)
    except UnicodeEncodeError:
        raise ConversionError("expected a base64 string: it holds a lone surrogate") from None
    except ValueError as error:
        # "not base64: '-' at index 4 is not a base64 character ...", from the core's rule.
        raise ConversionError(f"expected a base64 string: {str(error).removeprefix('not base64: ')}") from None


def _to_memoryview(value: Any) -> memoryview:
    if isinstance(value, AttachmentMemory):  # an attachment, where it lies: read-only
        return _attachments.view(value)
    return memoryview(_to_bytes(value))


def _is_numpy_array_type(hint: Any) -> bool:
    return getattr(hint, "__module__", None) == "numpy" and getattr(hint, "__name__", None) == "ndarray"


def _is_image_type(hint: Any) -> bool:
    module = getattr(hint, "__module__", "") or ""
    return module.startswith("PIL.") and getattr(hint, "__name__", None) == "Image"


def _to_ndarray(value: Any) -> Any:
    # The extension makes the array itself of an attachment and of a viewable .npy file in
    # a base64 string; it hands over raw little-endian data with its dtype and shape (the
    # float64s of a JSON list), any other .npy file decoded, and other JSON as it is.
    if isinstance(value, tuple):
        import numpy as np

        data, dtype, shape = value
        return np.frombuffer(data, dtype=np.dtype(dtype).newbyteorder("<")).reshape(shape)
    if isinstance(value, list):
        import numpy as np

        # numpy makes an array of anything: strings a `<U1` array, nulls and objects an
        # object array, `[1, "a"]` silently `['1', 'a']`. Only numbers (and booleans) in
        # nested arrays of one shape are what the schema's `items` says.
        odd = _not_a_number(value)
        if odd is not None:
            raise ConversionError(f"expected nested arrays of numbers, got {odd}")
        try:
            array = np.asarray(value)
        except ValueError:
            raise ConversionError("expected nested arrays of numbers of one shape, got arrays of different lengths") from None
        except OverflowError:
            raise ConversionError("expected nested arrays of numbers, with integers of at most 64 bits") from None
        if array.dtype.kind not in "biuf":  # a ragged nesting, or an integer beyond 64 bits
            raise ConversionError("expected nested arrays of numbers, with integers of at most 64 bits")
        return array
    data = value if isinstance(value, bytearray) else _to_bytes(value)
    try:
        return _codec.unpack_ndarray(data)
    except ValueError as error:
        raise ConversionError(f"expected base64 of a .npy array: {error}") from None


def _not_a_number(value: list[Any], at: str = "") -> str | None:
    """What the first item of nested lists ``value`` that is neither a number, a boolean
    nor a list is, and where (``a string at [1][0]``); ``None`` when there is none."""
    for index, item in enumerate(value):
        where = f"{at}[{index}]"
        if isinstance(item, list):
            found = _not_a_number(item, where)
            if found is not None:
                return found
        elif not isinstance(item, (int, float)):
            return f"{describe(item)} at {where}"
    return None


def _to_image(value: Any) -> Any:
    data = _attachments.view(value) if isinstance(value, AttachmentMemory) else _to_bytes(value)
    try:
        return _codec.unpack_image(data)
    except Exception as error:
        from PIL import UnidentifiedImageError

        # Pillow names the in-memory file it was given (an object's address): say what it meant.
        why = "not an image format Pillow reads" if isinstance(error, UnidentifiedImageError) else str(error)
        raise ConversionError(f"expected base64 of an image file: {why}") from None


def _is_typeddict(hint: Any) -> bool:
    is_typeddict = getattr(typing, "is_typeddict", None)
    if is_typeddict is not None:
        return bool(is_typeddict(hint))
    return isinstance(hint, type) and issubclass(hint, dict) and hasattr(hint, "__total__")


_SEQUENCES = {list, collections.abc.Sequence, collections.abc.MutableSequence, collections.abc.Iterable}
_MAPPINGS = {dict, collections.abc.Mapping, collections.abc.MutableMapping}
_UNION_TYPES: tuple[Any, ...] = (Union, types.UnionType) if sys.version_info >= (3, 10) else (Union,)  # novermin


def converter(hint: Any, localns: dict[str, Any] | None = None) -> Converter:
    """A function turning a decoded JSON value into a value of type ``hint``; ``localns``
    resolves string hints inside dataclasses and TypedDicts, as in ``plan``."""
    hint = _strip_annotated(hint)
    if hint is inspect.Parameter.empty or hint is Any or hint is object:
        return _identity
    if hint is None or hint is type(None):
        return _to_none
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin in _UNION_TYPES:
        return _union([converter(a, localns) for a in args], args)
    if origin is typing.Literal:
        return _literal(args)
    simple = {int: _to_int, float: _to_float, bool: _to_bool, str: _to_str, bytes: _to_bytes, memoryview: _to_memoryview}
    if hint in simple:
        return simple[hint]
    if hint is bytearray:
        return lambda value: bytearray(_to_bytes(value))
    if _is_numpy_array_type(hint) or _is_numpy_array_type(origin):
        return _to_ndarray
    if _is_image_type(hint):
        return _to_image
    if hint in _SEQUENCES or origin in _SEQUENCES:
        return _sequence(list, converter(args[0], localns) if args else _identity)
    if hint in (set, frozenset) or origin in (set, frozenset, collections.abc.Set):
        kind = frozenset if frozenset in (hint, origin) else set
        return _sequence(kind, converter(args[0], localns) if args else _identity)
    if hint is tuple or origin is tuple:
        return _tuple(args, localns)
    if hint in _MAPPINGS or origin in _MAPPINGS:
        return _mapping(args, localns)
    if _is_typeddict(hint):
        return _typeddict(hint, localns)
    if dataclasses.is_dataclass(hint) and isinstance(hint, type):
        return _dataclass(hint, localns)
    if _is_pydantic_model(hint):
        return _pydantic_model(hint)
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return _enum(hint)
    if isinstance(hint, type):
        return _instance(hint)
    raise TypeError(f"unsupported type hint {hint!r}")


def _union(options: list[Converter], hints: tuple[Any, ...]) -> Converter:
    names = " or ".join(_name(h) for h in hints)

    def convert(value: Any) -> Any:
        errors = []
        for option in options:
            try:
                return option(value)
            except ConversionError as error:
                errors.append(error)
        deepest = max(errors, key=lambda e: len(e.path))
        if deepest.path:
            raise deepest
        raise _fail(names, value)

    return convert


def _name(hint: Any) -> str:
    if hint is type(None):
        return "null"
    return {int: "an integer", float: "a number", bool: "a boolean", str: "a string"}.get(
        hint, getattr(hint, "__name__", repr(hint))
    )


def _literal(allowed: tuple[Any, ...]) -> Converter:
    def convert(value: Any) -> Any:
        for option in allowed:
            if value == option and type(value) is type(option):
                return option
        raise ConversionError(f"expected one of {list(allowed)!r}, got {value!r}")

    return convert


def _sequence(kind: type, item: Converter) -> Converter:
    def convert(value: Any) -> Any:
        if not isinstance(value, list):
            raise _fail("an array", value)
        out = []
        for index, element in enumerate(value):
            try:
                out.append(item(element))
            except ConversionError as error:
                raise error.within(f"[{index}]") from None
        return out if kind is list else kind(out)

    return convert


def _tuple(args: tuple[Any, ...], localns: dict[str, Any] | None) -> Converter:
    if not args or (len(args) == 2 and args[1] is Ellipsis):
        items = _sequence(list, converter(args[0], localns) if args else _identity)
        return lambda value: tuple(items(value))
    if args == ((),):
        args = ()
    converters = [converter(a, localns) for a in args]

    def convert(value: Any) -> Any:
        if not isinstance(value, list):
            raise _fail("an array", value)
        if len(value) != len(converters):
            raise ConversionError(f"expected an array of {len(converters)} items, got {len(value)}")
        out = []
        for index, (item, element) in enumerate(zip(converters, value)):
            try:
                out.append(item(element))
            except ConversionError as error:
                raise error.within(f"[{index}]") from None
        return tuple(out)

    return convert


def _mapping(args: tuple[Any, ...], localns: dict[str, Any] | None) -> Converter:
    key_hint = _strip_annotated(args[0]) if args else str
    value_of = converter(args[1], localns) if len(args) > 1 else _identity
    if key_hint in (str, Any, object):
        key_of: Converter = _identity
    elif key_hint is int:

        def key_of(key: str) -> int:
            try:
                return int(key)
            except ValueError:
                raise ConversionError(f"expected integer keys, got {key!r}") from None

    else:
        raise TypeError(f"unsupported dict key type {key_hint!r}: JSON keys are strings")

    def convert(value: Any) -> Any:
        if not isinstance(value, dict):
            raise _fail("an object", value)
        out = {}
        for key, element in value.items():
            try:
                out[key_of(key)] = value_of(element)
            except ConversionError as error:
                raise error.within(f".{key}") from None
        return out

    return convert


def _fields(
    hints: dict[str, Any],
    required: set[str],
    build: Callable[[dict[str, Any]], Any],
    localns: dict[str, Any] | None,
) -> Converter:
    converters = {name: converter(hint, localns) for name, hint in hints.items()}

    def convert(value: Any) -> Any:
        if not isinstance(value, dict):
            raise _fail("an object", value)
        out = {}
        for key, element in value.items():
            item = converters.get(key)
            if item is None:
                raise ConversionError(f"unexpected field {key!r}")
            try:
                out[key] = item(element)
            except ConversionError as error:
                raise error.within(f".{key}") from None
        for name in required:
            if name not in out:
                raise ConversionError(f"missing field {name!r}")
        return build(out)

    return convert


def _class_hints(cls: type, localns: dict[str, Any] | None, include_extras: bool) -> dict[str, Any]:
    """``cls``'s field hints. Its own module and body first; then the names local where the
    decorator runs, for a class defined there that names another local one."""
    try:
        return typing.get_type_hints(cls, include_extras=include_extras)
    except NameError as error:
        failure = error
    if localns is not None:
        try:
            return typing.get_type_hints(cls, localns=localns, include_extras=include_extras)
        except NameError as error:
            failure = error
    raise TypeError(_unresolved(cls.__qualname__, "field", cls, failure))


def _dataclass(cls: type, localns: dict[str, Any] | None) -> Converter:
    hints = _class_hints(cls, localns, include_extras=True)
    fields = [f for f in dataclasses.fields(cls) if f.init]
    required = {f.name for f in fields if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING}
    return _fields({f.name: hints.get(f.name, Any) for f in fields}, required, lambda kw: cls(**kw), localns)


def _typeddict(cls: type, localns: dict[str, Any] | None) -> Converter:
    hints = _class_hints(cls, localns, include_extras=False)
    required = set(getattr(cls, "__required_keys__", hints if getattr(cls, "__total__", True) else ()))
    return _fields(hints, required, dict, localns)


def _is_pydantic_model(hint: Any) -> bool:
    """A pydantic model class (pydantic is imported by then: the hint names one of its classes)."""
    pydantic = sys.modules.get("pydantic")
    base = getattr(pydantic, "BaseModel", None)
    return base is not None and isinstance(hint, type) and issubclass(hint, base)


def _pydantic_model(cls: Any) -> Converter:
    """pydantic validates the value, as its users expect; its first error says where and why."""

    def convert(value: Any) -> Any:
        from pydantic import ValidationError

        try:
            return cls.model_validate(value)
        except ValidationError as error:
            first = error.errors()[0]
            path = "".join(f"[{step}]" if isinstance(step, int) else f".{step}" for step in first.get("loc", ()))
            raise ConversionError(str(first.get("msg", "invalid value")), path) from None

    return convert


def _enum(cls: type[enum.Enum]) -> Converter:
    def convert(value: Any) -> Any:
        try:
            return cls(value)
        except ValueError:
            raise ConversionError(f"expected one of {[m.value for m in cls]!r}, got {value!r}") from None

    return convert


# What a JSON value decodes to, before conversion.
_JSON_TYPES = (bool, int, float, str, list, dict, type(None))


def _instance(cls: type) -> Converter:
    try:
        possible = any(issubclass(kind, cls) for kind in _JSON_TYPES)
    except TypeError:  # a protocol with data members: only isinstance can tell
        possible = True
    if not possible:
        raise TypeError(
            f"no JSON value is a {cls.__qualname__}; a dataclass, TypedDict or Enum is built "
            "from JSON, other classes are only checked with isinstance"
        )

    def convert(value: Any) -> Any:
        if isinstance(value, cls):
            return value
        raise _fail(f"a {cls.__qualname__}", value)

    return convert
