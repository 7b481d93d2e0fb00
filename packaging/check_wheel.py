# SPDX-License-Identifier: Apache-2.0
"""What the Python artifacts must hold: run by packaging/dist.sh after building them.

    python packaging/check_wheel.py dist/ucall-*.whl dist/ucall-*.tar.gz
"""

from __future__ import annotations

import re
import sys
import tarfile
import zipfile


def wheel_problems(path: str) -> list[str]:
    with zipfile.ZipFile(path) as wheel:
        names = wheel.namelist()
        metadata_name = next(n for n in names if n.endswith(".dist-info/METADATA"))
        metadata = wheel.read(metadata_name).decode()
        tag = wheel.read(metadata_name.replace("METADATA", "WHEEL")).decode()
    problems = []
    if not any(re.search(r"\.dist-info/licenses/LICENSE$", n) for n in names):
        problems.append("no LICENSE under .dist-info/licenses/")
    for extra in ("numpy", "image"):
        if f"Provides-Extra: {extra}" not in metadata:
            problems.append(f"the extra {extra!r} is missing")
    if "Requires-Python: >=3.9" not in metadata:
        problems.append("Requires-Python is not >=3.9")
    if "Tag: cp39-abi3-" not in tag:
        problems.append(f"not an abi3 wheel for CPython 3.9+: {tag!r}")
    for required in ("ucall/__init__.py", "ucall/py.typed", "ucall/_ucall.pyi", "ucall/testing.py"):
        if required not in names:
            problems.append(f"{required} is missing")
    if not any(re.fullmatch(r"ucall/_ucall\.abi3\.so", n) for n in names):
        problems.append("the extension module ucall/_ucall.abi3.so is missing")
    if any(n.startswith("tests/") or "/tests/" in n for n in names):
        problems.append("test files are inside")
    return problems


def sdist_problems(path: str) -> list[str]:
    with tarfile.open(path) as sdist:
        names = [n.split("/", 1)[1] for n in sdist.getnames() if "/" in n]
    problems = []
    for required in ("LICENSE", "pyproject.toml", "Cargo.toml", "Cargo.lock", "python/ucall/__init__.py"):
        if required not in names:
            problems.append(f"{required} is missing")
    if not any(n.startswith("crates/ucall-core/src/") for n in names):
        problems.append("the core's sources are missing")
    return problems


def main() -> int:
    wheel, sdist = sys.argv[1:3]
    problems = [f"{wheel}: {p}" for p in wheel_problems(wheel)] + [f"{sdist}: {p}" for p in sdist_problems(sdist)]
    for problem in problems:
        print(f"check_wheel: {problem}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
