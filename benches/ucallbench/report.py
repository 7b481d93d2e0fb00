# SPDX-License-Identifier: Apache-2.0
"""Reporting: medians, the Markdown tables, the goals table and the chart."""

from __future__ import annotations

import json
import os
import statistics
from pathlib import Path

from ucallbench.config import (
    CLIENT_BOUND_CPU,
    CLIENT_CPU,
    LOADAVG_LIMIT,
    OTHER_CPU_LIMIT,
    PEERS_PY,
    RESULTS,
    ROOT,
    SERVER_CPU,
)
from ucallbench.goals import TARGETS, fmt_target, goal_ratios, ratio_id
from ucallbench.processes import BenchError, run_group, say
from ucallbench.servers import SERVERS, Server
from ucallbench.workloads import GROUPS, METRICS, WORKLOADS, Workload, skip_reason

# ---------------------------------------------------------------- reporting


def median_of(runs: list[dict], key: str) -> float | None:
    values = [r["result"][key] for r in runs if r["result"].get(key) is not None]
    return statistics.median(values) if values else None


def summarize(runs: list[dict]) -> dict:
    """Median figures for every (server, workload)."""
    groups: dict[tuple[str, str], list[dict]] = {}
    for r in runs:
        if "result" in r:
            groups.setdefault((r["server"], r["workload"]), []).append(r)
    summary: dict[str, dict[str, dict]] = {}
    keys = [
        "requests_per_s",
        "calls_per_s",
        "bytes_per_s",
        "latency_mean_us",
        "latency_p50_us",
        "latency_p99_us",
        "latency_p999_us",
        "client_cpu_percent",
        "server_cpu_percent",
        "other_cpu_percent",
        "steal_percent",
    ]
    for (server, workload), rs in groups.items():
        entry = {k: median_of(rs, k) for k in keys}
        entry["runs"] = len(rs)
        entry["errors"] = sum(r["result"].get("errors", 0) for r in rs)
        entry["disturbed_runs"] = sum(1 for r in rs if r["disturbed"])
        entry["requests_per_s_runs"] = [r["result"]["requests_per_s"] for r in rs]
        entry["latency_p50_us_runs"] = [r["result"].get("latency_p50_us") for r in rs]
        chains = [r["result"]["chains"]["completed"] for r in rs if "chains" in r["result"]]
        if chains:
            entry["chains_completed_runs"] = chains
        summary.setdefault(server, {})[workload] = entry
    return summary


def fmt_value(metric: str, v: float | None) -> str:
    if v is None:
        return "—"
    if metric in ("rps", "cps"):
        return f"{v:,.0f}"
    return f"{v:,.1f}"


def fmt_opt(v: float | None, spec: str) -> str:
    return "—" if v is None else format(v, spec)


def speedup(metric: str, ours: float | None, other: float | None) -> float | None:
    """How many times faster `ours` is: > 1 is faster, whatever the metric."""
    if not ours or not other:
        return None
    return ours / other if metric in ("rps", "cps") else other / ours


def cell(wl: Workload, srv: Server, summary: dict, failures: dict, notes: set) -> str:
    """One figure of the table, with its marks, or why there is none."""
    e = summary.get(srv.name, {}).get(wl.name)
    if e is None:
        why = failures.get((srv.name, wl.name))
        if why:
            notes.add("failed")
            return why if len(why) <= 60 else why[:57] + "…"
        return "n/a"
    key, _ = METRICS[wl.metric]
    text = fmt_value(wl.metric, e.get(key))
    if (srv.name, wl.name) in failures:
        text += " ‡"
        notes.add("partly failed")
    if e["errors"]:
        text += f" ({e['errors']} errors)"
        notes.add("errors")
    if e["disturbed_runs"]:
        text += " *"
        notes.add("disturbed")
    if wl.metric != "p50" and (e.get("client_cpu_percent") or 0) >= CLIENT_BOUND_CPU:
        text += " †"
        notes.add("client-bound")
    return text


