# SPDX-License-Identifier: Apache-2.0
"""The batching benchmark's goal lines and table (benches/batching.py), on figures made
up here; and its model: batching changes no answer. No server and no load."""

from __future__ import annotations

import batching  # benches/batching.py (pythonpath in pyproject.toml)
import numpy as np
from model import classify  # benches/batch_apps/model.py, put on the path by batching


def row(server: str, callers: int, rps: int, p50: float, p99: float) -> dict:
    return {"server": server, "callers": callers, "calls_per_s": rps, "p50_ms": p50, "p99_ms": p99, "errors": 0}


def result(batched_rps: int, ray_rps: int, one_caller_p50: float) -> dict:
    rows = [
        row("UCall, unbatched", 64, 1000, 60.0, 70.0),
        row("UCall @server.batch", 64, batched_rps, 8.0, 12.0),
        row("Ray Serve @serve.batch", 64, ray_rps, 20.0, 40.0),
        row("UCall, unbatched", 1, 900, 1.00, 1.2),
        row("UCall @server.batch", 1, 880, one_caller_p50, 1.3),
    ]
    return {"rows": rows, "notes": {"full_batch_ms": 5.0, "blas_driver": "openblas 1 thread(s)", "ray": "ran"}, "seconds": 1}


def test_goals_met_and_missed():
    met = batching.verdicts(result(batched_rps=6000, ray_rps=2500, one_caller_p50=1.05))
    assert all(line.endswith(": met") for line in met), met
    assert len(met) == 4
    missed = batching.verdicts(result(batched_rps=4000, ray_rps=2500, one_caller_p50=1.5))
    assert [line.endswith("NOT met") for line in missed] == [True, False, True, True], missed


def test_one_caller_is_judged_on_the_pairs_and_faster_is_no_miss():
    faster = batching.verdicts(result(batched_rps=6000, ray_rps=2500, one_caller_p50=0.7))
    assert faster[-1].endswith(": met") and "(-30%," in faster[-1], faster
    paired = result(batched_rps=6000, ray_rps=2500, one_caller_p50=1.5)  # the rows' medians: +50 %
    paired["notes"]["one_caller_pairs"] = [1.02, 1.3, 1.05, 0.98, 1.08]
    line = batching.verdicts(paired)[-1]
    assert line.endswith(": met") and "(+5%, median of 5 alternated pairs" in line, line
    paired["notes"]["one_caller_pairs"] = [1.2, 1.15, 1.05]
    assert batching.verdicts(paired)[-1].endswith("NOT met")


def test_median_row_takes_each_figure_s_median():
    runs = [row("UCall, unbatched", 1, rps, p50, 2.0) for rps, p50 in ((900, 0.7), (1000, 0.9), (800, 1.2))]
    merged = batching.median_row(runs)
    assert (merged["calls_per_s"], merged["p50_ms"], merged["errors"]) == (900, 0.9, 0)


def test_table_lists_every_row_and_goal():
    text = batching.table(result(batched_rps=6000, ray_rps=2500, one_caller_p50=1.05))
    assert text.startswith("## Dynamic batching")
    assert text.count("| UCall @server.batch |") == 2
    assert "6.0x (goal >= 5x)" in text


def test_batches_answer_as_single_calls():
    x = np.random.default_rng(5).standard_normal((8, 1024)).astype(np.float32)
    together = classify(x)
    assert [int(classify(x[i : i + 1])[0]) for i in range(8)] == together.tolist()
