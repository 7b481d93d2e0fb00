# SPDX-License-Identifier: Apache-2.0
"""Batch procedures' Python side: the per-item signature callers see, and the call of
the function on a whole batch.

The core forms the batches and binds each call's params with the per-item signature
(``item_view``); ``Runner`` turns the bound rows into the function's columns (lists, or
numpy arrays stacked on axis 0), calls the function once, and gives back one value per
call (an array result is split on axis 0). With middleware, ``gate`` runs it for each call
of a batch before the function does.
"""

from __future__ import annotations

import asyncio
import collections
import collections.abc
import functools
import inspect
import typing
from typing import Any, Callable

from ucall import _codec, _signature
from ucall.exceptions import ErrorCode, RPCError

__all__ = ["Runner", "gate", "item_view"]

_LISTS = {list, collections.abc.Sequence, collections.abc.MutableSequence}

#: How a column is handed to the function.
LIST, ARRAY = "list", "array"


def _is_ndarray_hint(hint: Any) -> bool:
    origin = typing.get_origin(hint)
    return any(
        getattr(h, "__module__", None) == "numpy" and getattr(h, "__name__", None) == "ndarray" for h in (hint, origin)
    )


def _item_hint(hint: Any, what: str) -> tuple[Any, str]:
    """The hint of one item of a batch parameter (or result) hinted ``hint``, and how its
    column is built."""
    while typing.get_origin(hint) is typing.Annotated:
        hint = typing.get_args(hint)[0]
    if hint is inspect.Parameter.empty or hint is Any:
        return inspect.Parameter.empty, LIST
    if _is_ndarray_hint(hint):
        return hint, ARRAY
    origin = typing.get_origin(hint)
    if hint in _LISTS or origin in _LISTS:
        args = typing.get_args(hint)
        return (args[0] if args else inspect.Parameter.empty), LIST
    raise TypeError(f"{what} of a batch procedure must be a list (list[T]) or a numpy.ndarray, got {hint!r}")


def item_view(func: Callable[..., Any], localns: dict[str, Any] | None) -> tuple[Callable[..., Any], list[str]]:
    """A stand-in for ``func`` with the signature of one call (``list[T]`` parameters as
    ``T``, arrays as one row), for binding params and describing the procedure; and how
    each column is built. Raises ``TypeError`` for a signature that cannot be batched."""
    what = _signature._callable_name(func)
    annotated = _signature._annotated(func)
    try:
        hints = typing.get_type_hints(annotated, localns=localns, include_extras=True)
    except Exception as error:
        raise TypeError(_signature._unresolved(what, "parameter", annotated, error)) from error
    signature = inspect.signature(func)
    params = []
    columns = []
    for parameter in signature.parameters.values():
        if parameter.kind not in (parameter.POSITIONAL_ONLY, parameter.POSITIONAL_OR_KEYWORD):
            raise TypeError(f"{what}: batch procedures take plain parameters, not {parameter}")
        if parameter.default is not parameter.empty:
            raise TypeError(f"{what}: parameter {parameter.name!r} of a batch procedure cannot have a default")
        item, column = _item_hint(hints.get(parameter.name, parameter.empty), f"{what}: parameter {parameter.name!r}")
        params.append(parameter.replace(annotation=item))
        columns.append(column)
    result = hints.get("return", inspect.Signature.empty)
    if result is not inspect.Signature.empty:
        result, _ = _item_hint(result, f"{what}: the result")

    @functools.wraps(func, assigned=("__module__", "__name__", "__qualname__", "__doc__"), updated=())
    def view(*args: Any, **kwargs: Any) -> Any:
        raise TypeError("this describes one call of a batch procedure; call the function itself")

    view.__signature__ = signature.replace(parameters=params, return_annotation=result)  # type: ignore[attr-defined]
    annotations = {p.name: p.annotation for p in params if p.annotation is not p.empty}
    if result is not inspect.Signature.empty:
        annotations["return"] = result
    view.__annotations__ = annotations
    return view, columns


