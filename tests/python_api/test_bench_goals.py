# SPDX-License-Identifier: Apache-2.0
"""The speed-goal table of benches/ucallbench: which ratios are paired, and which figure decides "met".

No server and no load: the functions are called on figures made up here.
"""

from __future__ import annotations

import pytest
from ucallbench import goals, measure, report  # benches/ucallbench (pythonpath in pyproject.toml)
from ucallbench.servers import SERVERS
from ucallbench.workloads import WORKLOADS


MET, SERVER_CPU = 6, 7  # columns of a goal row


def figure(rps: float) -> dict:
    return {"requests_per_s": rps, "errors": 0, "disturbed_runs": 0, "client_cpu_percent": 50.0}


def pick(servers: list[str], workloads: list[str]):
    return (
        [s for s in SERVERS if s.name in servers],
        [w for w in WORKLOADS if w.name in workloads],
    )


def goal_row(lines: list[str], goal: str) -> list[str]:
    rows = [line for line in lines if line.startswith(f"| {goal} |")]
    assert len(rows) == 1, lines
    return [cell.strip() for cell in rows[0].strip("|").split("|")]


def test_only_bounded_ratios_of_two_figures_are_paired() -> None:
    servers, workloads = pick(["ucall-c-poll", "ucall-rust-poll", "c-reference"], ["sum-32conn", "echo-16B"])
    ids = {goals.ratio_id(r) for r in measure.paired_ratios(servers, workloads, servers)}
    assert "ucall-c-poll/sum-32conn : ucall-rust-poll/sum-32conn" in ids
    assert "ucall-c-poll/echo-16B : ucall-rust-poll/echo-16B" in ids
    # Rust poll / the reference has no bound: shown, not paired.
    assert not any(i.startswith("ucall-rust-poll/sum-32conn : c-reference") for i in ids)
    # A server that cannot run here takes its ratios out.
    runnable = [s for s in servers if s.name != "ucall-c-poll"]
    assert measure.paired_ratios(servers, workloads, runnable) == []


def test_the_paired_ratio_decides_met() -> None:
    servers, workloads = pick(["ucall-c-poll", "ucall-rust-poll"], ["sum-32conn"])
    # The tables' medians miss the bound (0.80) ...
    summary = {"ucall-c-poll": {"sum-32conn": figure(80_000)}, "ucall-rust-poll": {"sum-32conn": figure(100_000)}}
    goal = "C API / Rust API, sum-32conn"
    row = goal_row(report.goals_section(summary, servers, workloads, {}, set()), goal)
    assert row[3] == "0.80" and row[4] == "—" and row[MET] == "**no**"
    # ... the paired rounds meet it, and they decide.
    key = "ucall-c-poll/sum-32conn : ucall-rust-poll/sum-32conn"
    paired = {key: {"ratio": 0.99, "low": 0.93, "high": 1.04, "rounds": [0.93, 0.99, 1.04], "disturbed": 0}}
    row = goal_row(report.goals_section(summary, servers, workloads, {}, set(), paired), goal)
    assert row[3] == "0.80" and row[4] == "0.99 (0.93–1.04)" and row[MET] == "yes"
    # And the other way round: paired rounds below the bound are a miss whatever the tables say.
    paired[key] = {"ratio": 0.91, "low": 0.88, "high": 0.97, "rounds": [0.88, 0.91, 0.97], "disturbed": 0}
    summary["ucall-c-poll"]["sum-32conn"] = figure(100_000)
    row = goal_row(report.goals_section(summary, servers, workloads, {}, set(), paired), goal)
    assert row[3] == "1.00" and row[MET] == "**no**"


def test_pairing_that_failed_gives_no_figure() -> None:
    servers, workloads = pick(["ucall-c-poll", "ucall-rust-poll"], ["sum-32conn"])
    summary = {"ucall-c-poll": {"sum-32conn": figure(100_000)}, "ucall-rust-poll": {"sum-32conn": figure(100_000)}}
    key = "ucall-c-poll/sum-32conn : ucall-rust-poll/sum-32conn"
    paired = {key: {"ratio": None, "rounds": [], "disturbed": 0, "errors": 3}}
    row = goal_row(report.goals_section(summary, servers, workloads, {}, set(), paired), "C API / Rust API, sum-32conn")
    assert row[4] == "no figure" and row[MET] == "no figure"


def test_server_cpu_per_request_divides_the_server_share_by_the_rate():
    # A core 97 % busy at 200,000 req/s spends 4.85 µs on each request.
    assert report.server_us_per_request({"server_cpu_percent": 97.0, "requests_per_s": 200_000}) == pytest.approx(4.85)
    # No CPU figure (the server's process was not readable), or no requests: no value.
    assert report.server_us_per_request({"server_cpu_percent": None, "requests_per_s": 200_000}) is None
    assert report.server_us_per_request({"server_cpu_percent": 97.0, "requests_per_s": 0}) is None


def test_a_goal_row_shows_what_each_server_spent_per_request() -> None:
    servers, workloads = pick(["ucall-c-poll", "ucall-rust-poll"], ["sum-32conn"])
    summary = {
        "ucall-c-poll": {"sum-32conn": dict(figure(200_000), server_cpu_percent=97.0)},
        "ucall-rust-poll": {"sum-32conn": dict(figure(190_000), server_cpu_percent=95.0)},
    }
    row = goal_row(report.goals_section(summary, servers, workloads, {}, set()), "C API / Rust API, sum-32conn")
    assert row[SERVER_CPU] == "4.85 / 5.00" and row[MET] == "yes"
    # Without the server's CPU figure (its process could not be read) there is nothing to show.
    del summary["ucall-rust-poll"]["sum-32conn"]["server_cpu_percent"]
    row = goal_row(report.goals_section(summary, servers, workloads, {}, set()), "C API / Rust API, sum-32conn")
    assert row[SERVER_CPU] == "—"
