# SPDX-License-Identifier: Apache-2.0
"""Hints written as strings (`from __future__ import annotations`) naming local types."""

from __future__ import annotations

import dataclasses


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