class Runner:
    """Calls a batch function on the rows the core bound: ``runner(rows)`` returns one
    value per row (an ``async def`` function: a coroutine returning them)."""

    __slots__ = ("columns", "func", "is_async", "names")

    def __init__(self, func: Callable[..., Any], columns: list[str], is_async: bool) -> None:
        self.func = func
        self.columns = columns
        self.is_async = is_async
        self.names = list(inspect.signature(func).parameters)

    def __call__(self, rows: list[tuple[Any, ...]]) -> Any:
        refused = self._odd_shapes(rows)
        if refused:
            rows = [row for index, row in enumerate(rows) if index not in refused]
        columns = self._columns(rows)
        if self.is_async:
            return self._awaited(columns, refused)
        return _merged(_split(self.func(*columns)), refused)

    async def _awaited(self, columns: list[Any], refused: dict[int, RPCError]) -> list[Any]:
        return _merged(_split(await self.func(*columns)), refused)

    def _odd_shapes(self, rows: list[tuple[Any, ...]]) -> dict[int, RPCError]:
        """The calls whose arrays cannot be stacked with the others', each with its -32602:
        the shape most calls share (the earliest, in a tie) is the batch's; one caller's
        wrong shape costs that caller only."""
        refused: dict[int, RPCError] = {}
        for index, kind in enumerate(self.columns):
            if kind != ARRAY:
                continue
            shapes = [getattr(row[index], "shape", None) for row in rows]
            counts = collections.Counter(shape for at, shape in enumerate(shapes) if at not in refused)
            if len(counts) <= 1:
                continue
            wanted = max(counts, key=lambda shape: (counts[shape], -shapes.index(shape)))
            name = self.names[index]
            for at, shape in enumerate(shapes):
                if shape != wanted and at not in refused:
                    refused[at] = RPCError(
                        ErrorCode["INVALID_PARAMS"],
                        f"Invalid params: parameter '{name}': an array of shape {shape}, where the "
                        f"other calls of this batch send {wanted}",
                    )
        return refused

    def _columns(self, rows: list[tuple[Any, ...]]) -> list[Any]:
        columns: list[Any] = []
        for index, kind in enumerate(self.columns):
            column = [row[index] for row in rows]
            if kind == ARRAY:
                import numpy as np

                columns.append(np.stack(column))
            else:
                columns.append(column)
        return columns


def _merged(values: list[Any], refused: dict[int, RPCError]) -> list[Any]:
    """The answers of every call: the function's values, with the refused calls' errors
    back in their places."""
    if not refused:
        return values
    merged: list[Any] = []
    remaining = iter(values)
    for index in range(len(values) + len(refused)):
        merged.append(refused[index] if index in refused else next(remaining, None))
    return merged


def _split(result: Any) -> list[Any]:
    """One value per call from a batch function's result: a list or tuple as it is, an
    array split on axis 0."""
    if isinstance(result, (list, tuple)):
        return list(result)
    if _codec.is_ndarray(result):
        if result.ndim == 0:
            raise TypeError("a batch procedure returned a 0-d array: return one row per call")
        return list(result)
    raise TypeError(
        f"a batch procedure returns a list or an array (one item per call), got {type(result).__qualname__}"
    )


def _admitted() -> None:
    """The end of the middleware chain around a batched call: the call goes on in its batch."""
    return None


async def _awaited(awaitable: Any) -> Any:
    return await awaitable


def gate(
    chain: Callable[..., Any], loop: asyncio.AbstractEventLoop | None
) -> Callable[[list[Any]], list[BaseException | None]]:
    """``admit(contexts)``: the middleware ``chain`` run for each call of a batch, before the
    batch function; for each call ``None`` (it goes on) or the exception that refused it.
    There ``call_next()`` admits the call and returns ``None``: the results come later, from
    the batch as a whole, so middleware checks or refuses batched calls but cannot see or
    replace their results. An async middleware runs on the server's ``loop`` while the
    batch's thread waits."""

    def admit(contexts: list[Any]) -> list[BaseException | None]:
        outcomes: list[BaseException | None] = []
        for ctx in contexts:
            try:
                result = chain(ctx, _admitted, (), None)
                if inspect.isawaitable(result):
                    if loop is None:
                        raise RuntimeError("an async middleware needs the server's event loop")
                    asyncio.run_coroutine_threadsafe(_awaited(result), loop).result()
                outcomes.append(None)
            except Exception as error:
                outcomes.append(error)
        return outcomes

    return admit
