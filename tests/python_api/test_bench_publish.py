# SPDX-License-Identifier: Apache-2.0
"""`python -m ucallbench publish`: the README headline is read back from the brief's tables,
marks and all, and only the text between the markers changes. No server, no load."""

from __future__ import annotations

from pathlib import Path

import pytest
from ucallbench import publish  # benches/ucallbench (pythonpath in pyproject.toml)

BRIEF = """2026-11-23T19:37:41 · full run · 1.2 s per figure after 0.4 s warm-up · median of 3 run(s)

Host: AMD EPYC, 2 CPUs, Linux 6.1 · server on CPU 0, load generator on CPU 1 · commit abc1234

### sum(a, b) over HTTP

| server | sum-1conn (p50 µs) | sum-32conn (req/s) | sum-newconn (req/s) |
|---|---:|---:|---:|
| `c-reference` | 68.1 | 178,353 † | 22,412 † |
| `ucall-rust-uring` | 54.5 | 201,386 † | 23,078 † |
| `ucall054-posix` | 232.2 (348 errors) | 2,746 (9920 errors) | 22,526 † |

### echo

| server | echo-16B (req/s) | echo-1.6MB (p50 µs) |
|---|---:|---:|
| `ucall-rust-uring` | 211,700 † | 970.2 |
| `ucall054-posix` | 2,755 | failed: crashed (signal 11) |
"""


def test_the_brief_is_read_table_by_table() -> None:
    brief = publish.read_brief(BRIEF)
    assert brief.host.endswith("commit abc1234")
    assert brief.cells[("ucall-rust-uring", "echo-1.6MB")] == "970.2"
    assert brief.cells[("ucall054-posix", "sum-32conn")] == "2,746 (9920 errors)"
    assert brief.units["sum-1conn"] == "p50 µs" and brief.units["sum-32conn"] == "req/s"


def test_only_valid_figures_are_numbers() -> None:
    assert publish.number("178,353 †") == 178353
    assert publish.number("970.2") == 970.2
    assert publish.number("2,746 (9920 errors)") is None
    assert publish.number("failed: crashed (signal 11)") is None
    assert publish.number("n/a") is None


def test_the_headline_keeps_the_rows_it_has_with_their_marks() -> None:
    text = publish.headline(publish.read_brief(BRIEF), None)
    rows = [line for line in text.splitlines() if line.startswith("| ") and not line.startswith("| server")]
    assert [r.split(" | ")[0] for r in rows] == [
        "| C epoll server (the floor)",
        "| UCall, Rust API (io_uring)",
        "| ucall 0.5.4 (PyPI)",
    ]
    assert "| C epoll server (the floor) | 68.1 | 178,353 † | n/a |" in text
    assert "failed: crashed (signal 11)" in text
    assert "commit abc1234" in text.splitlines()[0] and "2026-11-23" in text.splitlines()[0]
    for note in ("† the load generator", "errors is not valid", "`failed`"):
        assert note in text


def test_only_the_text_between_the_markers_changes(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("before\n<!-- a -->\nold\n<!-- b -->\nafter\n")
    publish.replace_between(page, ("<!-- a -->", "<!-- b -->"), "new\n")
    assert page.read_text() == "before\n<!-- a -->\nnew\n<!-- b -->\nafter\n"
    page.write_text("no markers\n")
    with pytest.raises(ValueError, match="needs one"):
        publish.replace_between(page, ("<!-- a -->", "<!-- b -->"), "new\n")
