# SPDX-License-Identifier: Apache-2.0
"""Hints written as strings (`from __future__ import annotations`) naming local types."""

from __future__ import annotations

import dataclasses

import pytest


def test_local_types_under_postponed_annotations(make_server, wire):
    @dataclasses.dataclass
    class Point:
        x: int
        y: int = 0

    server = make_server()

    @server
    def norm1(p: Point, scale: int = 1) -> int:
        assert isinstance(p, Point)
        return (abs(p.x) + abs(p.y)) * scale

    w = wire(server)
    assert w.result("norm1", {"p": {"x": 3, "y": -4}}) == 7
    assert "expected an integer" in w.error("norm1", {"p": {"x": "3"}})["message"]


def test_a_local_dataclass_naming_another_local_type(make_server, wire):
    @dataclasses.dataclass
    class Inner:
        v: int

    @dataclasses.dataclass
    class Outer:
        inner: Inner
        tags: list[str]

    server = make_server()

    @server
    def weigh(o: Outer) -> int:
        assert isinstance(o.inner, Inner)
        return o.inner.v + len(o.tags)

    assert wire(server).result("weigh", {"o": {"inner": {"v": 3}, "tags": ["a"]}}) == 4


def _types_local_to_a_function() -> type:
    @dataclasses.dataclass
    class Hidden:
        v: int

    @dataclasses.dataclass
    class Shown:
        hidden: Hidden

    return Shown


def test_an_unresolvable_local_type_is_named_at_registration(make_server):
    Shown = _types_local_to_a_function()  # Hidden, which it names, is visible from nowhere here
    server = make_server()

    def use(s: Shown) -> None:
        return None

    with pytest.raises(TypeError) as caught:
        server(use)
    message = str(caught.value)
    assert message.startswith("test_an_unresolvable_local_type_is_named_at_registration.<locals>.use: parameter 's':")
    assert "field 'hidden'" in message and "'Hidden'" in message and "importable at module level" in message

    def missing(x: Nowhere) -> None:  # noqa: F821
        return None

    with pytest.raises(TypeError, match=r"parameter 'x' of .*missing names 'Nowhere', which does not resolve"):
        server(missing)
