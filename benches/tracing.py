# SPDX-License-Identifier: Apache-2.0
"""What tracing costs per call on a Python server (docs/benchmarks.md, "Tracing").

The same `sum` procedure, served by UCall without OpenTelemetry, then with the
OpenTelemetry SDK configured and every call sampled (a SERVER span per call, exported by a
`BatchSpanProcessor` to an exporter that drops the spans, so no I/O is measured); FastAPI
(uvicorn) gets the same pair, the second with `FastAPIInstrumentor` (the
opentelemetry-instrumentation-fastapi package) and the same SDK set-up. Each row is loaded
by ucall-load over HTTP keep-alive; the figure is the server's CPU time (user + system,
from /proc, its span-exporting thread included) per answered call, by ucallbench.serving's
`measure` (as benches/middleware.py's). FastAPI runs in an environment of its own (--peers-python; benches/.venv-otel
by default: `python -m venv benches/.venv-otel && benches/.venv-otel/bin/pip install
fastapi uvicorn opentelemetry-sdk opentelemetry-instrumentation-fastapi`).

    python benches/tracing.py [--seconds 5] [--connections 8] [--rounds 3] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

from ucallbench.config import ROOT
from ucallbench.serving import ensure_load_bin, free_port, measure, python_env

SDK = """
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.sampling import ALWAYS_ON


class Dropped(SpanExporter):
    def export(self, spans):
        return SpanExportResult.SUCCESS


provider = TracerProvider(sampler=ALWAYS_ON)
provider.add_span_processor(BatchSpanProcessor(Dropped()))
trace.set_tracer_provider(provider)
"""
UCALL_APP = """
from ucall import Server

server = Server(threads=1)

@server
def sum(a: int, b: int) -> int:
    return a + b
"""
FASTAPI_APP = """
import sys
import uvicorn
from fastapi import Body, FastAPI

app = FastAPI()

@app.post("/sum")
async def sum_(a: int = Body(), b: int = Body()) -> int:
    return a + b
"""
FASTAPI_INSTRUMENTED = """
from opentelemetry.instrumentation.fastapi import FastAPIInstrumentor

FastAPIInstrumentor.instrument_app(app)
"""
FASTAPI_RUN = """
uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning", access_log=False)
"""
UCALL_TRACED = "UCall (Python), SDK, every call sampled"
FASTAPI_TRACED = "FastAPI, FastAPIInstrumentor, every call sampled"


def added(rows: list[dict[str, Any]], base: str, traced: str) -> float | None:
    """Median added server CPU µs per call of `traced` over `base`, pairing the rounds."""
    pairs = [
        t["cpu_us_per_call"] - b["cpu_us_per_call"]
        for b, t in zip([r for r in rows if r["server"] == base], [r for r in rows if r["server"] == traced])
        if b["cpu_us_per_call"] is not None and t["cpu_us_per_call"] is not None
    ]
    return statistics.median(pairs) if pairs else None


def table(rows: list[dict[str, Any]], seconds: float, connections: int, load: str) -> str:
    lines = [
        "| server | calls/s (median) | server CPU µs/call (median) | errors |",
        "|---|---:|---:|---:|",
    ]
    for name in dict.fromkeys(r["server"] for r in rows):
        mine = [r for r in rows if r["server"] == name]
        cpu = [r["cpu_us_per_call"] for r in mine if r["cpu_us_per_call"] is not None]
        shown = f"{statistics.median(cpu):.2f}" if cpu else "—"
        rps = statistics.median(r["calls_per_s"] for r in mine)
        lines.append(f"| {name} | {rps:,.0f} | {shown} | {sum(r['errors'] for r in mine)} |")
    ucall = added(rows, "UCall (Python)", UCALL_TRACED)
    fastapi = added(rows, "FastAPI", FASTAPI_TRACED)
    lines.append("")
    if ucall is not None:
        lines.append(f"- tracing on UCall (Python): {ucall:+.2f} µs of server CPU per call")
    if fastapi is not None:
        lines.append(f"- FastAPIInstrumentor on FastAPI: {fastapi:+.2f} µs of server CPU per call")
    if ucall is not None and fastapi:
        lines.append(f"- UCall's added cost is {ucall / fastapi:.2f} of FastAPI's (goal: at most 0.2)")
    lines.append(
        f"\n`sum(a, b)` over HTTP keep-alive, {connections} connections of `ucall-load`, {seconds:g} s per row "
        f"after 1 s of warm-up, rows alternated over the rounds; host load average {load}."
    )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--connections", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--peers-python", type=Path, default=ROOT / "benches" / ".venv-otel" / "bin" / "python")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    ensure_load_bin()
    connections = ["--connections", str(args.connections)]
    rows: list[dict[str, Any]] = []
    loads = []
    with tempfile.TemporaryDirectory() as folder:
        ucall_env = python_env(folder)
        body = '{"jsonrpc":"2.0","method":"sum","params":{"a":1,"b":2},"id":1}'
        ucall_load = [*connections, "--body-json", body, "--expect", '"result":3']
        fastapi_load = [*connections, "--path", "/sum", "--body-json", '{"a":1,"b":2}', "--expect", "3"]
        for _ in range(args.rounds):
            for label, module, code in (
                ("UCall (Python)", "plain", UCALL_APP),
                (UCALL_TRACED, "traced", SDK + UCALL_APP),
            ):
                (Path(folder) / f"{module}.py").write_text(code)
                port = free_port()
                command = [sys.executable, "-m", "ucall", "serve", f"{module}:server", "--port", str(port)]
                rows.append(measure(label, command, port, ucall_load, args.seconds, ucall_env))
            if args.peers_python.exists():
                for label, code in (("FastAPI", FASTAPI_APP), (FASTAPI_TRACED, SDK + FASTAPI_APP + FASTAPI_INSTRUMENTED)):
                    app = Path(folder) / "fastapi_app.py"
                    app.write_text(code + FASTAPI_RUN)
                    port = free_port()
                    command = [str(args.peers_python), str(app), str(port)]
                    rows.append(measure(label, command, port, fastapi_load, args.seconds))
            loads.append(os.getloadavg()[0])
    load = f"{min(loads):.1f} to {max(loads):.1f}"
    print(table(rows, args.seconds, args.connections, load))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2) + "\n")
    return 1 if any(row["errors"] or row["cpu_us_per_call"] is None for row in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
