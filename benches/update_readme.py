#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Copies the latest benchmark table into README.md, between the markers
`<!-- bench:start -->` and `<!-- bench:end -->`.

    python3 benches/update_readme.py [benches/results/latest-brief.md]

`make bench` runs it after benches/run.py. Only the text between the markers changes.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
START, END = "<!-- bench:start -->", "<!-- bench:end -->"


def main() -> int:
    source = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "benches" / "results" / "latest-brief.md"
    readme = ROOT / "README.md"
    text = readme.read_text()
    if text.count(START) != 1 or text.count(END) != 1 or text.index(START) > text.index(END):
        print(f"update_readme: README.md needs one {START} ... {END} pair", file=sys.stderr)
        return 1
    if not source.exists():
        print(f"update_readme: {source} is missing: run benches/run.py first", file=sys.stderr)
        return 1
    table = source.read_text().strip()
    head, rest = text.split(START, 1)
    _, tail = rest.split(END, 1)
    readme.write_text(f"{head}{START}\n{table}\n{END}{tail}")
    print(f"update_readme: README.md now shows {source}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
