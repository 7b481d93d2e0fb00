# SPDX-License-Identifier: Apache-2.0
"""The soak's verdict (tests/soak/soak.py `judge`) on made-up samples: growth after the
warm-up fails a long run, and a server with a thread pool is held to the pool's bound."""

from __future__ import annotations

import sys

from conftest import REPO_ROOT

sys.path.insert(0, str(REPO_ROOT / "tests" / "soak"))
import soak  # noqa: E402


def run(server: str, threads: list[int], rss: list[int] | None = None, seconds: float = 600.0) -> soak.Result:
    result = soak.Result(server, "uring", seconds, warmup=min(60.0, max(5.0, seconds * 0.2)))  # as soak() sets it
    rss = rss or [50_000] * len(threads)
    for i, (t, r) in enumerate(zip(threads, rss)):
        result.samples.append(soak.Sample(float(i * seconds / len(threads)), r, 40, t, 0, i * 1000))
    soak.judge(result)
    return result


def climbing(start: int, end: int, n: int = 100) -> list[int]:
    return [start + (end - start) * i // (n - 1) for i in range(n)]


def test_steady_resources_pass() -> None:
    assert run("rust", [3] * 100).problems == []


def test_growth_after_the_warm_up_fails_a_long_run() -> None:
    problems = run("rust", [3] * 100, rss=climbing(50_000, 60_000)).problems
    assert any(p.startswith("rss_kib grew") for p in problems), problems
    problems = run("c", climbing(3, 6)).problems
    assert any(p.startswith("threads grew") for p in problems), problems


def test_a_short_pass_is_judged_on_replies_only() -> None:
    assert run("rust", [3] * 100, rss=climbing(50_000, 60_000), seconds=20.0).problems == []


def test_the_python_pool_is_held_to_its_bound_not_to_growth() -> None:
    # 27 -> 132 threads on io_uring under load: the pool filling, within 64 per worker x 2.
    assert run("python", climbing(27, 132)).problems == []
    problems = run("python", climbing(27, 27 + soak.POOL_THREADS["python"] + 1)).problems
    assert any("above the pool's bound" in p for p in problems), problems
