# SPDX-License-Identifier: Apache-2.0
"""Publishing a run: its full tables into docs/benchmarks.md, a headline of a few rows and a
chart into README.md. Only the text between each file's markers changes.

    python -m ucallbench publish [benches/results/latest-brief.md]

`make bench` runs it after the run, the memory table (rss.py) and the hostile-client table
(hostile.py) were added to the brief. The headline is read back from the brief's tables, so
that it shows exactly the figures (and the marks) the full tables show.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from ucallbench.config import PEERS_PY, RESULTS, ROOT

README = ROOT / "README.md"
BENCHMARKS = ROOT / "docs" / "benchmarks.md"
CHART = ROOT / "docs" / "img" / "benchmarks.png"
FULL = ("<!-- bench:start -->", "<!-- bench:end -->")
HEADLINE = ("<!-- headline:start -->", "<!-- headline:end -->")

# The rows of the headline: UCall beside the C floor and what a user would pick instead.
HEADLINE_SERVERS = (
    ("c-reference", "C epoll server (the floor)"),
    ("ucall-rust-uring", "UCall, Rust API (io_uring)"),
    ("ucall-python", "UCall, Python API"),
    ("jsonrpsee", "jsonrpsee (Rust)"),
    ("socketify", "socketify (Python)"),
    ("fastapi-rest", "FastAPI (Python)"),
    ("grpcio-sync", "grpcio (Python)"),
    ("ucall054-posix", "ucall 0.5.4 (PyPI)"),
)
HEADLINE_WORKLOADS = (
    ("sum-1conn", "sum, 1 connection"),
    ("sum-32conn", "sum, 32 connections"),
    ("echo-1.6MB", "echo 1.6 MB"),
)


@dataclass
class Brief:
    """What the headline needs from a brief: its stamp lines and every table cell."""

    when: str  # the first line: date, kind of run, duration, repetitions
    host: str  # the host line: CPU, cores, kernel, pinning, commit
    cells: dict[tuple[str, str], str]  # (server, workload) -> the cell as shown
    units: dict[str, str]  # workload -> "p50 µs", "req/s", ...


def read_brief(text: str) -> Brief:
    lines = text.splitlines()
    when = next((line for line in lines if line.strip() and not line.startswith("<!--")), "")
    host = next((line for line in lines if line.startswith("Host:")), "")
    cells: dict[tuple[str, str], str] = {}
    units: dict[str, str] = {}
    columns: list[tuple[str, str]] | None = None
    for line in lines:
        if line.startswith("| server |"):
            columns = []
            for head in line.strip().strip("|").split("|")[1:]:
                m = re.fullmatch(r"\s*(\S+) \((.+)\)\s*", head)
                columns.append((m.group(1), m.group(2)) if m else (head.strip(), ""))
            for name, unit in columns:
                units.setdefault(name, unit)
        elif columns is not None and line.startswith("| `"):
            parts = [p.strip() for p in line.strip().strip("|").split("|")]
            server = parts[0].strip("`")
            for (workload, _), value in zip(columns, parts[1:]):
                cells.setdefault((server, workload), value)
        elif not line.startswith("|"):
            columns = None
    return Brief(when, host, cells, units)


def number(cell: str) -> float | None:
    """The figure of a cell when it is a valid one: none for errors, failures, n/a."""
    if "error" in cell:
        return None
    m = re.match(r"([\d,]+(?:\.\d+)?)", cell)
    return float(m.group(1).replace(",", "")) if m else None


def headline(brief: Brief, chart: Path | None) -> str:
    rows = [
        (name, label)
        for name, label in HEADLINE_SERVERS
        if any((name, w) in brief.cells for w, _ in HEADLINE_WORKLOADS)
    ]
    if not rows:
        return ""
    stamp = brief.when.split(" · ")[0][:10]
    host = brief.host.removeprefix("Host: ")
    out = [
        f"Measured {stamp} · {host}.",
        "",
        "| server | " + " | ".join(f"{title} ({brief.units.get(w, '')})" for w, title in HEADLINE_WORKLOADS) + " |",
        "|---|" + "---:|" * len(HEADLINE_WORKLOADS),
    ]
    for name, label in rows:
        out.append(
            f"| {label} | " + " | ".join(brief.cells.get((name, w), "n/a") for w, _ in HEADLINE_WORKLOADS) + " |"
        )
    marks = " ".join(brief.cells.get((n, w), "") for n, _ in rows for w, _ in HEADLINE_WORKLOADS)
    notes = []
    if "†" in marks:
        notes.append("† the load generator's core was full: the server may be faster than shown.")
    if "error" in marks:
        notes.append("A figure with errors is not valid.")
    if "failed" in marks:
        notes.append("`failed`: the server crashed, hung or did not start.")
    if notes:
        out += ["", " ".join(notes)]
    if chart is not None:
        out += ["", f"![the table above as bars]({chart.relative_to(ROOT)})"]
    return "\n".join(out) + "\n"


def replace_between(path: Path, markers: tuple[str, str], text: str) -> None:
    start, end = markers
    body = path.read_text()
    if body.count(start) != 1 or body.count(end) != 1 or body.index(start) > body.index(end):
        shown = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
        raise ValueError(f"{shown} needs one {start} ... {end} pair")
    head, rest = body.split(start, 1)
    _, tail = rest.split(end, 1)
    path.write_text(f"{head}{start}\n{text.strip()}\n{end}{tail}")


def draw(brief: Brief, path: Path) -> bool:
    """The headline as bars, one panel per workload; False when matplotlib is missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    rows = [(n, label) for n, label in HEADLINE_SERVERS]
    fig, axes = plt.subplots(1, len(HEADLINE_WORKLOADS), figsize=(4.2 * len(HEADLINE_WORKLOADS), 3.4))
    for ax, (w, title) in zip(axes, HEADLINE_WORKLOADS):
        shown = [(label, number(brief.cells.get((n, w), "")), n) for n, label in rows]
        shown = [(label, v, n) for label, v, n in shown if v]
        ys = list(range(len(shown)))
        colors = [
            "#888888" if n == "c-reference" else "#1f77b4" if n.startswith("ucall-") else "#ff7f0e" for _, _, n in shown
        ]
        ax.barh(ys, [v for _, v, _ in shown], color=colors)
        ax.set_yticks(ys)
        ax.set_yticklabels([label for label, _, _ in shown], fontsize=8)
        ax.invert_yaxis()
        unit = brief.units.get(w, "")
        better = "lower" if "p50" in unit else "higher"
        ax.set_title(f"{title}: {unit}, {better} is better", fontsize=9)
        ax.tick_params(axis="x", labelsize=8)
    fig.suptitle(f"{brief.when.split(' · ')[0][:10]} · {brief.host.removeprefix('Host: ')}", fontsize=7)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=90)
    return True