def markdown(
    meta: dict,
    summary: dict,
    servers: list[Server],
    workloads: list[Workload],
    failures: dict,
    brief: bool = False,
    paired: dict[str, dict] | None = None,
) -> str:
    """The results as Markdown; `brief` leaves out the details (for README.md)."""
    lines = []
    if not brief:
        lines += ["# UCall benchmark results", ""]
    lines += [
        f"{meta['started']} · {'quick' if meta['quick'] else 'full'} run · "
        f"{meta['duration_s']:g} s per figure after {meta['warmup_s']:g} s warm-up · "
        f"median of {meta['reps']} run(s), interleaved across servers",
        "",
        f"Host: {meta['host']['cpu']}, {meta['host']['cpus']} CPUs, Linux {meta['host']['kernel']} · "
        f"server on CPU {SERVER_CPU}, load generator on CPU {CLIENT_CPU} · commit {meta['commit']}",
        "",
    ]
    notes: set[str] = set()
    for group, heading in GROUPS.items():
        wls = [w for w in workloads if w.group == group]
        rows = [s for s in servers if any(skip_reason(s, w.proto, w) != "" for w in wls)]
        if not wls or not rows:
            continue
        lines += [f"### {heading}", ""]
        header = ["server"] + [f"{w.name} ({METRICS[w.metric][1]})" for w in wls]
        lines.append("| " + " | ".join(header) + " |")
        lines.append("|---|" + "---:|" * len(wls))
        for s in rows:
            cells = [f"`{s.name}`"]
            for w in wls:
                reason = skip_reason(s, w.proto, w)
                cells.append("n/a" if reason == "" else reason if reason else cell(w, s, summary, failures, notes))
            lines.append("| " + " | ".join(cells) + " |")
        lines.append("")
    lines += goals_section(summary, servers, workloads, failures, notes, paired)
    lines += legend(notes)

    ours = [s for s in servers if s.kind == "ucall"]
    others = [s for s in servers if s.kind != "ucall"]
    if ours and others:
        lines += ["", "### Ratios", ""]
        lines.append(
            "How many times faster each UCall server is than each other server, per workload (its "
            "req/s divided by theirs; for latency, their p50 divided by its): above 1 UCall is faster."
        )
        lines.append("")
        for o in ours:
            wls = [w for w in workloads if skip_reason(o, w.proto, w) is None]
            pairs = [(x, [speedup(w.metric, val(summary, o, w), val(summary, x, w)) for w in wls]) for x in others]
            pairs = [(x, r) for x, r in pairs if any(v is not None for v in r)]
            if not wls or not pairs:
                continue
            lines.append(f"| `{o.name}` / … | " + " | ".join(w.name for w in wls) + " |")
            lines.append("|---|" + "---:|" * len(wls))
            for x, ratios in pairs:
                lines.append(f"| `{x.name}` | " + " | ".join("—" if v is None else f"{v:.2f}" for v in ratios) + " |")
            lines.append("")
    if brief:
        return "\n".join(lines) + "\n"

    lines += ["", "## Details (medians)", ""]
    lines.append(
        "| workload | server | req/s | MB/s | p50 µs | p99 µs | p99.9 µs | errors | client CPU % | server CPU % "
        "| server CPU µs/req | other CPU % | steal % | runs (disturbed) |"
    )
    lines.append("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for wl in workloads:
        for s in servers:
            e = summary.get(s.name, {}).get(wl.name)
            if not e:
                continue
            mbps = e["bytes_per_s"] / 1e6 if e.get("bytes_per_s") is not None else None
            lines.append(
                f"| {wl.name} | {s.name} | {fmt_opt(e['requests_per_s'], ',.0f')} | {fmt_opt(mbps, ',.1f')} | "
                f"{fmt_opt(e['latency_p50_us'], '.1f')} | {fmt_opt(e['latency_p99_us'], '.1f')} | "
                f"{fmt_opt(e['latency_p999_us'], '.1f')} | {e['errors']} | "
                f"{fmt_opt(e['client_cpu_percent'], '.0f')} | {fmt_opt(e['server_cpu_percent'], '.0f')} | "
                f"{fmt_opt(server_us_per_request(e), '.2f')} | "
                f"{fmt_opt(e['other_cpu_percent'], '.0f')} | {fmt_opt(e['steal_percent'], '.0f')} | "
                f"{e['runs']} ({e['disturbed_runs']}) |"
            )
    if failures:
        lines += ["", "## Failures", ""]
        for (server, workload), why in sorted(failures.items()):
            lines.append(f"- `{server}`{' / ' + workload if workload else ''}: {why}")
    lines += ["", "## Servers", ""]
    for s in servers:
        lines.append(f"- `{s.name}`: {s.description}")
    lines += ["", "## Workloads", ""]
    for wl in workloads:
        lines.append(f"- `{wl.name}` ({wl.proto}): {wl.title}")
    return "\n".join(lines) + "\n"


def goals_section(
    summary: dict,
    servers: list[Server],
    workloads: list[Workload],
    failures: dict,
    notes: set,
    paired: dict[str, dict] | None = None,
) -> list[str]:
    """The ratios of the speed goals, each with its bound and whether this run meets it."""
    ratios = goal_ratios(servers, workloads)
    if not ratios:
        return []
    paired = paired or {}
    names = {s.name: s for s in servers}
    wl_names = {w.name: w for w in workloads}
    lines = [
        "### Speed goals",
        "",
        "*tables* divides the medians above: req/s by req/s (above 1, the first is faster) or p50 by p50 "
        "(below 1, the first is faster). *paired* measures the same ratio again with both servers up at once, "
        "alternating A B B A in each round, and gives the median of the rounds' ratios (and their range); "
        "where it exists, it decides *met*. A figure with errors or without a value gives no ratio. "
        "*server CPU* is what each server spent per request in the tables' runs (µs, user and kernel): "
        "where the load generator's core is full (†), it still tells the two apart.",
        "",
        "| goal | servers | figures | tables | paired (range) | goal bound | met | server CPU µs/req |",
        "|---|---|---|---:|---:|---:|---|---:|",
    ]

    def figure(srv: Server, wl: Workload) -> str:
        reason = skip_reason(srv, wl.proto, wl)
        return reason if reason else cell(wl, srv, summary, failures, notes)

    met_count = failed_count = 0
    for r in ratios:
        srv, wl = names[r.num[0]], wl_names[r.num[1]]
        cpu_shown = "—"
        if r.den is None:
            e = summary.get(srv.name, {}).get(wl.name)
            rps = e.get("requests_per_s") if e and not e["errors"] else None
            size = len(wl.echo or b"")
            figures = f"{size:,} B × " + (f"{rps:,.1f} req/s" if rps else figure(srv, wl))
            value = size * rps / 1e9 if rps else None
            shown = "—" if value is None else f"{value:.2f} GB/s"
            who = f"`{srv.name}`"
        else:
            dsrv, dwl = names[r.den[0]], wl_names[r.den[1]]
            a, b = val(summary, srv, wl), val(summary, dsrv, dwl)
            figures = f"{figure(srv, wl)} / {figure(dsrv, dwl)} {METRICS[wl.metric][1]}"
            value = a / b if a and b else None
            shown = "—" if value is None else f"{value:.2f}"
            who = f"`{srv.name}`" if srv is dsrv else f"`{srv.name}` / `{dsrv.name}`"
            ea, eb = summary.get(srv.name, {}).get(wl.name), summary.get(dsrv.name, {}).get(dwl.name)
            ca, cb = (server_us_per_request(e) if e else None for e in (ea, eb))
            if ca and cb:
                cpu_shown = f"{ca:.2f} / {cb:.2f}"
        pair = paired.get(ratio_id(r))
        pair_shown = "—"
        if pair is not None:
            if pair["ratio"] is None:
                pair_shown = "no figure"
                value = None  # errors or a failed start while paired: nothing decides
            else:
                pair_shown = f"{pair['ratio']:.2f} ({pair['low']:.2f}–{pair['high']:.2f})"
                if pair["disturbed"]:
                    pair_shown += " (disturbed)"
                value = pair["ratio"]
        bound = TARGETS.get(r.target)
        if value is None:
            met = "no figure"
        elif bound is None:
            met = "—"
        elif (value >= bound[1]) if bound[0] == ">=" else (value <= bound[1]):
            met = "yes"
            met_count += 1
        else:
            met = "**no**"
            failed_count += 1
        lines.append(
            f"| {r.goal} | {who} | {figures} | {shown} | {pair_shown} | {fmt_target(r.target)} | {met} | {cpu_shown} |"
        )
    lines += ["", f"Goals with a bound: {met_count} met, {failed_count} not met in this run.", ""]
    return lines


def server_us_per_request(e: dict) -> float | None:
    """The server's CPU time per request (user and kernel, µs). Where the load generator's
    core is the bottleneck (†), req/s is capped alike for every fast server, and this is the
    figure that still tells their costs apart."""
    if not e.get("server_cpu_percent") or not e.get("requests_per_s"):
        return None
    return e["server_cpu_percent"] / 100 * 1e6 / e["requests_per_s"]


def val(summary: dict, srv: Server, wl: Workload) -> float | None:
    e = summary.get(srv.name, {}).get(wl.name)
    if not e or e["errors"]:
        return None
    return e.get(METRICS[wl.metric][0])


def legend(notes: set[str]) -> list[str]:
    out = ["req/s and calls/s: higher is better; p50 µs: lower is better. n/a: the workload does not apply."]
    if "disturbed" in notes:
        out.append(
            f"`*` disturbed: at least one run started with a 1-minute load average above {LOADAVG_LIMIT}, or other "
            f"processes used more than {OTHER_CPU_LIMIT:g} % of a CPU while it ran."
        )
    if "client-bound" in notes:
        out.append(
            f"`†` the load generator used at least {CLIENT_BOUND_CPU:g} % of its CPU: the figure may be bounded by "
            "the client rather than the server, and ratios against it understate the difference."
        )
    if "errors" in notes:
        out.append("`(N errors)`: failed or unexpected replies summed over the runs; such a figure is not valid.")
    if "partly failed" in notes:
        out.append("`‡` some runs of this figure failed (see *Failures* in latest.md); the median is of the others.")
    if "failed" in notes:
        out.append("`failed: …`: the server could not be installed, did not start, or died; see the log.")
    return out


# The results the chart is drawn from, when another interpreter draws it.
CHART_INPUT = RESULTS / "latest.json"


def chart_from(results: Path, path: Path) -> None:
    """Draws the chart of a results file (run by the interpreter that has matplotlib)."""
    data = json.loads(results.read_text())
    names = [x["name"] for x in data["meta"]["servers"]]
    servers = [x for x in SERVERS if x.name in names]
    workloads = [w for w in WORKLOADS if w.name in {x["name"] for x in data["meta"]["workloads"]}]
    chart(path, data["summary"], servers, workloads)


def chart(path: Path, summary: dict, servers: list[Server], workloads: list[Workload]) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        # The peers' venv has matplotlib (benches/setup_peers.sh): draw there.
        if (ROOT / PEERS_PY).exists() and CHART_INPUT.exists():
            try:
                res = run_group(
                    [
                        str(ROOT / PEERS_PY),
                        "-m",
                        "ucallbench",
                        "--chart-from",
                        str(CHART_INPUT),
                        "--chart-to",
                        str(path),
                    ],
                    timeout=120,
                    capture=True,
                    env=dict(os.environ, PYTHONPATH=str(ROOT / "benches")),
                )
            except BenchError as e:
                say(f"the chart failed: {e}")
                return
            if res.returncode == 0:
                say(f"chart: {path.relative_to(ROOT)}")
            else:
                say(f"the chart failed: {res.stderr.strip()[-300:]}")
            return
        say("matplotlib is not installed: skipping the chart")
        return
    panels = [w for w in workloads if any(val(summary, s, w) for s in servers)]
    if not panels:
        return
    cols = 3
    rows = (len(panels) + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(5 * cols, 0.35 * len(servers) * rows + 1.2 * rows), squeeze=False)
    colors = {"reference": "#888888", "ucall": "#1f77b4", "peer": "#ff7f0e"}
    for ax, w in zip(axes.flat, panels):
        shown = [(s, val(summary, s, w)) for s in servers]
        shown = [(s, v) for s, v in shown if v]
        ys = range(len(shown))
        ax.barh(list(ys), [v for _, v in shown], color=[colors[s.kind] for s, _ in shown])
        ax.set_yticks(list(ys))
        ax.set_yticklabels([s.name for s, _ in shown], fontsize=8)
        ax.invert_yaxis()
        better = "higher" if w.metric != "p50" else "lower"
        ax.set_title(f"{w.name}: {METRICS[w.metric][1]} ({better} is better)", fontsize=9)
        ax.tick_params(axis="x", labelsize=8)
    for ax in list(axes.flat)[len(panels) :]:
        ax.axis("off")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    say(f"chart: {path.relative_to(ROOT)}")
