# SPDX-License-Identifier: Apache-2.0
"""The middleware benchmark's table and cost lines (benches/middleware.py), on figures made
up here. No server and no load: `make bench-quick` runs the benchmark itself."""

from __future__ import annotations

import middleware  # benches/middleware.py (pythonpath in pyproject.toml)


def row(server: str, rps: int, cpu: float | None, errors: int = 0) -> dict:
    return {"server": server, "calls_per_s": rps, "cpu_us_per_call": cpu, "errors": errors}


ROWS = [
    row("UCall (Python)", 40000, 20.0),
    row("UCall (Python), one middleware", 30000, 25.0),
    row("FastAPI", 3000, 300.0),
    row("FastAPI, one middleware", 2500, 360.0),
]


def test_each_server_gets_the_cost_of_its_middleware():
    assert middleware.extra_costs(ROWS) == [
        "one middleware on UCall (Python): +5.00 µs of server CPU per call (+25 %)",
        "one middleware on FastAPI: +60.00 µs of server CPU per call (+20 %)",
    ]
    # A row without a CPU figure gives no cost line rather than a made-up one.
    assert middleware.extra_costs([row("a", 1, None), row("a, one middleware", 1, 2.0)]) == []


def test_the_table_lists_every_row():
    text = middleware.table(ROWS, 5, 8, "ran")
    assert text.startswith("## One Python middleware")
    assert "| UCall (Python), one middleware | 30,000 | 25.00 | 0 |" in text
    assert "| FastAPI, one middleware | 2,500 | 360.00 | 0 |" in text
    assert "8 connections" in text and "5 s per row" in text
    assert "| x | 1 | — | 3 |" in middleware.table([row("x", 1, None, errors=3)], 1, 1, "skipped")