def chart(brief_path: Path, path: Path) -> bool:
    """Draws here, or with the peers' interpreter, which has matplotlib (setup_peers.sh)."""
    if draw(read_brief(brief_path.read_text()), path):
        return True
    peers = ROOT / PEERS_PY
    if not peers.exists():
        return False
    env = dict(os.environ, PYTHONPATH=str(ROOT / "benches"))
    cmd = [str(peers), "-m", "ucallbench", "publish", "--chart-only", str(brief_path)]
    return subprocess.run(cmd, cwd=ROOT, env=env, timeout=120).returncode == 0


def main(argv: list[str]) -> int:
    chart_only = "--chart-only" in argv
    args = [a for a in argv if a != "--chart-only"]
    source = Path(args[0]) if args else RESULTS / "latest-brief.md"
    if not source.exists():
        print(f"publish: {source} is missing: run python -m ucallbench first", file=sys.stderr)
        return 1
    if chart_only:
        return 0 if draw(read_brief(source.read_text()), CHART) else 1
    text = source.read_text()
    drawn = chart(source, CHART)
    if not drawn:
        print(
            "publish: matplotlib is missing here and in benches/.venv-peers: README.md keeps no chart", file=sys.stderr
        )
    try:
        replace_between(BENCHMARKS, FULL, text)
        replace_between(README, HEADLINE, headline(read_brief(text), CHART if drawn else None))
    except ValueError as e:
        print(f"publish: {e}", file=sys.stderr)
        return 1
    print(f"publish: {BENCHMARKS.relative_to(ROOT)} and README.md now show {source}")
    return 0
