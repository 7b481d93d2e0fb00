# SPDX-License-Identifier: Apache-2.0
"""What the scale test and the chaos test share: a run of faults under traffic, and the
ledger check of what ran.

Both put three backends behind a balancer, offer calls at a steady rate (each with a key
its backend appends to a ledger before it answers) and bring faults one after the other;
they differ in where the pieces run (loopback, or network namespaces) and in the faults.
"""

from __future__ import annotations

import collections
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def drive(
    kind: str,
    backends: Sequence[Any],
    balancer: Any,
    client: Any,
    faults: Sequence[tuple[str, Callable[[], None]]],
    seconds: float,
    windows: list[Any],
) -> float:
    """Start the backends and the balancer, run the client's traffic for `seconds` with the
    faults spread over it (each at its share of the time, and 0.5 s clear of the window
    before it, so that no call falls in two windows), then stop everything. Returns when
    the traffic began."""
    stop_watch = threading.Event()
    began = time.monotonic()
    try:
        for backend in backends:
            backend.start()
        for backend in backends:
            backend.wait_serving()
        balancer.start()
        for backend in backends:
            balancer.wait_in_service(backend)
        threading.Thread(target=balancer.watch, args=(stop_watch,), daemon=True).start()
        traffic = threading.Thread(target=client.run, args=(kind,), daemon=True)
        began = time.monotonic()
        traffic.start()
        for i, (name, fault) in enumerate(faults):
            due = began + seconds * (0.05 + 0.9 * i / len(faults))
            if windows:
                due = max(due, windows[-1].end + 0.5)
            time.sleep(max(due - time.monotonic(), 0))
            log(f"{kind}: fault {i + 1} of {len(faults)}: {name}")
            fault()
        traffic.join(seconds + 60)
    finally:
        stop_watch.set()
        balancer.stop()
        for backend in backends:
            backend.kill_all()
    return began


@dataclass
class Ledger:
    """What the backends' ledgers say of a run's calls."""

    counts: collections.Counter[str]  # how often each key ran
    where: dict[str, str]  # in which process's ledger
    answered: list[Any]  # the calls answered
    missing: list[str]  # answered, yet in no ledger
    twice: list[str]  # keys that ran more than once


def check_ledger(ledgers: Path, tag: str, outcomes: Sequence[Any]) -> Ledger:
    """Read the ledgers of the run `tag` against the client's `outcomes`."""
    counts: collections.Counter[str] = collections.Counter()
    where: dict[str, str] = {}
    for path in ledgers.glob("*.ledger"):
        for line in path.read_text().splitlines():
            if line.startswith(f"{tag}-"):
                counts[line] += 1
                where[line] = path.stem
    answered = [o for o in outcomes if o.kind == "ok"]
    return Ledger(
        counts=counts,
        where=where,
        answered=answered,
        missing=[o.key for o in answered if counts[o.key] == 0],
        twice=sorted(k for k, n in counts.items() if n > 1),
    )
