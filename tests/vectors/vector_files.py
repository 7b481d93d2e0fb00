# SPDX-License-Identifier: Apache-2.0
"""A folder of vector files, read the one way every checker and suite reads them: each
`*.json` file checked by the folder's own `check(path) -> (vector, problems)`, problems
listed by file name, and the command line's report. Standard library only."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

Check = Callable[[Path], "tuple[dict[str, Any], list[str]]"]


class VectorError(ValueError):
    """A vector file does not follow the format."""


def load(directory: Path, check: Check) -> list[dict[str, Any]]:
    """Every vector in `directory`, sorted by file name. Raises VectorError if any is malformed."""
    vectors, report = [], []
    for path in sorted(directory.glob("*.json")):
        vector, problems = check(path)
        report += [f"{path.name}: {p}" for p in problems]
        vectors.append(vector)
    if report:
        raise VectorError("\n".join(report))
    return vectors


def problems(directory: Path, check: Check) -> list[str]:
    """All problems found in `directory`, as printable lines: no vector at all, a file that
    is no `.json`, and each file's own."""
    paths = sorted(directory.glob("*.json"))
    if not paths:
        return [f"{directory}: no *.json vector files"]
    others = sorted(p.name for p in directory.iterdir() if p.is_file() and p.suffix != ".json")
    report = [f"{name}: not a .json file" for name in others]
    for path in paths:
        _, found = check(path)
        report += [f"{path.name}: {p}" for p in found]
    return report


def report(directory: Path, found: list[str], what: str) -> int:
    """Print `found` (on stderr) or that `directory`'s files are well-formed; the exit status."""
    for line in found:
        print(line, file=sys.stderr)
    count = len(list(directory.glob("*.json")))
    if found:
        print(f"{len(found)} problem(s) in {count} {what} file(s)", file=sys.stderr)
        return 1
    print(f"{count} {what} files are well-formed")
    return 0
