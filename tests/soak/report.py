# SPDX-License-Identifier: Apache-2.0
"""The soak run's table (Markdown) and plot (PNG: RSS, file descriptors, threads, requests)."""

from __future__ import annotations

from pathlib import Path

from soak import GROWTH, JUDGED_FROM_SECONDS, Result


def table(results: list[Result]) -> str:
    lines = [
        "| server | engine | seconds | requests | failures | RSS MiB (start → end) | fds | threads | verdict |",
        "|---|---|---:|---:|---:|---|---|---|---|",
    ]
    for r in results:
        requests = r.samples[-1].requests if r.samples else 0

        def cell(name: str, scale: float = 1.0, r: Result = r) -> str:
            if name not in r.growth:
                return "-"
            first, last, growth = r.growth[name]
            return f"{first / scale:.1f} → {last / scale:.1f} ({growth:+.1%})"

        verdict = "pass" if r.passed else "FAIL: " + "; ".join(r.problems)
        lines.append(
            f"| {r.server} | {r.engine} | {r.seconds:.0f} | {requests} | {len(r.failures)} | "
            f"{cell('rss_kib', 1024)} | {cell('fds')} | {cell('threads')} | {verdict} |"
        )
    lines.append("")
    lines.append(
        f"Growth is the median of the last tenth of the samples against the median of the first "
        f"tenth after the warm-up; more than {GROWTH:.0%} fails a run of {JUDGED_FROM_SECONDS:.0f} s or more "
        "(a shorter one is judged on its replies and the server's survival only)."
    )
    for r in results:
        lines.append("")
        lines.append(f"{r.server} / {r.engine}: " + ", ".join(f"{k} {v}" for k, v in sorted(r.counts.items())))
        for failure in r.failures[:10]:
            lines.append(f"  - {failure}")
    return "\n".join(lines) + "\n"


def plot(result: Result, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    t = [s.seconds for s in result.samples]
    fig, axes = plt.subplots(4, 1, figsize=(9, 9), sharex=True)
    series = [
        ("RSS (MiB)", [s.rss_kib / 1024 for s in result.samples]),
        ("open fds", [s.fds for s in result.samples]),
        ("threads (+ io_uring workers)", [s.threads for s in result.samples]),
        ("requests/s", [0] + [(b.requests - a.requests) / max(b.seconds - a.seconds, 1e-9)
                             for a, b in zip(result.samples, result.samples[1:])]),
    ]
    axes[2].plot(t, [s.threads + s.io_workers for s in result.samples], linewidth=1, linestyle="--", color="grey")
    for ax, (label, values) in zip(axes, series):
        ax.plot(t, values, linewidth=1)
        ax.set_ylabel(label)
        ax.axvline(result.warmup, color="grey", linestyle=":", linewidth=1)
        ax.grid(True, alpha=0.3)
    axes[-1].set_xlabel("seconds (dotted: end of warm-up)")
    verdict = "pass" if result.passed else "FAIL"
    fig.suptitle(f"soak: {result.server} server, {result.engine} engine: {verdict}")
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)
